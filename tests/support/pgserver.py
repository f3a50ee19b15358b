"""A real PostgreSQL server for the tests: Debian's postgresql, initdb'd into a temp dir.

Runs as the ``postgres`` user (PostgreSQL refuses to run as root) on a free loopback port with
its socket in the temp dir; torn down by pid (pg_ctl stop) at the end of the session. When
PostgreSQL is not installed, ``helpers.require`` skips locally and fails under CI=true.

Fixtures (import them into a test module): ``pg_server`` (session) and ``store_url``
(function-scoped, parametrized over sqlite and postgresql: each test gets a fresh, migrated,
empty store).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.helpers import require


def _pg_bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return os.path.dirname(found[-1]) if found else None


def free_port() -> int:
    """A port handed out once per host (support/ports.py)."""
    from support.ports import free_port as handed

    return handed()


class PgServer:
    def __init__(self, bindir: str, user: str = "postgres", *, durable: bool = False,
                 options: tuple[str, ...] = ()) -> None:
        self.bindir = bindir
        self.user = user
        self.options = options  # more "-c name=value" server settings
        # durable: synchronous_commit=on, so a commit that answered survives a crash of the
        # server process (the fault tests kill it); the default trades that for speed.
        self.durable = durable
        self.tmp = tempfile.mkdtemp(prefix="sg-pg-")
        self.data = os.path.join(self.tmp, "data")
        self.port = free_port()
        pw = pwd.getpwnam(user)
        os.chown(self.tmp, pw.pw_uid, pw.pw_gid)
        os.chmod(self.tmp, 0o755)

    def _as_pg(self, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
        if os.geteuid() == 0:
            argv = ["/usr/sbin/runuser", "-u", self.user, "--", *argv]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=True,
                              cwd=self.tmp)

    def start(self) -> None:
        self._as_pg([f"{self.bindir}/initdb", "-D", self.data, "-A", "trust", "-U", "postgres",
                     "--no-sync", "-E", "UTF8"], timeout=120)
        self.start_again()

    def start_again(self) -> None:
        """Start the (initdb'd) server on its data directory and port, e.g. after crash()."""
        sync = "on" if self.durable else "off"
        opts = (f"-p {self.port} -k {self.tmp} -c listen_addresses=127.0.0.1 -c fsync=off "
                f"-c synchronous_commit={sync} -c full_page_writes=off -c max_connections=100 "
                "-c shared_buffers=32MB" + "".join(f" -c {o}" for o in self.options))
        log = os.path.join(self.tmp, "log")
        try:
            self._as_pg([f"{self.bindir}/pg_ctl", "-D", self.data, "-o", opts, "-l", log, "-w",
                         "-t", "60", "start"], timeout=90)
        except subprocess.CalledProcessError as exc:  # say why: pg_ctl's line and the log's end
            try:
                with open(log, errors="replace") as fh:
                    tail = "".join(fh.readlines()[-15:])
            except OSError:
                tail = "(no log)"
            raise RuntimeError(f"pg_ctl start failed: {exc.stdout}{exc.stderr}\n{tail}") from None

    def standby(self) -> PgServer:
        """A streaming standby of this (running) server, started on a port of its own:
        pg_basebackup -R (standby.signal and primary_conninfo written for it)."""
        other = PgServer(self.bindir, self.user, durable=self.durable, options=self.options)
        self._as_pg([f"{self.bindir}/pg_basebackup", "-h", "127.0.0.1", "-p", str(self.port),
                     "-U", "postgres", "-D", other.data, "-R", "-X", "stream",
                     "--no-sync"], timeout=120)
        other.start_again()
        return other

    def promote(self) -> None:
        """Make this standby the primary (pg_ctl promote, waiting until it accepts writes)."""
        self._as_pg([f"{self.bindir}/pg_ctl", "-D", self.data, "-w", "-t", "60", "promote"],
                    timeout=90)

    def sql(self, statement: str) -> list[tuple]:
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres",
                             autocommit=True) as conn:
            cur = conn.execute(statement)
            return cur.fetchall() if cur.description else []

    def crash(self) -> None:
        """Stop the server the way a crash does (immediate: no checkpoint, clients cut off)."""
        self._as_pg([f"{self.bindir}/pg_ctl", "-D", self.data, "-m", "immediate", "-w",
                     "stop"], timeout=60)

    def stop(self) -> None:
        try:
            self._as_pg([f"{self.bindir}/pg_ctl", "-D", self.data, "-m", "immediate", "-w",
                         "stop"], timeout=60)
        except (subprocess.SubprocessError, OSError):
            pid_file = Path(self.data, "postmaster.pid")
            if pid_file.exists():  # kill our own postmaster by its pid, nothing else
                try:
                    os.kill(int(pid_file.read_text().split()[0]), 9)
                except (OSError, ValueError):
                    pass
        shutil.rmtree(self.tmp, ignore_errors=True)

    def url(self, db: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{db}"

    def create_db(self) -> str:
        import psycopg

        name = "sg_" + uuid.uuid4().hex[:12]
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres",
                             autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return name


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    bindir = _pg_bin()
    require(bindir is not None, "PostgreSQL server binaries (Debian package postgresql)")
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        require(False, "the postgres system user (Debian package postgresql)")
    server = PgServer(bindir)  # type: ignore[arg-type]
    try:
        server.start()
    except subprocess.CalledProcessError as exc:
        server.stop()
        pytest.fail(f"PostgreSQL did not start: {exc.stderr}")
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store migrated to head, on SQLite and on a real PostgreSQL."""
    from slurmguard.store.engine import make_engine
    from slurmguard.store.migrate import upgrade

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/store.db"
    else:
        server: PgServer = request.getfixturevalue("pg_server")
        url = server.url(server.create_db())
    engine = make_engine({"url": url})
    upgrade(engine)
    engine.dispose()
    return url
