"""Node side of preflight's Hub check (stdlib only; a fact program, argv: URL...).

For each scheme://host:port: a TCP connection, and for https a verified TLS handshake too (a
proxy that intercepts TLS, or a firewall that lets SYN through and drops the rest, fails there).
Prints {"URL": true | "why not"}. All at once, each bounded by TIMEOUT: a DROP rule costs that
much, not more.
"""

import json
import socket
import ssl
import sys
import threading
from urllib.parse import urlsplit

TIMEOUT = 5.0


def reach(url: str) -> str | bool:
    parts = urlsplit(url)
    host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT) as sock:
            if parts.scheme == "https":
                with ssl.create_default_context().wrap_socket(sock, server_hostname=host):
                    pass
    except (OSError, ValueError) as err:
        return f"{type(err).__name__}: {err}"
    return True


def main(urls: list[str]) -> None:
    found: dict[str, str | bool] = {}

    def one(url: str) -> None:
        found[url] = reach(url)

    threads = [threading.Thread(target=one, args=(u,)) for u in urls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(json.dumps(found))


if __name__ == "__main__":
    main(sys.argv[1:])
