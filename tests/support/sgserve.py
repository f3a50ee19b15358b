"""Run a real `slurmguard serve` subprocess for tests and benchmarks (torn down by pid)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from support.helpers import REPO, require, sg_argv, sg_env
from support.pgserver import free_port
from support.wait import WaitTimeout, wait_for

TOKEN = "test-token-0123456789abcdef"
JOB_TOKEN = "job-token-0123456789abcdef"


def job_token_line(d: Path) -> str:
    """``job_token_file = "..."`` for a ``[notice]`` section, the file written under ``d``
    (mode 0644: jobs read it). In token mode the jobs' wrappers read /drains and post /suspect
    with it; serve shows node state to no one without a credential (docs/security.md)."""
    path = d / "job-token"
    if not path.exists():
        path.write_text(JOB_TOKEN + "\n")
        path.chmod(0o644)
    return f'job_token_file = "{path}"'


def new_store(d: Path, name: str = "store.db") -> str:
    """A migrated, empty SQLite store under ``d``; returns its URL."""
    from slurmguard.store.engine import make_engine
    from slurmguard.store.migrate import upgrade

    url = f"sqlite:///{d}/{name}"
    engine = make_engine({"url": url})
    upgrade(engine)
    engine.dispose()
    return url


def munge_auth() -> Any:
    """This machine's munged as the signer of every test node (serve.auth = munge): the
    nodes of :func:`write_config`'s ``nodes`` are all at 127.0.0.1, the origin it stamps.
    Skips (fails under CI=true) where no munged answers."""
    from slurmguard.adapters import munge
    from slurmguard.adapters.serve_client import munge_signer

    try:
        munge.decode(munge.encode(b""))
    except munge.MungeError as exc:
        require(False, f"a munged answering here (serve.auth = munge): {exc.message}")
    return munge_signer()


def _munge_nodes(d: Path, nodes: Iterable[str]) -> str:
    """The ``[slurm]`` section of a serve in munge mode without a Slurm of its own: a stand-in
    ``scontrol`` printing, for ``show node -o``, the line real Slurm 22.05.8 printed for n1
    (tests/data/slurm/show-node-idle-22.05.8.txt) once for each of ``nodes`` under its name,
    ``NodeAddr=localhost`` as captured: every node at 127.0.0.1, like one host running many
    slurmd (``slurmd -N``); for ``show config`` the captured 22.05.8 config (SlurmUser root).
    Anything else it appends to ``scontrol-calls`` and exits 1 (serve asks nothing more with
    --no-policy)."""
    data = REPO / "tests" / "data" / "slurm"
    line = (data / "show-node-idle-22.05.8.txt").read_text().splitlines()[0]
    assert line.startswith("NodeName=n1 ") and " NodeAddr=localhost " in line
    table = d / "scontrol-nodes.txt"
    table.write_text("".join(line.replace("NodeName=n1 ", f"NodeName={n} ", 1) + "\n"
                             for n in nodes))
    scontrol = d / "scontrol"
    scontrol.write_text(f"""#!/bin/sh
case "$1 $2" in
  "show node") exec cat '{table}' ;;
  "show config") exec cat '{data / "show-config-22.05.8.txt"}' ;;
esac
echo "$@" >> '{d / "scontrol-calls"}'
exit 1
""")
    scontrol.chmod(0o755)
    return f'\n[slurm]\nscontrol = "{scontrol}"\n'


def write_config(d: Path, *, store_url: str, port: int, extra: str = "",
                 spool_max: int = 10000, report_timeout: float = 5.0,
                 serve_extra: str = "", auth: str = "token", nodes: Iterable[str] = ()) -> Path:
    """A config with the store, serve and node-side report settings of a test setup.

    ``auth`` is serve.auth: "token" for the suite's many serve tests (one shared token);
    "munge", the default a site runs, with ``nodes``: serve's Slurm is a stand-in node table
    (:func:`_munge_nodes`) putting them all at 127.0.0.1, where this machine's munged signs
    (:func:`munge_auth`); the node-identity tests (test_node_identity*.py) run a real Slurm
    and a munged per test node instead."""
    if nodes:
        extra += _munge_nodes(d, nodes)
    token = d / "token"
    if not token.exists():
        token.write_text(TOKEN + "\n")
        token.chmod(0o600)
    cfg = d / "sg.toml"
    cfg.write_text(f"""
