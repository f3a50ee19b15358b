"""The Slurm version matrix: the same scenario on Slurm 22.05 (Debian 12), 24.11 (Debian 13)
and 26.05 (Debian testing, forky).

Each test runs once per version (``versioned_cluster``: the session's bookworm cluster, and a
trixie and a forky cluster started once for this module). Each drain scenario prints its
time (``matrix: drain scenario on <version> took N s``: the figure docs/docker.md records). Kept to what must hold on every Slurm the
project supports, to stay inside CI's budget:

- the drain scenario: an Xid on one node's GPU makes its prolog drain it with our reason,
  the `--requeue` job completes on another node, the healthcheck undrains the node once the
  GPU is good again, and an admin's drain on a node that passes its checks stays;
- the adapter (``SlurmCLI``, the checkout's code inside the controller container) reads the
  version, the nodes as text and as JSON, the text serve's one reader publishes (parsed as
  its followers parse it), the jobs, the drained nodes alone and the
  partition table (the hooks' fallback reads: slurmctld answers the partition table without
  packing a node, sdiag says, on every version), and drains / undrains by the rules.
"""

from __future__ import annotations

import json
import sys
import time

import pytest
from dockercluster import DockerCluster

from slurmguard.adapters.slurm.commands import (
    NodeInfo,
    node_info_from_show,
    parse_show_node_oneliner,
)

pytestmark = pytest.mark.e2e

HEALTHCHECK = "/usr/lib/slurmguard/prolog/slurmguard-healthcheck"


def _adapter_view(c: DockerCluster, name: str) -> NodeInfo:
    """The node as slurmguard's parser reads `scontrol show node -o` (real output)."""
    (fields,) = parse_show_node_oneliner(c.sh("ctl", f"scontrol show node -o {name}"))
    return node_info_from_show(fields)
ADMIN_REASON = "admin: memory test"


def test_xid_drain_job_elsewhere_undrain_admin_drain_untouched(
        versioned_cluster: DockerCluster) -> None:
    c = versioned_cluster
    t0 = time.monotonic()
    c.exec("ctl", ["scontrol", "update", "nodename=n2", "state=drain", f"reason={ADMIN_REASON}"])
    try:
        # n1 is the node Slurm picks first (n2 is drained; equal weights, node order), so the
        # job's first start meets the fault; the drain below proves it did.
        c.exec("n1", ["sg-fault", "xid", "2", "79", "GPU has fallen off the bus."])
        job_id = c.sbatch("--requeue", "-N1", "--wrap", "sleep 2; hostname")
        node = c.wait_node("n1", lambda n: "DRAIN" in n["State"], "drained", timeout=60)
        reason = node.get("Reason", "")
        assert reason.startswith("slurmguard: gpu-xid: GPU 2 "), reason
        assert "Xid 79" in reason, reason
        job = c.wait_job(job_id, {"COMPLETED"}, timeout=120)
        assert job["NodeList"] == "n3" and int(job["Restarts"]) >= 1, job

        # The GPU is replaced / the node rebooted: the healthcheck clears our drain, and the
        # same healthcheck on n2 (healthy, drained by an admin) leaves the admin's drain.
        c.exec("n1", ["sg-fault", "clear"])
        for name in ("n1", "n2"):
            rc, out = c.exec(name, [HEALTHCHECK], check=False)
            assert rc == 0, (name, out)
        c.wait_node("n1", lambda n: n["State"] == "IDLE", "idle again", timeout=30)
        n1 = _adapter_view(c, "n1")
        assert (n1.state, n1.flags, n1.reason, n1.ours) == ("idle", frozenset(), "", False), n1
        # 22.05 and 26.05 clear the reason with the drain; 24.11.5 keeps the text on the idle
        # node (docs/slurm.md), which the parser drops: either way the node reads the same.
        version = c.sh("ctl", "scontrol -V").split()[-1]
        if not version.startswith("24.11"):
            assert not n1.raw.get("Reason"), n1.raw
        n2 = c.node("n2")
        assert "DRAIN" in n2["State"] and n2["Reason"].startswith(ADMIN_REASON), n2
        print(f"\nmatrix: drain scenario on {version} took {time.monotonic() - t0:.1f} s",
              file=sys.stderr)
    finally:
        c.exec("ctl", ["scontrol", "update", "nodename=n2", "state=undrain"], check=False)


