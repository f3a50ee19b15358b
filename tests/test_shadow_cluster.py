"""The shadow report against planted truth on a real Slurm cluster with accounting: LBNL NHC,
unpatched (tests/support/nhc_node.py, each node's own view), as the site's health check, and
slurmguard observing on the same 5 nodes (docs/install.md, "Rollout: observe, compare, act").

Each node's fixtures (mount table, kernel log, stand-in NVML) are what both read. Planted:

* n1, a required mount missing: both see it; slurmguard's health check runs first (its lead);
* n2, an Xid 79 line in the kernel log (the GPU still answers NVML): slurmguard only; a job
  then fails there;
* n3, uncorrectable ECC errors in the stand-in NVML: slurmguard only (nvidia-smi exits 0
  with ECC errors, and NHC reads no ECC counter);
* n4, a site file NHC tests (``check_file_test -f``) gone: NHC only, and no check of
  slurmguard's reads a site's file list (a check a site writes for its own needs, where NHC
  has one for any file and slurmguard has none);
* n5, healthy, with a transient warning: the mount missing for one health check of
  slurmguard's and back before NHC looks; a job then completes there: would-have-been-false.

NHC drains n1 and n4 itself (its own helper, real scontrol). slurmguard changes nothing in
Slurm (its tools are a shim that refuses and logs every change), writes each would-event once
whatever the number of passes, and the report's four lists equal the planted truth exactly,
from Slurm accounting's node events and again from serve's own node-state history.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fakehw.kmsg import inject_xid, write_gpu_tree
from fakehw.nvml import build_fake_nvml, default_config, with_fault, write_config
from support.helpers import REPO, run_sg, sg_env
from support.nhc_node import REASON_PREFIX, NHCNodes, require_nhc
from support.sgserve import Serve, new_port, new_store
from support.sgserve import write_config as write_sg_config
from support.slurmshim import SlurmShim
from support.wait import WaitTimeout, wait_for

from slurmguard.shadow.report import NO_CHECK
from slurmguard.store import Store

pytestmark = pytest.mark.slurm
NODES = ["n1", "n2", "n3", "n4", "n5"]
MOUNTED = "9999 1 0:999 / {shared} rw,relatime shared:999 - nfs4 filer:/export rw\n"


@dataclass
class NodeView:
    """What support/nhc_node.py's NHCNodes reads of a harness, for one node of this cluster."""

    root: Path
    shared: Path
    conf_path: Path
    libdir: Path
    spec: Any

    def node_dir(self, node: str) -> Path:
        return self.root


@dataclass
class Spec:
    ib_ports: int = 0


def _mount(d: Path, shared: Path, on: bool) -> None:
    table = Path("/proc/self/mountinfo").read_text()
    (d / "mountinfo").write_text(table + (MOUNTED.format(shared=shared) if on else ""))


