"""Scripts uploaded to and run on the nodes (standard library + huggingface_hub only).

They are run as files or with `python3 -c`, never imported by the laptop side, except
protocol.py: the laptop<->node protocol both sides import.
"""
from functools import cache
from pathlib import Path

from k3deploy.remote import protocol


@cache
def script_text(name: str) -> str:
    """The source of a node-side script shipped inside the package."""
    path = Path(__file__).resolve().parent / name
    if not path.is_file():
        raise FileNotFoundError(f"no node-side script {name!r} in {path.parent}")
    return path.read_text()


def downloader_files(work: str) -> list[tuple[str, str]]:
    """(path on the node, source) of every file the node-side downloader needs, side by side
    in the work dir (protocol.DOWNLOADER_FILES)."""
    return [(f"{work}/{name}", script_text(name)) for name in protocol.DOWNLOADER_FILES]


@cache
def bundled(name: str) -> str:
    """A node-side script for `python3 -c`, with protocol.py ahead of it as module `protocol`
    (a -c program has no directory to import its siblings from)."""
    return ("import sys, types\n_protocol = types.ModuleType('protocol')\n"
            "sys.modules['protocol'] = _protocol\n"
            f"exec({script_text('protocol.py')!r}, _protocol.__dict__)\n" + script_text(name))
