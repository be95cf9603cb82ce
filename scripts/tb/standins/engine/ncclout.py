"""Where NCCL's debug lines go, as the library and C stdio send them.

NCCL 2.30.7 (NVIDIA/nccl@5067397c) src/debug.cc: `ncclDebugFile = stdout` (:37) and every line
is one vfprintf to it (:376), never flushed. With NCCL_DEBUG above VERSION and NCCL_DEBUG_FILE
set, ncclDebugInit expands the name once per process ("%h" -> gethostname() up to its first
'.', "%p" -> the pid, "%%" -> '%', any other "%x" kept as it is; :194-230), opens it with
fopen(name, "w") and makes it line-buffered (setlinebuf, :237-240); when fopen fails the lines
stay on stdout.

stdout itself is C stdio's: on a pipe (a container's stdout, read by dockerd's log copier)
glibc buffers it in blocks of the pipe's st_blksize, 4096 bytes (libio/filedoalloc.c
_IO_file_doallocate), written out when a block is full or at exit() (NVIDIA/nccl#1841,
sgl-project/sglang#3810: the lines reach `docker logs` late or never). PYTHONUNBUFFERED (any
non-empty value) makes CPython set stdout unbuffered for the C library too (cpython
Python/initconfig.c config_init_stdio: setvbuf(stdout, NULL, _IONBF, BUFSIZ)).
A process killed by a signal or ending in _exit() loses what the block still holds."""
import atexit
import os
import socket
import sys

BLOCK = 4096

_file = None        # the opened NCCL_DEBUG_FILE of this process (NCCL opens it once)
_file_tried = False
_held = []          # stdout's block buffer


def expand(name, host=None, pid=None):
    """NCCL_DEBUG_FILE's name as ncclDebugInit expands it."""
    host = (host if host is not None else socket.gethostname()).split(".", 1)[0]
    pid = os.getpid() if pid is None else pid
    out, i = [], 0
    while i < len(name):
        c = name[i]
        i += 1
        if c != "%" or i >= len(name):
            out.append(c)
            continue
        code = name[i]
        i += 1
        out.append({"%": "%", "h": host, "p": str(pid)}.get(code, "%" + code))
    return "".join(out)


def _debug_file(container, env):
    """The opened debug file, or None (not set, or fopen failed: stdout it is)."""
    global _file, _file_tried
    if _file_tried:
        return _file
    _file_tried = True
    name = env.get("NCCL_DEBUG_FILE")
    if not name:
        return None
    inside = expand(name)
    path = container.host_path(inside)
    if path is None:
        # in the image's own filesystem: NCCL writes it there, where nobody on the node
        # reads it; the stand-in has no such filesystem, so the lines go nowhere
        _file = open(os.devnull, "w", encoding="utf-8")
        return _file
    try:
        _file = open(path, "w", encoding="utf-8", buffering=1)
    except OSError:
        _file = None
    return _file


def emit(container, env, lines):
    """NCCL's lines of this process: to its debug file, else to stdout as C stdio holds them."""
    if not lines:
        return
    f = _debug_file(container, env)
    if f is not None:
        for line in lines:
            f.write(line + "\n")
        return
    if env.get("PYTHONUNBUFFERED"):
        for line in lines:
            sys.stdout.write(line + "\n")
        sys.stdout.flush()
        return
    _held.append("".join(line + "\n" for line in lines))
    text = "".join(_held)
    full = len(text) - len(text) % BLOCK
    _held[:] = [text[full:]] if text[full:] else []
    if full:
        sys.stdout.write(text[:full])
        sys.stdout.flush()


@atexit.register
def _at_exit():
    # exit() flushes stdio's buffers; os._exit and a fatal signal skip this
    if _held:
        sys.stdout.write("".join(_held))
        sys.stdout.flush()
        _held.clear()
