"""A real OpenSSH server on loopback for the SSH triage tests.

Debian's ``sshd`` runs in the foreground (``-D``) from a generated ``sshd_config`` in a temp
directory, on a free 127.0.0.1 port, with a generated ed25519 host key and a generated user
key for root (key auth only). The server is stopped by its own pid at teardown; nothing else
is touched. ``known_hosts`` holds the host key under ``[127.0.0.1]:PORT``, the name OpenSSH
and paramiko look up for a non-default port.

Use the ``ssh_server`` fixture (tests/conftest.py) or :func:`start_sshd` directly.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from support.wait import WaitTimeout, wait_for

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = "/usr/bin/ssh-keygen"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"


def available() -> tuple[bool, str]:
    """Whether a real sshd can be started here (binary present, running as root)."""
    for tool in (SSHD, SSH_KEYGEN):
        if not os.access(tool, os.X_OK):
            return False, f"{tool} not installed (Debian package openssh-server)"
    if os.geteuid() != 0:
        return False, "sshd for root logins on loopback needs root"
    return True, ""


@dataclass
class SSHServer:
    """A running sshd: where it listens and the files a client needs."""

    host: str
    port: int
    user: str
    identity: Path  # the user's private key
    known_hosts: Path  # holds this server's host key for [host]:port
    host_key: Path
    workdir: Path
    proc: subprocess.Popen[bytes]

    @property
    def log(self) -> str:
        try:
            return (self.workdir / "sshd.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop this sshd by its pid (and only it); sessions it forked exit with it."""
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.kill(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=5)


def free_port(host: str = "127.0.0.1") -> int:
    """A port handed out once per host (support/ports.py)."""
    from support.ports import free_port as handed

    return handed(host)


def keygen(path: Path, comment: str = "slurmguard-test") -> Path:
    """Generate an ed25519 key pair without passphrase at ``path`` (and ``path.pub``)."""
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True, timeout=30)
    return path


def start_sshd(workdir: Path, host: str = "127.0.0.1", extra_config: str = "") -> SSHServer:
    """Start ``sshd -D`` on a free port of ``host``; returns once it accepts connections."""
    workdir.mkdir(parents=True, exist_ok=True)
    host_key = keygen(workdir / "ssh_host_ed25519_key", "host")
    user_key = keygen(workdir / "id_ed25519", "root@test")
    authorized = workdir / "authorized_keys"
    shutil.copyfile(str(user_key) + ".pub", authorized)
    os.chmod(authorized, 0o600)
    # sshd's privilege separation needs this directory (Debian creates it in its unit file).
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    port = free_port(host)
    pid_file = workdir / "sshd.pid"
    cfg = workdir / "sshd_config"
    cfg.write_text(
        f"Port {port}\n"
        f"ListenAddress {host}\n"
        f"HostKey {host_key}\n"
        f"PidFile {pid_file}\n"
        f"AuthorizedKeysFile {authorized}\n"
        "PermitRootLogin prohibit-password\n"
        "PubkeyAuthentication yes\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "UsePAM no\n"
        # The temp dir is not owned the way StrictModes wants; the keys are ours anyway.
        "StrictModes no\n"
        "PrintMotd no\n"
        "LogLevel VERBOSE\n"
        f"Subsystem sftp {SFTP_SERVER}\n"
        "MaxStartups 100\n"
        "MaxSessions 50\n"
        + extra_config
    )
    subprocess.run([SSHD, "-t", "-f", str(cfg)], check=True, capture_output=True, timeout=30)
    log = open(workdir / "sshd.log", "wb")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(cfg)], stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL)
    log.close()
    pub = (Path(str(host_key) + ".pub")).read_text().split()
    known = workdir / "known_hosts"
    known.write_text(f"[{host}]:{port} {pub[0]} {pub[1]}\n")
    server = SSHServer(host, port, "root", user_key, known, host_key, workdir, proc)

    def greets() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited {proc.returncode}: {server.log[-2000:]}")
        with socket.create_connection((host, port), timeout=0.5) as s:
            return s.recv(64).startswith(b"SSH-")

    try:
        wait_for(greets, 15, what=f"sshd's greeting on {host}:{port}", ignore=(OSError,))
    except WaitTimeout:
        server.stop()
        raise RuntimeError(f"sshd did not start listening on {host}:{port}: {server.log[-2000:]}") from None
    return server