def test_shadow_report_equals_the_planted_truth(slurm_cluster_factory, slurmdbd,
                                                tmp_path: Path) -> None:
    require_nhc()
    shared = tmp_path / "shared"
    shared.mkdir()
    libdir = build_fake_nvml(tmp_path / "fakenvml")
    gpus = write_gpu_tree(tmp_path / "gpus")
    shim = SlurmShim(tmp_path / "shim")
    c = slurm_cluster_factory(nodes=5, accounting=slurmdbd, timeout=120)
    conf = Path(c.env["SLURM_CONF"])
    nodes: dict[str, Path] = {}
    groups = []
    for n in NODES:
        d = nodes[n] = tmp_path / "nodes" / n
        (d / "bin").mkdir(parents=True)
        for tool in ("sinfo", "scontrol"):  # NHC's helpers: the real tools
            (d / "bin" / tool).symlink_to(f"/usr/bin/{tool}")
        _mount(d, shared, True)
        write_config(d / "nvml.json", default_config(8))
        (d / "kmsg").write_text("")
        (d / "boot_id").write_text(str(uuid.uuid4()) + "\n")
        (d / "site-ok").write_text("")
        groups.append(f'[[group]]\nnodes = "{n}"\nhooks.state_dir = "{d}/state"\n'
                      f'checks.fs.mountinfo = "{d}/mountinfo"\nchecks.xid.file = "{d}/kmsg"\n'
                      f'checks.xid.boot_id_path = "{d}/boot_id"\n')
    url, port = new_store(tmp_path), new_port()
    cfg = write_sg_config(tmp_path, store_url=url, port=port, report_timeout=60.0, extra=f"""
log_file = "{tmp_path}/hooks.log"
healthcheck = ["gpu-count", "gpu-ecc", "gpu-xid", "fs-mount"]
[checks.gpu]
expected_count = 8
[checks.xid]
source = "file"
nvidia_proc_root = "{gpus}"
[checks.fs]
mounts = ["/", "{shared}"]
[policy]
mode = "observe"
blast_max_percent = 50.0
{shim.config()}
{''.join(groups)}""", serve_extra="policy_interval = 1.0\nslurm_view_ttl = 0.5")
    nhc = {}
    for n in NODES:  # NHC per node, with that node's view, and the site's own file check
        nhc[n] = NHCNodes(NodeView(nodes[n], shared, conf, libdir, Spec()), tmp_path / "nhc" / n)
        with open(nhc[n].confdir / "nhc.conf", "a") as fh:
            fh.write(f"* || check_file_test -f {nodes[n]}/site-ok\n")
    serve = Serve(cfg, port, env={"SLURM_CONF": str(conf)}).start()
    store = Store.open(url=url)
    env = {"PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}", "SLURM_CONF": str(conf),
           "SLURMGUARD_CONFIG": str(cfg), "LD_LIBRARY_PATH": str(libdir)}

    def slurmguard(n: str) -> int:
        p = run_sg("healthcheck", env=sg_env(**env, SLURMD_NODENAME=n,
                                              FAKE_NVML_CONFIG=str(nodes[n] / "nvml.json")))
        return p.returncode

    def nhc_pass() -> dict[str, int]:
        return {n: nhc[n].run(n).returncode for n in NODES}

    def would() -> list[tuple[str, str, str]]:
        return sorted((e.node, e.kind, e.source) for e in store.nodes.events(
            kinds=["would_drain", "would_drain_refused"]))

    try:
        assert [slurmguard(n) for n in NODES] == [0] * 5 and nhc_pass() == dict.fromkeys(NODES, 0)
        _mount(nodes["n1"], shared, False)
        inject_xid(nodes["n2"] / "kmsg", "0000:3a:00.0", 79, "GPU has fallen off the bus.")
        write_config(nodes["n3"] / "nvml.json",
                     with_fault(default_config(8), 5, ecc={"volatile_uncorrected": 2}))
        (nodes["n4"] / "site-ok").unlink()
        _mount(nodes["n5"], shared, False)  # the transient: one look of slurmguard's
        assert [slurmguard(n) for n in NODES] == [0] * 5  # observing: every hook exits 0
        _mount(nodes["n5"], shared, True)
        assert slurmguard("n5") == 0  # the warning is gone
        for _ in range(2):  # more passes of slurmguard and NHC: nothing more in the ledger
            assert [slurmguard(n) for n in NODES] == [0] * 5
            assert nhc_pass() == {"n1": 1, "n2": 0, "n3": 0, "n4": 1, "n5": 0}
        planted = [("n1", "would_drain", "fs-mount"), ("n2", "would_drain", "gpu-xid:79"),
                   ("n3", "would_drain", "gpu-ecc"), ("n5", "would_drain", "fs-mount")]
        wait_for(lambda: would() == planted, 30, interval=0.5, what="the 4 would-events")
        for node, reason in (("n1", "check_fs_mount:"), ("n4", "check_file_test:")):
            info = c.node(node)
            assert info.drained and info.reason.startswith(f"{REASON_PREFIX} {reason}"), info
        failed = c.sbatch("#!/bin/sh\nexit 1\n", "-w", "n2", "--output=/dev/null")
        done = c.sbatch("#!/bin/sh\ntrue\n", "-w", "n5", "--output=/dev/null")
        c.wait_job(failed, states=("FAILED",), timeout=120)
        c.wait_job(done, timeout=120)
        # slurmdbd lags slurmctld: a job COMPLETED in scontrol can still read PENDING or
        # RUNNING with no End in sacct (3 of 10 jobs read at once after it, here). Wait for what the
        # report reads (the same sacct window, the same parser): both jobs, final, with an End.
        final = {failed: "FAILED", done: "COMPLETED"}
        seen: list[tuple[str, str, float | None, str]] = []

        def in_accounting() -> bool:
            seen[:] = [(r.job_id, r.state, r.end, r.nodes) for r in
                       c.cli().accounting(since=time.time() - 3600) if r.job_id in final]
            return {j: st for j, st, end, on in seen if end is not None and on} == final

        try:
            wait_for(in_accounting, 60, interval=1, what="both jobs final in accounting")
        except WaitTimeout:
            raise WaitTimeout(f"sacct, wanted {final} with an End: {seen}") from None
        wait_for(lambda: len(store.nodes.events(kinds=["state_change"])) >= 2, 30,
                 interval=0.5, what="serve's node-state history of NHC's drains")

        def report(*args: str) -> dict[str, Any]:
            p = run_sg("shadow", "report", "--since", "1h", "--json", *args,
                       env=sg_env(**env))
            assert p.returncode == 0, p.stderr
            return json.loads(p.stdout)

        for source, where in (("accounting", "sacctmgr show event"),
                              ("history", "serve's node-state history")):
            r = report("--incumbent", source)
            assert r["incumbent_from"] == where
            assert [(x["node"], x["cause"]) for x in r["both"]] == [("n1", "fs-mount")], r
            assert r["both"][0]["lead_s"] > 0  # slurmguard's look came before NHC's
            assert [(x["node"], x["cause"]) for x in r["only_slurmguard"]] == [
                ("n2", "gpu-xid:79"), ("n3", "gpu-ecc")], r
            assert r["only_slurmguard"][0]["ended"] == {"FAILED": 1}
            assert r["only_slurmguard"][1]["jobs"] == []
            assert [(x["node"], x["check"]) for x in r["only_incumbent"]] == [("n4", NO_CHECK)], r
            assert r["only_incumbent"][0]["reason"].startswith(f"{REASON_PREFIX} check_file_test")
            assert [(x["node"], x["cause"]) for x in r["would_have_been_false"]] == [
                ("n5", "fs-mount")], r
            assert [j["state"] for j in r["would_have_been_false"][0]["jobs"]] == ["COMPLETED"]
            assert r["summary"]["nodes_out"] == 4 and r["summary"]["nodes_out_false"] == 1
        assert would() == planted  # still once each
    finally:
        store.close()
        serve.stop()
    assert shim.changes() == []  # slurmguard asked Slurm for no change
    # ... and did read through the shim (serve's view; the health checks ask serve for theirs)
    assert any(x.startswith(("sinfo ", "scontrol show")) for x in shim.calls())
    for n in ("n2", "n3", "n5"):
        assert not c.node(n).drained, c.node(n)