ADAPTER_PROBE = r"""
import json, sys
from slurmguard.adapters.slurm.commands import SlurmCLI, format_reason
cli = SlurmCLI({})
out = {"version": cli.version(), "ping": cli.ping()}
out["text"] = {n.name: n.to_dict() for n in cli.nodes()}
# serve's one reader (serve/slurmview.py): the leader publishes nodes_text(), the other
# replicas parse it with nodes_from_text into what nodes() gives
from slurmguard.adapters.slurm.commands import nodes_from_text
out["published"] = {n.name: n.to_dict() for n in nodes_from_text(cli.nodes_text())}
out["json"] = {n.name: n.to_dict() for n in cli.nodes_json()}
out["jobs"] = {j.job_id: [j.state, j.nodes, j.requeue, j.held] for j in cli.jobs()}
out["job"] = cli.job(sys.argv[1]).state
out["drain_n1"] = cli.drain("n1", format_reason("matrix", "adapter test"))
out["drain_n2"] = cli.drain("n2", format_reason("matrix", "adapter test"))
out["n1"] = cli.node("n1").to_dict()
out["drained"] = {n.name: n.to_dict() for n in cli.drained_nodes()}
out["drained_text"] = {n.name: n.to_dict() for n in cli.nodes() if n.drained}
out["partitions"] = cli.partitions()
import re, subprocess
def rpcs():  # slurmctld's RPCs by type since the reset, as sdiag counts them
    part = subprocess.run(["sdiag"], capture_output=True, text=True).stdout
    part = part.split("by message type")[1].split("by user")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"(\w+)\s*\(\s*\d+\)\s*count:(\d+)", part)}
for name, read in (("partition_rpcs", cli.partitions), ("drained_rpcs", cli.drained_nodes),
                   ("view_rpcs", cli.nodes_text)):
    subprocess.run(["sdiag", "--reset"], check=True)
    read()
    out[name] = rpcs()
out["undrain_n1"] = cli.undrain("n1")
out["undrain_n2"] = cli.undrain("n2")
out["n1_after"] = cli.node("n1").to_dict()
print(json.dumps(out))
"""


def test_adapter_on_the_real_slurm(versioned_cluster: DockerCluster) -> None:
    c = versioned_cluster
    c.exec("ctl", ["scontrol", "update", "nodename=n2", "state=drain", f"reason={ADMIN_REASON}"])
    try:
        job_id = c.sbatch("-w", "n3", "--requeue", "--wrap", "sleep 120")
        c.wait_job(job_id, {"RUNNING"}, timeout=60)
        _, text = c.exec("ctl", ["/opt/slurmguard/bin/python", "-c", ADAPTER_PROBE, job_id])
        out = json.loads(text.strip().splitlines()[-1])
    finally:
        c.exec("ctl", ["scontrol", "update", "nodename=n2", "state=undrain"], check=False)
    assert out["ping"] is True
    assert out["version"][:2] in ([22, 5], [24, 11], [26, 5]), out["version"]
    # The nodes as text and as JSON agree (scontrol --json on 24.11+, sinfo --json on 22.05).
    assert out["text"] == out["json"]
    # serve's one reader: the published text parses into the same nodes on every version,
    # and costs slurmctld one node-table read
    assert out["published"] == out["text"], out["published"]
    assert out["view_rpcs"].get("REQUEST_NODE_INFO") == 1, out["view_rpcs"]
    assert out["text"]["n2"]["flags"] == ["DRAIN"] and out["text"]["n2"]["reason"] == ADMIN_REASON
    assert out["text"]["n3"]["state"] in ("allocated", "mixed")
    assert out["jobs"] == {job_id: ["RUNNING", "n3", True, False]} and out["job"] == "RUNNING"
    # Ownership rules: our drain on a free node, none over an admin's; undrain only ours.
    assert (out["drain_n1"], out["drain_n2"]) == (True, False)
    assert out["n1"]["reason"] == "slurmguard: matrix: adapter test"
    # The hooks' fallback reads (node/fallback.py): the drained nodes through sinfo -t drain
    # read as the whole table does, and the partition table names every node.
    assert sorted(out["drained"]) == ["n1", "n2"] and out["drained"] == out["drained_text"], out
    assert sorted(out["partitions"]) == sorted({p for n in out["text"].values()
                                                 for p in n["partitions"]}), out["partitions"]
    # what slurmctld packs for them (sdiag): the partition table alone; the node table once
    assert out["partition_rpcs"].get("REQUEST_PARTITION_INFO") == 1, out["partition_rpcs"]
    assert "REQUEST_NODE_INFO" not in out["partition_rpcs"], out["partition_rpcs"]
    assert out["drained_rpcs"].get("REQUEST_NODE_INFO") == 1, out["drained_rpcs"]
    print(f"\nmatrix: {out['version']}: RPCs of partitions(): {out['partition_rpcs']}; of "
          f"drained_nodes(): {out['drained_rpcs']}", file=sys.stderr)
    assert (out["undrain_n1"], out["undrain_n2"]) == (True, False)
    assert "DRAIN" not in out["n1_after"]["flags"] and not out["n1_after"]["reason"]
