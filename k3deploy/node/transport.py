"""SSH to the nodes. The only module that knows about Fabric and Paramiko.

One persistent connection per node per run: opened once, reused by every step, reopened only
after a transport failure. Host keys are verified against known_hosts; unknown keys are
refused unless the user asked for accept-new (as OpenSSH's StrictHostKeyChecking=accept-new).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import threading
import time
from pathlib import Path
from typing import Protocol

import fabric
import paramiko
from tenacity import (Retrying, retry_if_exception_type, retry_if_not_exception_type,
                      stop_after_attempt, wait_exponential)

from k3deploy.core import interrupt
from k3deploy.core.errors import CommandError, HostKeyError, UnreachableError
from k3deploy.core.redact import redact
from k3deploy.node import ssh_io
from k3deploy.node.ssh_types import (ConnectionStats, Endpoint, Result, known_hosts_name,
                                     program_of, quote)

# put_texts' node side: put_text's `umask 077; cat > tmp; chmod; mv -f` for each file.
# UTF-8 both ways, whatever the node's locale: put_text's `cat` writes the bytes it is sent.
_WRITER = """import json, os, sys
os.umask(0o077)
for f in json.loads(sys.stdin.buffer.read().decode("utf-8")):
    tmp = f["path"] + ".k3tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(f["content"])
    os.chmod(tmp, f["mode"])
    os.replace(tmp, f["path"])
