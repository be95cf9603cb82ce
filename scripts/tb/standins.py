"""DIR/standins: what every node sees (read-only) at /usr/local/bin.

The stand-in tools from scripts/tb/standins/ plus a `python3` (and `hf`) wrapper running
Debian's /usr/bin/python3 with a site dir holding the laptop venv's huggingface_hub version,
installed once into /var/cache/k3tb/nodepy-<version> and reused by every testbed.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

SCRIPTS_DIR = Path(__file__).resolve().parent.parent
REPO_ROOT = SCRIPTS_DIR.parent
STANDINS_SRC = SCRIPTS_DIR / "tb" / "standins"
CLI_TABLES = REPO_ROOT / "k3deploy" / "engines" / "cli_tables"
NVSMI_REAL = REPO_ROOT / "tests" / "fixtures" / "real" / "nvidia-smi"
NODEPY_ROOT = Path("/var/cache/k3tb")
NODE_PYTHON = "/usr/bin/python3"
COMPLETE_MARK = ".k3tb-complete"


class StandinError(RuntimeError):
    pass


def laptop_python() -> str:
    venv = REPO_ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def _python_output(python: str, code: str) -> str:
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        raise StandinError(f"{python}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def hub_version() -> str:
    return _python_output(laptop_python(),
                          "import importlib.metadata as m; print(m.version('huggingface_hub'))")


def ensure_nodepy(version: str) -> Path:
    """/var/cache/k3tb/nodepy-<version>, installed with pip on first use (under a lock)."""
    target = NODEPY_ROOT / f"nodepy-{version}"
    if (target / COMPLETE_MARK).exists():
        return target
    NODEPY_ROOT.mkdir(parents=True, exist_ok=True)
    os.chmod(NODEPY_ROOT, 0o755)
    with open(NODEPY_ROOT / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / COMPLETE_MARK).exists():
            _install_nodepy(version, target)
    return target


def _install_nodepy(version: str, target: Path) -> None:
    staging = target.with_name(f"{target.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    python = laptop_python()
    argv = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
            "--no-compile", "--target", str(staging), f"huggingface_hub=={version}"]
    node_version = _python_output(NODE_PYTHON, "import sys; print('%d.%d' % sys.version_info[:2])")
    laptop_version = _python_output(python, "import sys; print('%d.%d' % sys.version_info[:2])")
    if node_version != laptop_version:  # wheels must fit the node's python, not the laptop's
        argv += ["--python-version", node_version, "--only-binary=:all:"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise StandinError(f"installing huggingface_hub=={version} for the nodes failed:\n"
                           f"{proc.stderr.strip()[-2000:]}")
    # Byte-compile with the node's own python: nodes run as non-root and cannot write caches.
    subprocess.run([NODE_PYTHON, "-m", "compileall", "-q", str(staging)], capture_output=True)
    _make_world_readable(staging)
    (staging / COMPLETE_MARK).write_text(version + "\n")
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)


def _make_world_readable(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            mode = path.stat().st_mode
            extra = 0o555 if path.is_dir() or mode & 0o111 else 0o444
            os.chmod(path, mode | extra)


def build(tb_dir: Path) -> Path:
    """Fill DIR/standins; returns it."""
    dest = Path(tb_dir) / "standins"
    if dest.exists():
        shutil.rmtree(dest)
    if STANDINS_SRC.is_dir():
        shutil.copytree(STANDINS_SRC, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
        dest.mkdir()
    # The engines' option tables: the stand-ins parse with exactly what the real CLIs accept.
    shutil.copytree(CLI_TABLES, dest / "engine" / "cli_tables", dirs_exist_ok=True)
    # The sourced nvidia-smi transcripts (each with its .source): `topo -m` answers from them.
    shutil.copytree(NVSMI_REAL, dest / "real" / "nvidia-smi", dirs_exist_ok=True)
    _write_router_site(dest / "engine" / "router_site")
    _byte_compile(dest)
    nodepy = ensure_nodepy(hub_version())
    _write_wrapper(dest / "python3", f'exec {NODE_PYTHON} "$@"', nodepy)
    _write_wrapper(dest / "hf", f'exec {NODE_PYTHON} -c "import sys; from huggingface_hub.cli.hf '
                                f'import main; sys.argv[0] = \'hf\'; sys.exit(main())" "$@"', nodepy)
    _make_world_readable(dest)
    return dest


def _write_router_site(path: Path) -> None:
    """The laptop venv's site-packages holding smg (the test extra), for the router image's
    containers (standins/engine/router.py); nothing when smg is not installed there."""
    proc = subprocess.run([laptop_python(), "-c", "import os, smg; "
                           "print(os.path.dirname(os.path.dirname(smg.__file__)))"],
                          capture_output=True, text=True)
    if proc.returncode == 0 and path.parent.is_dir():
        path.write_text(proc.stdout.strip() + "\n")


def _byte_compile(dest: Path) -> None:
    """Nodes mount DIR/standins read-only, so python can never cache its bytecode there: without
    this every stand-in call (several per node per fact batch) recompiles tbstand from source.
    The pycs check the sources' mtimes, which copytree kept."""
    proc = subprocess.run([NODE_PYTHON, "-m", "compileall", "-q", str(dest)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise StandinError(f"byte-compiling the stand-ins failed:\n{proc.stdout.strip()[-2000:]}")


def _write_wrapper(path: Path, exec_line: str, nodepy: Path) -> None:
    path.write_text("#!/bin/sh\n"
                    "# k3tb: Debian's python3 with the testbed's huggingface_hub site dir\n"
                    f"PYTHONPATH={nodepy}${{PYTHONPATH:+:$PYTHONPATH}}\n"
                    "export PYTHONPATH\n"
                    f"{exec_line}\n")
    os.chmod(path, 0o755)
