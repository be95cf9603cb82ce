"""Scripts uploaded to and run on the nodes (standard library + huggingface_hub only).

They are run as files or with `python3 -c`, never imported by the laptop side.
"""
from functools import cache
from pathlib import Path


@cache
def script_text(name: str) -> str:
    """The source of a node-side script shipped inside the package."""
    path = Path(__file__).resolve().parent / name
    if not path.is_file():
        raise FileNotFoundError(f"no node-side script {name!r} in {path.parent}")
    return path.read_text()
