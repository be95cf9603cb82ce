"""Node side: every Python fact of a batch in one interpreter (k3deploy/node/facts.py).

A no-op look runs a few small Python programs on each node (the download status, the
huggingface_hub version, the head's endpoint probe); each interpreter start costs more than
the program it runs. Here each program runs in turn with its own argv, stdin text and globals,
its output (stdout and stderr) and exit code written to its own section file, in the format
the batch's shell facts use. The programs write through sys.stdout / sys.stderr and start no
processes that write to the real ones. Standard library only; any python3 >= 3.6.
"""
import io
import os
import sys
import traceback


def _exit_code(code, out):
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=out)  # sys.exit("message"): the interpreter would print it to stderr
    return 1


def run_one(program, name, args, stdin):
    """(output, exit code) of one program, as `python3 -c program args < stdin` would give."""
    real = sys.stdin, sys.stdout, sys.stderr, sys.argv
    out, code = io.StringIO(), 0
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin or ""), out, out
    sys.argv = ["-c"] + list(args)
    try:
        exec(compile(program, name, "exec"), {"__name__": "__main__"})
    except SystemExit as stop:
        code = _exit_code(stop.code, out)
    except BaseException:  # noqa: BLE001 - whatever one program raises is its own section's
        traceback.print_exc(file=out)
        code = 1
    finally:
        sys.stdin, sys.stdout, sys.stderr, sys.argv = real
    return out.getvalue(), code


def run(out_dir, mark, jobs):
    for file, name, program, args, stdin in jobs:
        text, code = run_one(program, name, args, stdin)
        with open(os.path.join(out_dir, file), "w", encoding="utf-8") as fh:
            fh.write(f"{mark}begin {name}\n{text}{mark}end {code}\n")
