"""SSH to compute nodes with paramiko, for `slurmguard triage collect` only.

Imported lazily by that command alone: paramiko is an optional extra (``slurmguard[ssh]``)
and never loaded by the hooks. Host keys are verified against known_hosts files and an
unknown host is refused, never added (an admin tool that trusts on first use would hand
root on every node to whoever answers first on the network).

Remote commands are argv lists: each word is quoted with :func:`shlex.quote` because the
SSH protocol carries one command string that the remote login shell splits, and a remote
``timeout`` (coreutils) bounds the command on the node so that a hung ``nvidia-smi`` does
not outlive the session.
"""

from __future__ import annotations

import os
import shlex
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko

from slurmguard.errors import EXIT_EXTERNAL, EXIT_REFUSED, SlurmguardError

# Stop reading a remote command's output beyond this (a runaway log must not eat the host).
MAX_OUTPUT = 16 * 1024 * 1024
DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "/etc/ssh/ssh_known_hosts")


class SSHError(SlurmguardError):
    """A node could not be reached or used over SSH. ``kind`` is a stable word for reports:
    unknown-host, host-key-mismatch, auth, timeout, connect, ssh."""

    exit_code = EXIT_EXTERNAL

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        if kind in ("unknown-host", "host-key-mismatch"):
            self.exit_code = EXIT_REFUSED


@dataclass(frozen=True)
class SSHTarget:
    """Where node ``node`` is reached: ``host`` (name or address), ``port``, login ``user``."""

    node: str
    host: str
    port: int
    user: str

    @property
    def known_hosts_name(self) -> str:
        """The name looked up in known_hosts (OpenSSH's ``[host]:port`` for other ports)."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"


@dataclass(frozen=True)
class RemoteResult:
    argv: tuple[str, ...]
    rc: int | None  # None: timed out or the channel died before an exit status
    stdout: str
    stderr: str
    duration: float
    timed_out: bool = False
    truncated: bool = False


class _Refuse(paramiko.MissingHostKeyPolicy):
    """Like paramiko's RejectPolicy, but says which name and key were not known."""

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        raise SSHError("unknown-host",
                       f"host key of {hostname} ({key.get_name()} "
                       f"{key.fingerprint}) is not in known_hosts: refused")


def load_known_hosts(client: paramiko.SSHClient, paths: Sequence[str]) -> list[str]:
    """Load the given known_hosts files (or OpenSSH's defaults when empty) into ``client``.

    A file named explicitly must exist; of the defaults, those missing are skipped. Returns
    the files loaded; raises SSHError when none could be, since then every host is unknown.
    """
    explicit = bool(paths)
    loaded: list[str] = []
    for raw in paths or DEFAULT_KNOWN_HOSTS:
        path = os.path.expanduser(raw)
        if not os.path.exists(path):
            if explicit:
                raise SSHError("unknown-host", f"known_hosts file {path}: no such file")
            continue
        try:
            client.load_host_keys(path)
        except (OSError, paramiko.SSHException) as exc:
            raise SSHError("ssh", f"known_hosts file {path}: cannot read: {exc}") from None
        loaded.append(path)
    if not loaded:
        raise SSHError("unknown-host", "no known_hosts file found (tried "
                       + ", ".join(DEFAULT_KNOWN_HOSTS) + "); pass --known-hosts FILE")
    return loaded


