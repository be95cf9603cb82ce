"""Scripts uploaded to and run on the nodes (standard library + huggingface_hub only).

They are run as files or with `python3 -c`, never imported by the laptop side, except
protocol.py (the laptop<->node protocol), thread_pool.py (the one pool of threads),
docker_inspect.py (the one reading of `docker inspect`, facts/docker.py) and the router's
router_admin.py and router_reconcile.py (a fleet's reconcile, on the laptop or a node), which
both sides import. The bottom layer: these files import nothing of k3deploy (they ship without
the package), and core may import them (.importlinter).
"""
import ast
import threading
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


# CPython 3.11's ast module keeps its recursion counter in shared state, so two threads
# parsing at once can fail with "AST constructor recursion depth mismatch" (gh-106905; it
# stopped a CI run on 3.11.7 while nodes gathered facts in parallel). One parse at a time,
# and each program is parsed once per process.
_AST_LOCK = threading.Lock()


def for_argv(source: str) -> str:
    """A program as shipped in a `python3 -c` argv, which every `ps` on the node shows: the
    same code without its docstrings and comments (ast round trip)."""
    with _AST_LOCK:
        return _stripped(source)


@cache
def _stripped(source: str) -> str:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree) + "\n"


def downloader_files(work: str) -> list[tuple[str, str]]:
    """(path on the node, source) of every file the node-side downloader needs, side by side
    in the work dir (protocol.DOWNLOADER_FILES)."""
    return [(f"{work}/{name}", script_text(name)) for name in protocol.DOWNLOADER_FILES]


@cache
def bundled(name: str, siblings: tuple[str, ...] = ("protocol.py",)) -> str:
    """A node-side script for `python3 -c`, with its siblings (protocol.py unless told) ahead
    of it as modules of their own names (a -c program has no directory to import them from)."""
    parts = ["import sys, types\n"]
    for module in siblings:
        mod = module.removesuffix(".py")
        parts.append(f"_m = types.ModuleType({mod!r})\nsys.modules[{mod!r}] = _m\n"
                     f"exec({for_argv(script_text(module))!r}, _m.__dict__)\n")
    return "".join(parts) + script_text(name)
