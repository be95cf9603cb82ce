"""Scripts uploaded to and run on the nodes (standard library + huggingface_hub only).

They are run as files, not imported by the laptop side; `script_path(name)` finds one to upload.
"""
from pathlib import Path

FETCH_WEIGHTS = "fetch_weights.py"


def script_path(name: str) -> Path:
    """Absolute path of a node-side script shipped inside the package."""
    path = Path(__file__).resolve().parent / name
    if not path.is_file():
        raise FileNotFoundError(f"no node-side script {name!r} in {path.parent}")
    return path