class SSHSession:
    """One authenticated connection to one node. Use as a context manager."""

    def __init__(self, target: SSHTarget, *, identity: str | None, known_hosts: Sequence[str],
                 timeout: float) -> None:
        self.target = target
        self._client = paramiko.SSHClient()
        load_known_hosts(self._client, known_hosts)
        self._client.set_missing_host_key_policy(_Refuse())
        self._sftp: paramiko.SFTPClient | None = None
        where = f"{target.user}@{target.host}:{target.port}"
        started = time.monotonic()
        try:
            self._client.connect(
                target.host, port=target.port, username=target.user,
                key_filename=identity or None,
                # An explicit key means exactly that key; otherwise what OpenSSH would try.
                allow_agent=not identity, look_for_keys=not identity,
                timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
            )
        except SSHError:
            self._client.close()
            raise
        except paramiko.BadHostKeyException as exc:
            self._client.close()
            raise SSHError("host-key-mismatch",
                           f"host key of {target.known_hosts_name} does not match known_hosts "
                           f"(got {exc.key.get_name()} {exc.key.fingerprint}): refused") from None
        except paramiko.AuthenticationException as exc:
            self._client.close()
            raise SSHError("auth", f"{where}: authentication failed: {exc}") from None
        except TimeoutError:
            self._client.close()
            raise SSHError("timeout", f"{where}: timed out after {timeout:g}s") from None
        except paramiko.SSHException as exc:
            self._client.close()
            # paramiko's start_client() returns silently when the key exchange outlasts the
            # timeout and auth then fails with "No existing session": that is a timeout.
            if "banner" in str(exc).lower() or time.monotonic() - started >= timeout:
                raise SSHError("timeout", f"{where}: no SSH handshake within {timeout:g}s") from None
            raise SSHError("ssh", f"{where}: {exc}") from None
        except OSError as exc:  # refused, unreachable, name not resolved
            self._client.close()
            reason = exc.strerror or str(exc)
            raise SSHError("connect", f"{where}: cannot connect: {reason}") from None
        except ValueError as exc:  # a key file paramiko cannot parse
            self._client.close()
            raise SSHError("auth", f"identity {identity}: {exc}") from None

    def __enter__(self) -> SSHSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
        self._client.close()

    def run(self, argv: Sequence[str], *, timeout: float,
            timeout_tool: str | None = None) -> RemoteResult:
        """Run ``argv`` on the node; never raises for the command's own failure.

        With ``timeout_tool`` (e.g. ``/usr/bin/timeout``) the node kills the command itself
        after ``timeout`` seconds; the local wait gives it 5 s more before giving up.
        """
        argv = tuple(str(a) for a in argv)
        words = list(argv)
        if timeout_tool:
            words = [timeout_tool, "--kill-after=2", f"{timeout:g}", *words]
        command = " ".join(shlex.quote(w) for w in words)
        start = time.monotonic()
        deadline = start + timeout + (5 if timeout_tool else 0)
        transport = self._client.get_transport()
        if transport is None or not transport.is_active():
            raise SSHError("ssh", f"{self.target.node}: connection lost")
        chan = transport.open_session(timeout=timeout)
        out, err = bytearray(), bytearray()
        truncated = timed_out = False
        try:
            chan.settimeout(0.2)
            chan.exec_command(command)
            while True:
                got = False
                for ready, recv, buf in ((chan.recv_ready, chan.recv, out),
                                         (chan.recv_stderr_ready, chan.recv_stderr, err)):
                    if ready():
                        data = recv(65536)
                        got = True
                        if len(buf) < MAX_OUTPUT:
                            buf += data
                        else:
                            truncated = True
                if (chan.exit_status_ready() and not chan.recv_ready()
                        and not chan.recv_stderr_ready()):
                    break
                if time.monotonic() > deadline:
                    timed_out = True
                    break
                if not got:
                    time.sleep(0.02)
            rc = None if timed_out else chan.recv_exit_status()
        finally:
            chan.close()
        if rc == 124 and timeout_tool:  # coreutils timeout's "the command timed out"
            timed_out = True
        return RemoteResult(argv, rc, out.decode(errors="replace"), err.decode(errors="replace"),
                            time.monotonic() - start, timed_out, truncated)

    def read_tree(self, root: str, *, max_files: int = 2000,
                  max_bytes: int = 65536) -> dict[str, str] | None:
        """Read the small text files under ``root`` over SFTP, following directory symlinks
        (sysfs is made of them). Returns {relative path: stripped content}, or None when
        ``root`` does not exist. Unreadable files are left out."""
        if self._sftp is None:
            self._sftp = self._client.open_sftp()
        sftp = self._sftp
        try:
            sftp.stat(root)
        except FileNotFoundError:
            return None
        found: dict[str, str] = {}
        seen: set[str] = set()
        stack = [""]
        while stack and len(found) < max_files:
            rel = stack.pop()
            path = f"{root}/{rel}" if rel else root
            try:
                names = sorted(sftp.listdir(path))
            except OSError:
                continue
            for name in names:
                sub = f"{rel}/{name}" if rel else name
                full = f"{root}/{sub}"
                try:
                    st = sftp.stat(full)  # follows links
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode or 0):
                    real = sftp.normalize(full)
                    if real not in seen and sub.count("/") < 6:
                        seen.add(real)
                        stack.append(sub)
                elif stat.S_ISREG(st.st_mode or 0):
                    try:
                        with sftp.open(full, "r") as fh:
                            found[sub] = fh.read(max_bytes).decode(errors="replace").strip()
                    except OSError:
                        continue
        return found


def connect(target: SSHTarget, *, identity: str | None, known_hosts: Sequence[str],
            timeout: float) -> SSHSession:
    """Open an SSH session to ``target``; raises SSHError (kind says why) on failure."""
    if identity and not Path(identity).is_file():
        raise SSHError("auth", f"identity {identity}: no such file")
    return SSHSession(target, identity=identity, known_hosts=known_hosts, timeout=timeout)