[store]
url = "{store_url}"

[serve]
host = "127.0.0.1"
port = {port}
auth = "{auth}"
token_file = "{token}"
batch_interval = 0.05
{serve_extra}

[hooks]
report_url = "http://127.0.0.1:{port}/ingest"
token_file = "{token}"
spool_dir = "{d}/spool"
spool_max = {spool_max}
report_timeout = {report_timeout}
state_dir = "{d}/state"
{extra}
""")
    return cfg


class Serve:
    def __init__(self, cfg: Path, port: int, *args: str, env: dict[str, str] | None = None,
                 tls_ca: Path | None = None) -> None:
        """``tls_ca``: serve speaks HTTPS (serve.tls_cert in ``cfg``) with a certificate for
        ``localhost`` that this CA signed; the harness verifies it like a node."""
        self.cfg = cfg
        self.port = port
        self.tls_ca = tls_ca
        self.args = args
        self.env = env or {}
        self.proc: subprocess.Popen[str] | None = None
        self.log = cfg.parent / f"serve-{port}.log"

    @property
    def url(self) -> str:
        if self.tls_ca is not None:
            return f"https://localhost:{self.port}"
        return f"http://127.0.0.1:{self.port}"

    def _open(self, req: urllib.request.Request | str, timeout: float):  # type: ignore[no-untyped-def]
        if self.tls_ca is None:
            return urllib.request.urlopen(req, timeout=timeout)
        import ssl

        ctx = ssl.create_default_context(cafile=str(self.tls_ca))
        return urllib.request.urlopen(req, timeout=timeout, context=ctx)

    def start(self, timeout: float = 30) -> Serve:
        logf = open(self.log, "a")
        self.proc = subprocess.Popen(sg_argv("-c", str(self.cfg), "serve", *self.args),
                                     env=sg_env(**self.env), stdout=logf, stderr=logf, text=True,
                                     start_new_session=True)
        logf.close()

        def up() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited {self.proc.returncode}: {self.log.read_text()}")
            with self._open(self.url + "/healthz", timeout=1) as r:
                return r.status == 200

        try:
            wait_for(up, timeout, what="serve's /healthz", ignore=(OSError,))
        except WaitTimeout:
            self.stop()
            raise RuntimeError(f"serve did not come up: {self.log.read_text()}") from None
        return self

    def healthz(self, token: str | None = TOKEN) -> dict:
        """serve's /healthz; with the token (the default) the figures, without it only the
        status (what an unauthenticated liveness probe may learn)."""
        req = urllib.request.Request(self.url + "/healthz")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        with self._open(req, timeout=5) as r:
            return json.loads(r.read())

    def node_state(self, node: str) -> dict | None:
        """``node`` as serve's cached view of Slurm holds it (``POST /nodestate``, what a
        node's health check asks; with the shared token, so serve.auth = token only)."""
        req = urllib.request.Request(f"{self.url}/nodestate", data=json.dumps(
            {"node": node}).encode(), headers={"Authorization": f"Bearer {TOKEN}",
                                               "Content-Type": "application/json"})
        with self._open(req, timeout=5) as r:
            return json.loads(r.read())["node"]

    def metric(self, name: str, **labels: str) -> float:
        """The sum of ``name``'s samples on /metrics whose labels include ``labels`` (0 when
        there is none yet: a labelled counter has no sample before its first count)."""
        from prometheus_client.parser import text_string_to_metric_families

        req = urllib.request.Request(self.url + "/metrics")
        req.add_header("Authorization", f"Bearer {TOKEN}")  # in case metrics.require_token
        with self._open(req, timeout=5) as r:
            text = r.read().decode()
        return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
                   if s.name == name and labels.items() <= s.labels.items())

    def policy_passes(self) -> int:
        """Fleet policy passes completed (`slurmguard_policy_passes_total{result="ok"}`): a
        test that asserts "the policy did nothing" waits for this to advance first."""
        return int(self.metric("slurmguard_policy_passes_total", result="ok"))

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


def new_port() -> int:
    return free_port()
