"""The container's log store as dockerd's log copier fills it: what `docker logs` can show.

dockerd reads each of a container's streams (stdout, stderr) in reads of at most 2 KiB into
a 16 KiB buffer and hands its logger one message per "\\n"; bytes after the last "\\n" wait
for the next read. Only when the buffer is full without a newline, or the stream ends, does
it log what it holds as a partial message (moby daemon/logger/copier.go@ab0dccf80174fa5eef4583a0235b0bf57bdff8df,
copySrc: readSize 2 KiB, defaultBufSize 16 KiB, PartialLogMetaData{Last: false}). The
json-file driver writes a message's line with "\\n" unless it is a partial that is not the
last (daemon/logger/jsonfilelog/jsonfilelog.go, marshalMessage), and `docker logs` prints the
lines as stored. So a tqdm bar, which redraws with "\\r" and writes its one "\\n" at close,
is invisible in `docker logs` until the bar closes (or 16 KiB of redraws filled the buffer).

The stand-in stores exactly what `docker logs` prints: each message as json-file renders it,
appended to container.log under one lock for both streams.
"""
import os
import threading

READ_SIZE = 2 * 1024
BUF_SIZE = 16 * 1024


def _messages(buf, eof):
    """(messages to log, bytes kept): whole lines; a partial when full or at the end."""
    out, p = [], 0
    while (q := buf.find(b"\n", p)) >= 0:
        out.append(buf[p:q + 1])          # json-file: the line plus its "\n"
        p = q + 1
    rest = buf[p:]
    if rest and (eof or (p == 0 and len(buf) >= BUF_SIZE)):
        out.append(rest)                  # a partial message: stored without "\n"
        rest = b""
    return out, rest


def copy_stream(fd, log_path, lock):
    """Copy one stream of the container into its log store until the stream ends."""
    buf = b""
    while True:
        want = min(READ_SIZE, BUF_SIZE - len(buf))
        chunk = os.read(fd, want) if want else b""
        eof = want > 0 and not chunk
        buf += chunk
        messages, buf = _messages(buf, eof)
        if messages:
            with lock, open(log_path, "ab") as log:
                log.write(b"".join(messages))
        if eof:
            os.close(fd)
            return


def start(streams, log_path):
    """One copier thread per stream (read ends of pipes); returns the threads."""
    lock = threading.Lock()
    threads = [threading.Thread(target=copy_stream, args=(fd, log_path, lock), daemon=True)
               for fd in streams]
    for t in threads:
        t.start()
    return threads
