"""Newline-delimited JSON over TCP, used by the rendezvous and by the Ray stand-in."""
import json


def send(conn, obj):
    """False when the peer is gone."""
    try:
        conn.sendall((json.dumps(obj) + "\n").encode())
        return True
    except OSError:
        return False


def lines(conn):
    """Messages until the peer closes the connection (or sends garbage)."""
    buf = b""
    while True:
        try:
            chunk = conn.recv(4096)
        except OSError:
            return
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                yield json.loads(line)
            except ValueError:
                return
