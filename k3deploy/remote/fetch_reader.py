"""One thread of the process receives the bodies of all its CDN connections (epoll).

Over TLS a socket read hands over one record, 16 KiB, and the interpreter lock is let go and
taken again around each. With a thread per connection reading, every one of those is a handoff
between threads whenever several connections have bytes waiting (all of them, on a fast link):
a futex wake and a context switch per 16 KiB, which cost the downloader more than decrypting
them. Here the connection's thread hands its buffer over and sleeps until it is filled; this
thread reads every ready socket without blocking, so the lock passes between threads once per
fill, not per record.

A fill ends when its buffer is full, when FILL_SECONDS passed with some bytes in it, at the
body's end (the peer closed: 0 bytes), or with the error a read met; with no byte at all for the
connection's timeout it ends with TimeoutError, as a blocking read would. Standard library only.
"""
from __future__ import annotations

import select
import socket
import ssl
import threading
import time

FILL_SECONDS = 0.1
# How often the fills are looked over for their time limits: one look costs a call per fill, so
# not at every wake-up (on a fast link several per 16 KiB record).
LOOK_EVERY = 0.01
WAIT_SLACK = 5.0   # seconds past a fill's timeout its caller waits before calling this thread dead
_AGAIN = (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError)


class Fill:
    """One buffer to fill from one socket; written by the reader thread only."""

    def __init__(self, sock: socket.socket, view: memoryview, timeout: float, seconds: float):
        self.sock, self.view, self.timeout, self.seconds = sock, view, timeout, seconds
        # TLS: the SSL object's own read. SSLSocket.recv_into is two Python calls around it,
        # made once per 16 KiB record; its one rule on top (a ragged EOF read as the end, as
        # with http.client's suppress_ragged_eofs) is kept in Reader._read.
        self.tls = getattr(sock, "_sslobj", None) if isinstance(sock, ssl.SSLSocket) else None
        self.got, self.began = 0, time.monotonic()
        self.error: BaseException | None = None
        self.cancelled, self.done = False, threading.Event()

    def due(self, now: float) -> float:
        """Seconds from `now` until it must end however little arrived."""
        return self.began + (self.seconds if self.got else self.timeout) - now


class Reader:
    def __init__(self) -> None:
        self.epoll = select.epoll()
        self.lock = threading.Lock()
        self.incoming: list[Fill] = []
        self.fills: dict[int, Fill] = {}
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.epoll.register(self.wake_r.fileno(), select.EPOLLIN)
        self.thread: threading.Thread | None = None

    def fill(self, sock: socket.socket, view: memoryview, timeout: float,
             seconds: float = FILL_SECONDS) -> tuple[int, BaseException | None]:
        """Bytes read into `view` by this process's reader thread, and the error that ended the
        fill (None when it ended full, timed, or at the body's end: 0 bytes)."""
        job = Fill(sock, view, timeout, seconds)
        sock.settimeout(0.0)
        try:
            self._submit(job)
            if not job.done.wait(timeout + seconds + WAIT_SLACK):
                job.cancelled = True
                self._wake()
                if not job.done.wait(WAIT_SLACK):
                    raise RuntimeError("the connections' reader thread stopped answering")
        finally:
            sock.settimeout(timeout)
        return job.got, job.error

    def _submit(self, job: Fill) -> None:
        with self.lock:
            self.incoming.append(job)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="conn-reader", daemon=True)
                self.thread.start()
        self._wake()

    def _wake(self) -> None:
        try:
            self.wake_w.send(b"\0")
        except BlockingIOError:   # a wake-up is already waiting to be read
            pass

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as e:   # its callers get the error now, not at their timeout
            with self.lock:   # and the next fill starts a new thread, not one still unwinding
                for job in [*self.fills.values(), *self.incoming]:
                    job.error = job.error or e
                    self._end(job)
                self.incoming, self.thread = [], None
            raise

    def _loop(self) -> None:
        poll, wake, fills, next_look = self.epoll.poll, self.wake_r.fileno(), self.fills, 0.0
        while True:
            for fd, _ in poll(LOOK_EVERY if fills else -1):
                if fd == wake:
                    self._take_incoming()
                elif (job := fills.get(fd)) is not None:
                    self._read(job)
            now = time.monotonic()
            if now >= next_look:
                self._end_due(now)
                next_look = now + LOOK_EVERY

    def _take_incoming(self) -> None:
        try:
            while self.wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        with self.lock:
            jobs, self.incoming = self.incoming, []
        for job in jobs:
            self.fills[job.sock.fileno()] = job
            self.epoll.register(job.sock.fileno(), select.EPOLLIN)
            self._read(job)   # TLS may hold decrypted bytes the socket no longer signals

    def _read(self, job: Fill) -> None:
        view, want, tls = job.view, len(job.view), job.tls
        while job.got < want:
            try:
                n = tls.read(want - job.got, view[job.got:]) if tls is not None else job.sock.recv_into(view[job.got:])
            except _AGAIN:
                return
            except ssl.SSLEOFError:
                n = 0
            except Exception as e:   # the fill ends with it; its caller decides what it means
                job.error = e
                break
            if not n:   # the body's end: the caller sees fewer bytes than it asked, then 0
                break
            job.got += n
        self._end(job)

    def _end_due(self, now: float) -> None:
        for job in list(self.fills.values()):
            if job.cancelled or job.due(now) <= 0:
                if not job.got and not job.cancelled:
                    job.error = TimeoutError("The read operation timed out")
                self._end(job)

    def _end(self, job: Fill) -> None:
        if self.fills.pop(job.sock.fileno(), None) is not None:
            self.epoll.unregister(job.sock.fileno())
        job.done.set()


_reader: Reader | None = None
_reader_lock = threading.Lock()


def reader() -> Reader:
    """This process's reader (made at the first fill: a process that never reads a body over
    http.client, the laptop's, holds no thread and no socket pair for it)."""
    global _reader
    with _reader_lock:
        if _reader is None:
            _reader = Reader()
        return _reader
