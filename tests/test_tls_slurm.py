"""TLS end to end on a real Slurm cluster: serve with a certificate from a test CA, prologs run
by slurmd and health checks run against the cluster, each node with its own view of serve.

- n1 has the CA and the certificate's name (https://localhost): its prolog and healthcheck
  records arrive over TLS and are stored;
- n2 has another CA: it does not send, spools, says why in its hook line, runs the job and is
  not drained (a slurmguard fault is not a node fault);
- n3 names serve by an address the certificate does not carry (https://127.0.0.1): refused
  the same way.
Nothing from n2 or n3 reaches the store; nothing changes in Slurm (docs/serve.md "TLS").

serve runs in the mode a site runs, `munge`: the hooks sign with this machine's munged, whose
origin (127.0.0.1) is every test node's NodeAddr (localhost), and serve reads the cluster's
node table.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from support import reliability
from support.helpers import sg_argv, sg_env
from support.sgserve import Serve, munge_auth, new_port, new_store, write_config
from support.testca import TestCA

from slurmguard.adapters import spool as spool_files
from slurmguard.store import Store

pytestmark = pytest.mark.slurm
CHECKS = '["fs-mount", "host-memory", "host-cpus"]'


def _node_config(base: Path, d: Path, *, url: str, ca: Path) -> Path:
    """The shared config with this node's own report URL, CA, spool and hook log."""
    d.mkdir()
    text = base.read_text()
    text = text.replace("[hooks]\n", f"[hooks]\nprolog = {CHECKS}\nhealthcheck = {CHECKS}\n"
                                     f'log_file = "{d}/hooks.log"\n', 1)
    text = text.replace(f'spool_dir = "{base.parent}/spool"', f'spool_dir = "{d}/spool"')
    text = text.replace(f'state_dir = "{base.parent}/state"', f'state_dir = "{d}/state"')
    text = text.replace('report_url = "http://127.0.0.1:', f'report_url = "{url}').replace(
        f'tls_ca = "{base.parent}/ca/slurmguard-test-CA.pem"', f'tls_ca = "{ca}"')
    cfg = d / "sg.toml"
    cfg.write_text(text)
    return cfg


def test_records_arrive_over_tls_and_a_refused_certificate_never_drains(
        slurm_cluster_factory, tmp_path: Path) -> None:
    from support import slurmcluster

    ca = TestCA(tmp_path / "ca")
    other = TestCA(tmp_path / "other", "other CA")
    crt, key = ca.issue("serve", ["localhost"])
    port = new_port()
    store_url = new_store(tmp_path)
    base = write_config(tmp_path, store_url=store_url, port=port, auth="munge",
                        serve_extra=f'tls_cert = "{crt}"\ntls_key = "{key}"\n'
                                    f'tls_ca = "{ca.ca_file}"')
    munge_auth()  # the hooks sign with this machine's munged
    cfgs = {"n1": _node_config(base, tmp_path / "n1", url="https://localhost:", ca=ca.ca_file),
            "n2": _node_config(base, tmp_path / "n2", url="https://localhost:",
                               ca=other.ca_file),
            "n3": _node_config(base, tmp_path / "n3", url="https://127.0.0.1:", ca=ca.ca_file)}
    env = sg_env()
    cases = "\n".join(f"  {n}) export SLURMGUARD_CONFIG={shlex.quote(str(c))} ;;"
                      for n, c in cfgs.items())
    hook = slurmcluster.write_shell_hook(tmp_path / "prolog.sh", f"""
export PYTHONPATH={shlex.quote(env["PYTHONPATH"])}
case "$SLURMD_NODENAME" in
{cases}
esac
exec {" ".join(shlex.quote(a) for a in sg_argv("prolog"))}
""")
    cluster = slurm_cluster_factory(nodes=3, prolog=hook)
    serve = Serve(base, port, "--no-policy", tls_ca=ca.ca_file,
                  env={"SLURM_CONF": str(cluster.conf_path)}).start()
    try:
        jobs = {n: cluster.sbatch("true", "-w", n) for n in cfgs}
        states = {n: cluster.wait_job(j, timeout=120)["JobState"] for n, j in jobs.items()}
        for n, c in cfgs.items():  # the health check, as HealthCheckProgram runs it
            p = _healthcheck(cluster, c, n)
            assert p.returncode == 0, p.stderr
        stored = serve.healthz()["runs"]
    finally:
        serve.stop()
    assert states == {"n1": "COMPLETED", "n2": "COMPLETED", "n3": "COMPLETED"}
    with_store = Store.open(url=store_url)
    try:
        from sqlalchemy import select

        from slurmguard.store.models import Node, Run

        with with_store.engine.connect() as conn:
            rows = conn.execute(select(Node.name, Run.hook).join(Node, Run.node_id == Node.id)).all()
    finally:
        with_store.close()
    assert sorted(rows) == [("n1", "healthcheck"), ("n1", "prolog")] and stored == 2
    logs = {n: (tmp_path / n / "hooks.log").read_text() for n in cfgs}
    assert "report spooled" not in logs["n1"], logs["n1"]
    assert "TLS: serve's certificate refused: unable to get local issuer certificate" \
        in logs["n2"], logs["n2"]
    assert "IP address mismatch, certificate is not valid for '127.0.0.1'" in logs["n3"], logs
    for n in ("n2", "n3"):
        lines = [ln for ln in logs[n].splitlines() if "report spooled" in ln]
        assert len(lines) == 2, logs[n]  # one line per hook run: the prolog's, the healthcheck's
        assert len(spool_files.pending(str(tmp_path / n / "spool"))) == 2
    assert {n: cluster.node(n).drained for n in cfgs} == {"n1": False, "n2": False, "n3": False}
    spooled = {n: len(spool_files.pending(str(tmp_path / n / "spool"))) for n in ("n2", "n3")}
    reliability.record(
        "tls-certificate-refused", mode="munge", store="sqlite",
        load=f"real Slurm, 3 nodes: {len(jobs)} prologs by slurmd, {len(cfgs)} health checks",
        bad_inputs="n2: a CA that did not issue serve's certificate; n3: a URL host "
                   "(127.0.0.1) not among its names",
        lost=0, duplicated=0,
        figures=f"stored {stored} (n1's prolog and healthcheck over TLS); n2/n3 sent nothing, "
                f"spooled {spooled['n2']}/{spooled['n3']}, one refusal line per hook run; "
                f"jobs {sorted(set(states.values()))}; drained "
                f"{sum(cluster.node(n).drained for n in cfgs)}")


def _healthcheck(cluster, cfg: Path, node: str):  # type: ignore[no-untyped-def]
    import subprocess

    env = sg_env(SLURMGUARD_CONFIG=str(cfg), SLURMD_NODENAME=node, **cluster.env)
    return subprocess.run(sg_argv("healthcheck"), env=env, capture_output=True, text=True,
                          timeout=120)
