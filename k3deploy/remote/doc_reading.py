"""Node side: one document a k3deploy process rewrites while it works, read the one way
(protocol.read_document: whether its writer lives, when it last wrote). `status` runs it for
the downloader's progress; the download step's look reads the same through weights_status.py.

argv: KIND PATH [PID_FILE], KIND a name in protocol.WRITERS. Prints the reading as one JSON
line. Stdlib only; bundled after protocol.py (k3deploy.remote.bundled).
"""
import json
import sys

import protocol


def main() -> None:
    kind, path, *pid_file = sys.argv[1:]
    seen = protocol.read_document(path, protocol.WRITERS[kind], pid_file[0] if pid_file else None)
    print(json.dumps(seen.document()))


if __name__ == "__main__":
    main()
