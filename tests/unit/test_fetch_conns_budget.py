"""download.retry_minutes measures the Hub's silence for a file being fetched, never the time a
file waits in the queue behind others: with one connection, a file queued behind a healthy
stream longer than the budget still arrives; a Hub that stops answering still fails the file
in flight, and the file queued behind it, within about the budget."""

import contextlib
import importlib
import threading
import time

import k3deploy.remote.fetch_weights  # noqa: F401 (puts the node-side directory on sys.path)

fetch_base = importlib.import_module("fetch_base")
fetch_conns = importlib.import_module("fetch_conns")
BUDGET = 1.5
CHUNK = 10_000


class Spec:
    def __init__(self, path, size):
        self.path, self.size = path, size


class Part:
    def __init__(self, size):
        self.size, self.got, self.finished = size, 0, False

    def open(self):
        return self

    def close(self):
        pass

    def missing(self):
        return [(0, self.size)]

    def write_at(self, f, pos, data):
        self.got += len(data)

    def finish(self, f):
        self.finished = True

    def save(self):
        pass

    def advance_hash(self):
        pass


class Link:
    def renew(self):
        pass


class Response:
    status_code = 206

    def __init__(self, start, end, gap, silent):
        self.start, self.end, self.gap, self.silent = start, end, gap, silent

    def iter_bytes(self):
        for pos in range(self.start, self.end, CHUNK):
            while self.silent.is_set():
                time.sleep(0.05)
            time.sleep(self.gap)
            yield b"x" * min(CHUNK, self.end - pos)


class Source:
    """A Hub streaming CHUNK bytes every `gap` seconds; `silent` set: it stops sending."""

    def __init__(self, gap):
        self.gap, self.silent = gap, threading.Event()

    def link(self):
        return Link()

    @contextlib.contextmanager
    def open_range(self, spec, start, end, link):
        yield Response(start, end, self.gap, self.silent)


def fetch_two(source, size, stop):
    conns = fetch_conns.Connections(source, 1, size, BUDGET, 1.0, stop)
    parts, errors = [Part(size), Part(size)], []

    def one(i):
        try:
            conns.fetch(Spec(f"model-0000{i}.safetensors", size), parts[i])
        except fetch_base.DownloadError as e:
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
        time.sleep(0.05)   # the first file is queued first
    return threads, parts, errors


def test_a_file_queued_behind_a_healthy_stream_longer_than_the_budget_arrives():
    stop = threading.Event()
    # one file takes 2x the budget on the one connection: the second waits that long queued
    threads, parts, errors = fetch_two(Source(gap=0.05), 60 * CHUNK, stop)
    try:
        for t in threads:
            t.join(30)
        assert errors == []
        assert all(p.finished and p.got == p.size for p in parts)
    finally:
        stop.set()


def test_a_silent_hub_still_fails_the_file_in_flight_and_the_one_queued_behind_it():
    stop = threading.Event()
    source = Source(gap=0.05)
    threads, parts, errors = fetch_two(source, 60 * CHUNK, stop)
    try:
        time.sleep(0.5)
        source.silent.set()
        began = time.monotonic()
        for t in threads:
            t.join(30)
        took = time.monotonic() - began
        assert len(errors) == 2 and all(isinstance(e, fetch_base.HubUnavailable) for e in errors)
        assert BUDGET - 0.5 < took < 4 * BUDGET + 5
    finally:
        stop.set()
        source.silent.clear()
