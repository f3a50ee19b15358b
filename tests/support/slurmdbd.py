"""Slurm accounting for tests: Debian's slurmdbd on a private MariaDB, both in a temp dir.

``SlurmDBD.start(tmpdir)`` initialises a MariaDB data directory (``mariadb-install-db``),
starts ``mariadbd`` on a loopback port with its socket in the temp dir, creates the
accounting user, writes ``slurmdbd.conf`` (mode 0600) and starts ``slurmdbd -D`` on another
port. Both ports come from tests/support/ports.py, below the kernel's ephemeral range and
handed once per host: a port the kernel picked was taken by another process's connection
before mariadbd bound it ("Got error: 98: Address already in use", beside another worktree's
suite). A test cluster started with ``Cluster.start(..., accounting=dbd)`` then records its
jobs there, so ``sacct`` answers for real. One slurmdbd serves many clusters (the session-scoped
fixture, tests/conftest.py): each registers under a ClusterName this slurmdbd has not
handed out before (:meth:`SlurmDBD.cluster_name`), and sacct and ``sacctmgr show event``
answer for the local cluster only. Every daemon is our child in its own session and is
stopped by pid (process group): nothing is left running, nothing fixed in /tmp is used.

Measured here (2 shared cores): about 5 s from nothing to slurmdbd answering.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from support.ports import free_port
from support.slurmcluster import ClusterError
from support.wait import wait_for

MARIADBD = "/usr/sbin/mariadbd"
INSTALL_DB = "/usr/bin/mariadb-install-db"
MARIADB = "/usr/bin/mariadb"
SLURMDBD = "/usr/sbin/slurmdbd"
PASSWORD = "slurmguard-test"  # loopback only, a throwaway database


def missing_components() -> list[str]:
    return [p for p in (MARIADBD, INSTALL_DB, MARIADB, SLURMDBD) if not os.access(p, os.X_OK)]


class SlurmDBD:
    def __init__(self, root: Path, db_port: int, port: int) -> None:
        self.root = root
        self.db_port = db_port
        self.port = port
        self.socket = root / "run" / "mysqld.sock"
        self._procs: list[subprocess.Popen[bytes]] = []
        self.startup_seconds = 0.0
        self._names: set[str] = set()  # ClusterNames handed out: each cluster's own

    @classmethod
    def start(cls, tmpdir: str | os.PathLike[str], timeout: float = 60.0) -> SlurmDBD:
        t0 = time.monotonic()
        root = Path(tmpdir).resolve() / "slurmdbd"
        for sub in ("data", "run", "etc", "log"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        db_port, port = free_port(), free_port()  # below the ephemeral range, handed once
        d = cls(root, db_port, port)
        try:
            d._start_mariadb(timeout)
            d._start_slurmdbd(timeout)
        except BaseException:
            d.stop()
            raise
        d.startup_seconds = time.monotonic() - t0
        return d

    def _spawn(self, argv: list[str], log: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with open(self.root / "log" / log, "ab") as out:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True, cwd=self.root,
                                 env=env or {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        self._procs.append(p)
        return p

    def _start_mariadb(self, timeout: float) -> None:
        r = subprocess.run([INSTALL_DB, "--no-defaults", f"--datadir={self.root / 'data'}",
                            "--user=root", "--auth-root-authentication-method=socket",
                            "--skip-test-db"], capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise ClusterError(f"mariadb-install-db failed: {r.stderr.strip()[-2000:]}")
        proc = self._spawn([MARIADBD, "--no-defaults", f"--datadir={self.root / 'data'}",
                            "--user=root", "--bind-address=127.0.0.1", f"--port={self.db_port}",
                            f"--socket={self.socket}", f"--pid-file={self.root / 'run' / 'mysqld.pid'}",
                            "--skip-name-resolve", "--skip-log-bin", "--innodb-buffer-pool-size=32M",
                            "--innodb-log-file-size=8M", "--innodb-lock-wait-timeout=900"],
                           "mariadbd.log")
        sql = (f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'; "
               "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';")
        def user_created() -> bool:
            if proc.poll() is not None:
                raise ClusterError("mariadbd exited at start:\n" + self.log_tail("mariadbd.log"))
            r = subprocess.run([MARIADB, "--no-defaults", f"--socket={self.socket}", "-uroot",
                                "-e", sql], capture_output=True, text=True, timeout=30)
            return r.returncode == 0

        wait_for(user_created, timeout, interval=0.2, what="mariadbd to answer",
                 error=lambda msg: ClusterError(f"{msg}\n" + self.log_tail("mariadbd.log")))

    def _start_slurmdbd(self, timeout: float) -> None:
        conf = self.root / "etc" / "slurmdbd.conf"
        conf.write_text("\n".join([
            "AuthType=auth/munge", "DbdHost=localhost", "DbdAddr=127.0.0.1",
            f"DbdPort={self.port}", "SlurmUser=root",
            "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1",
            f"StoragePort={self.db_port}", "StorageUser=slurm", f"StoragePass={PASSWORD}",
            "StorageLoc=slurm_acct_db", f"PidFile={self.root / 'run' / 'slurmdbd.pid'}",
            f"LogFile={self.root / 'log' / 'slurmdbd.log'}", "DebugLevel=info", ""]))
        conf.chmod(0o600)  # slurmdbd refuses a config others can read (it holds the password)
        (self.root / "etc" / "slurm.conf").touch()  # slurmdbd finds its conf beside SLURM_CONF
        proc = self._spawn([SLURMDBD, "-D"], "slurmdbd.stdout",
                           env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                                "SLURM_CONF": str(self.root / "etc" / "slurm.conf")})
        def started() -> bool:
            if proc.poll() is not None:
                raise ClusterError("slurmdbd exited at start:\n" + self.log_tail("slurmdbd.log"))
            log = self.log("slurmdbd.log")
            return "slurmdbd version" in log and " started" in log

        wait_for(started, timeout, interval=0.2, what="slurmdbd to start",
                 error=lambda msg: ClusterError(f"{msg}\n" + self.log_tail("slurmdbd.log")))

    def cluster_name(self, wanted: str) -> str:
        """A ClusterName no cluster of this slurmdbd has had: ``wanted`` (sg<ctld port>), or
        it with a suffix when a cluster before this one had that port. Two clusters under one
        name would share one job table: the later one's sacct would show the earlier one's
        jobs, whose ids also start at 1."""
        name, k = wanted, 1
        while name in self._names:
            name, k = f"{wanted}r{k}", k + 1
        self._names.add(name)
        return name

    def slurm_conf_lines(self) -> list[str]:
        """slurm.conf lines that make a cluster record its jobs here."""
        return ["AccountingStorageType=accounting_storage/slurmdbd",
                "AccountingStorageHost=localhost", f"AccountingStoragePort={self.port}"]

    def stop(self) -> None:
        for p in reversed(self._procs):  # slurmdbd first, then its database
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    pass
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                    p.wait(timeout=10)
        self._procs.clear()

    def log(self, name: str) -> str:
        p = self.root / "log" / name
        return p.read_text(errors="replace") if p.exists() else ""

    def log_tail(self, name: str, lines: int = 30) -> str:
        return "\n".join(self.log(name).splitlines()[-lines:])
