"""`slurmguard triage collect` over real SSH into the node containers."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from dockercluster import DockerCluster
from support.helpers import run_sg

pytestmark = pytest.mark.e2e


def _text(tar: tarfile.TarFile, prefix: str) -> dict[str, str]:
    """What the bundle holds for a node besides check.json (for a failure message)."""
    out = {}
    for m in tar.getmembers():
        if m.name.startswith(prefix) and m.isfile() and m.size < 20000:
            out[m.name] = tar.extractfile(m).read().decode(errors="replace")[-2000:]  # type: ignore[union-attr]
    return out


def test_triage_collect_from_node_containers(cluster: DockerCluster, tmp_path: Path) -> None:
    # Evidence to find: the driver's Xid 79 on GPU 1 of n2 only.
    cluster.exec("n2", ["sg-fault", "xid", "1", "79", "GPU has fallen off the bus."])
    nodes = sorted(cluster.gpus)
    known = cluster.known_hosts(tmp_path / "known_hosts", nodes)
    maps = [f"--host-map={n}={cluster.address(n)}" for n in nodes]
    bundle = tmp_path / "evidence.tar.gz"
    proc = run_sg("triage", "collect", ",".join(nodes), "--tar", str(bundle), "--json",
                  "--user", "root", "--identity", str(cluster.identity),
                  "--known-hosts", str(known), *maps, timeout=300)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads(proc.stdout)
    for n in nodes:
        entry = manifest["nodes"][n]
        assert entry["status"] in ("ok", "partial"), entry
        assert entry["host"] == cluster.address(n), entry

    with tarfile.open(bundle) as tar:
        top = bundle.name.removesuffix(".tar.gz")
        names = tar.getnames()
        checks = {}
        for n in nodes:
            member = f"{top}/{n}/check.json"
            assert member in names, (names, manifest["nodes"][n], _text(tar, f"{top}/{n}"))
            checks[n] = json.load(tar.extractfile(member))  # type: ignore[arg-type]
    # Each node's own `slurmguard check` answered from that node's own simulated hardware.
    for n, record in checks.items():
        assert record["node"] == n, record
        xid = next(r for r in record["results"] if r["name"] == "gpu-xid")
        if n == "n2":
            assert xid["health"] == "unhealthy" and "Xid 79" in xid["reason"], xid
        else:
            assert xid["health"] == "healthy", (n, xid)


def test_triage_collect_refuses_unknown_host_key(cluster: DockerCluster, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    proc = run_sg("triage", "collect", "n1", "--out", str(tmp_path / "b"), "--json",
                  "--identity", str(cluster.identity), "--known-hosts", str(empty),
                  f"--host-map=n1={cluster.address('n1')}", timeout=120)
    assert proc.returncode == 4, proc.stderr
    entry = json.loads(proc.stdout)["nodes"]["n1"]
    assert entry["status"] == "failed" and entry["error_kind"] == "unknown-host", entry