"""
# Transport-level failures: the command's fate is unknown, the connection is not usable.
TRANSPORT_ERRORS = (paramiko.SSHException, socket.error, EOFError, OSError)


class _Fabric(Protocol):
    """What is used of a fabric.Connection (fabric 3 connection.py; Fabric ships no types)."""
    client: paramiko.SSHClient
    transport: paramiko.Transport | None      # the client's, once open() has connected
    gateway: _Fabric | str | None             # ProxyJump's connection, or a ProxyCommand
    connect_kwargs: dict[str, list[str] | float | socket.socket]   # SSHClient.connect's
    user: str
    is_connected: bool

    def open(self) -> None: ...
    def close(self) -> None: ...


class _AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """Trust a first-seen key and record it; a changed key still fails (BadHostKeyException
    is raised by Paramiko before any policy is consulted). `hostname` is Paramiko's
    server_hostkey_name, already in known_hosts_name's form: what is written is what the
    next connection, Paramiko's or ssh(1)'s, looks up."""

    def __init__(self, known_hosts: str, lock: threading.Lock):
        self.known_hosts = known_hosts
        self.lock = lock

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        with self.lock:
            Path(self.known_hosts).parent.mkdir(parents=True, exist_ok=True)
            with open(self.known_hosts, "a", encoding="ascii") as fh:
                fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        client.get_host_keys().add(hostname, key.get_name(), key)


_KNOWN_HOSTS_LOCK = threading.Lock()


class NodeConnection:
    def __init__(self, ep: Endpoint, *, accept_new_host_keys: bool = False,
                 connect_attempts: int = 3):
        self.ep = ep
        self.accept_new = accept_new_host_keys
        self.connect_attempts = connect_attempts
        self._conn: _Fabric | None = None
        self._lock = threading.Lock()
        # What this run cost the node: `scripts/bench` prints these next to the seconds.
        self.logins = 0
        self.round_trips: list[str] = []   # one entry (the program run) per remote command

    # -- connection -------------------------------------------------------------------
    def _new_connection(self) -> _Fabric:
        config = fabric.Config(runtime_ssh_path=os.devnull) if not self.ep.use_ssh_config \
            else fabric.Config()
        kwargs: dict[str, list[str] | float] = {"key_filename": [self.ep.key]} if self.ep.key else {}
        kwargs.update(banner_timeout=self.ep.connect_timeout, auth_timeout=self.ep.connect_timeout)
        conn: _Fabric = fabric.Connection(
            self.ep.host, user=self.ep.user, port=self.ep.port, config=config,
            connect_timeout=max(1, int(self.ep.connect_timeout)), connect_kwargs=kwargs)
        client = conn.client
        if os.path.exists(self.ep.known_hosts):
            client.load_host_keys(self.ep.known_hosts)
        client.set_missing_host_key_policy(
            _AcceptNewPolicy(self.ep.known_hosts, _KNOWN_HOSTS_LOCK) if self.accept_new
            else paramiko.RejectPolicy())
        return conn

    def _open_once(self) -> None:
        conn = self._new_connection()
        if not conn.gateway:  # through a ProxyJump the "socket" is a channel of the jump host
            conn.connect_kwargs["sock"] = ssh_io.direct_socket(self.ep.host, self.ep.port or 22,
                                                         max(1, int(self.ep.connect_timeout)))
        try:
            self._handshake(conn)
        except BaseException:
            conn.close()
            sock = conn.connect_kwargs.get("sock")
            if isinstance(sock, socket.socket):
                sock.close()
            raise
        ssh_io.detect_dead_peer(self._transport(conn), self.ep.connect_timeout)
        self._conn = conn

    def _transport(self, conn: _Fabric) -> paramiko.Transport:
        """The transport of a connection open() has connected."""
        if conn.transport is None:
            raise EOFError("the connection has no transport")
        return conn.transport

    def _opened(self) -> _Fabric:
        """The connection, opened first if it is not (open() sets it or raises)."""
        self.open()
        if self._conn is None:
            raise EOFError("the connection was not opened")
        return self._conn

    def _handshake(self, conn: _Fabric) -> None:
        try:
            conn.open()
        except paramiko.BadHostKeyException as err:
            raise HostKeyError(self.ep.name, f"host key of {self._host_entry()} CHANGED "
                               f"(got {err.key.get_name()}); refusing to connect",
                               hint=f"if the node was really rebuilt, remove its line from "
                               f"{self.ep.known_hosts} (ssh-keygen -f "
                               f"{shlex.quote(self.ep.known_hosts)} -R "
                               f"{shlex.quote(self._host_entry())})") from None
        except paramiko.SSHException as err:
            if "not found in known_hosts" in str(err):
                scan = quote(["ssh-keyscan", "-p", str(self.ep.port or 22), self.ep.host])
                raise HostKeyError(self.ep.name, f"host key of {self._host_entry()} is unknown",
                                   hint=f"add it to {self.ep.known_hosts} ({scan}, then check "
                                   "the fingerprint) or pass --accept-new-host-keys to "
                                   "trust it on first use") from None
            raise

    def open(self) -> None:
        if self._conn is not None and self._conn.is_connected:
            return
        self.close()
        # A refused key is not transient: retrying only adds failed logins (and fail2ban bans).
        retry = (retry_if_exception_type(TRANSPORT_ERRORS)
                 & retry_if_not_exception_type(paramiko.AuthenticationException))
        try:
            for attempt in Retrying(stop=stop_after_attempt(self.connect_attempts),
                                    wait=wait_exponential(multiplier=0.5, max=5),
                                    retry=retry, reraise=True, sleep=interrupt.sleep):
                with attempt:
                    self.logins += 1
                    self._open_once()
        except paramiko.AuthenticationException as err:
            raise UnreachableError(self.ep.name, f"SSH authentication to {self._target()} failed: "
                                   f"{err}", hint="check ssh.user / ssh.key in the inventory") from None
        except TRANSPORT_ERRORS as err:
            raise UnreachableError(self.ep.name, f"cannot reach {self._target()} after "
                                   f"{self.connect_attempts} attempts: {err or type(err).__name__}",
                                   hint="is the node up (spot reclaim?) and port open?") from None

    def _host_entry(self) -> str:
        # quoted where it is shown: `[gw]:40100` is a glob pattern to a shell
        return known_hosts_name(self.ep.host, self.ep.port)

    def _target(self) -> str:
        return f"{self.ep.user or ''}{'@' if self.ep.user else ''}{self.ep.host}:{self.ep.port or 22}"

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # closing a dead connection may raise anything; it is gone either way
                pass
            self._conn = None

    # -- commands ---------------------------------------------------------------------
    def _wrap(self, command: str, sudo: bool) -> str:
        if not sudo:
            return command
        # the connection's user decides; after a dropped connection (close() forgets it) that
        # needs the connection opened again first
        if (self._opened().user or "root") != "root":
            return "sudo -n -- sh -c " + shlex.quote(command)
        return command

    def _run_once(self, command: str, stdin: str | None, timeout: float | None) -> Result:
        """One command on a fresh channel of the persistent connection. Invoke's runner is
        not used: it feeds stdin one byte per 10 ms and polls with threads per command."""
        conn = self._opened()
        self.round_trips.append(program_of(command))
        try:
            chan = self._transport(conn).open_session(timeout=self.ep.connect_timeout)
            chan.settimeout(timeout)
            chan.exec_command(command)
            if stdin is not None:
                chan.sendall(stdin.encode())
            chan.shutdown_write()
            out, err = ssh_io.drain(chan, time.monotonic() + (timeout or 1e9))
            code = chan.recv_exit_status()
            if code == -1 and not self._transport(conn).is_active():
                raise EOFError("connection dropped before the command finished")
        except TimeoutError as late:
            chan.close()
            return Result(command, 124, str(late), f"(timed out after {timeout:.0f}s)")
        except TRANSPORT_ERRORS:
            self.close()
            raise
        return Result(command, code, out, err)

    def run(self, argv: list[str] | str, *, sudo: bool = False, stdin: str | None = None,
            timeout: float | None = None, check: bool = True, retry: bool = False,
            step: str | None = None) -> Result:
        """Run a command. `retry=True` marks it safe to repeat after a transport failure."""
        command = self._wrap(quote(argv), sudo)
        attempts = 3 if retry else 1
        try:
            for attempt in Retrying(stop=stop_after_attempt(attempts),
                                    wait=wait_exponential(multiplier=0.5, max=5),
                                    retry=retry_if_exception_type(TRANSPORT_ERRORS), reraise=True,
                                    sleep=interrupt.sleep):
                with attempt, self._lock:
                    result = self._run_once(command, stdin, timeout or self.ep.command_timeout)
        except TRANSPORT_ERRORS as err:
            raise UnreachableError(self.ep.name, f"connection lost while running "
                                   f"{redact(quote(argv))}: {err or type(err).__name__}",
                                   step=step) from None
        if check and not result.ok:
            raise CommandError(self.ep.name, redact(quote(argv)), result.exit_code,
                               redact(result.output), step=step)
        return result

    def put_text(self, content: str, path: str, *, mode: int = 0o600, sudo: bool = False,
                 step: str | None = None) -> None:
        """Write a file atomically through stdin, so its content (a token, a key) never
        appears in argv and a reader never sees half a file."""
        tmp = f"{path}.k3tmp"
        script = (f"umask 077 && cat > {shlex.quote(tmp)} && chmod {mode:o} {shlex.quote(tmp)}"
                  f" && mv -f {shlex.quote(tmp)} {shlex.quote(path)}")
        self.run(["sh", "-c", script], sudo=sudo, stdin=content, retry=True, step=step)

    def put_texts(self, files: list[tuple[str, str, int]], *, sudo: bool = False,
                  step: str | None = None) -> None:
        """(content, path, mode) files in one round trip, each written as put_text writes it
        (through stdin, atomically). Seventeen uploads in a row cost seventeen round trips
        otherwise, each a WAN round trip from a laptop. Needs python3 on the node, which
        preflight requires of every node before any step uploads."""
        if len(files) == 1:
            content, path, mode = files[0]
            return self.put_text(content, path, mode=mode, sudo=sudo, step=step)
        doc = json.dumps([{"content": c, "path": p, "mode": m} for c, p, m in files])
        self.run(["python3", "-c", _WRITER], sudo=sudo, stdin=doc, retry=True, step=step)

    def stats(self) -> ConnectionStats:
        return {"logins": self.logins, "round_trips": len(self.round_trips),
                "programs": sorted(set(self.round_trips))}
