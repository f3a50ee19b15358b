"""Fixtures of the end-to-end suite: one dockerized Slurm cluster per session, healed per test.

Run it with:  python -m pytest tests/e2e -m e2e     (needs a running Docker engine;
docker-slurm/start-dockerd.sh starts Debian's dockerd when none answers)

Why one cluster per session: with the vfs storage driver (the only one that works on these
machines) creating a container copies the whole image, tens of seconds on 2 busy cores. The
cluster is started once; the ``cluster`` fixture checks before each test that every node is
idle and, after it, undoes what the test did (revives killed nodes, unpauses, reconnects,
cancels jobs, clears our drains) so that tests stay independent. At the end of the session
every container and the network are removed, and the teardown asserts that none is left.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dockercluster import REPO, DockerCluster
from support.helpers import require

sys.path.insert(0, str(REPO / "docker-slurm"))
import build_image  # noqa: E402

# Node name -> simulated GPUs. Three nodes: a faulted node, and two that can take its job.
NODES = {"n1": 4, "n2": 4, "n3": 8}
# Short timeouts keep the suite inside its budget: a lost node is DOWN after
# SG_SLURMD_TIMEOUT s, and a requeued job may start again after SG_CRED_EXPIRE s
# (Slurm's default is 120 s: the delay slurmguard's requeue watcher removes).
CLUSTER_ENV = {"SG_CRED_EXPIRE": "10", "SG_SLURMD_TIMEOUT": "10"}


def _engine_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def e2e_image() -> str:
    """The runtime-tagged test image, built (once) when its tag is missing."""
    require(_engine_answers(),
            "no Docker engine answers (start one with docker-slurm/start-dockerd.sh)")
    start = time.monotonic()
    tag = build_image.build(include_package=False, quiet=True)
    print(f"\ne2e image {tag} ready in {time.monotonic() - start:.0f}s", file=sys.stderr)
    return tag


@pytest.fixture(scope="session")
def docker_cluster(e2e_image: str) -> Iterator[DockerCluster]:
    start = time.monotonic()
    cluster = DockerCluster(e2e_image, dict(NODES), env=dict(CLUSTER_ENV)).start()
    print(f"\ne2e cluster up in {time.monotonic() - start:.0f}s", file=sys.stderr)
    try:
        yield cluster
    finally:
        cluster.stop(check=True)


# The Slurm version matrix: Slurm major -> the Debian release whose packages ship it.
# 22.05 is the session cluster above (bookworm); each other release gets its own cluster,
# started once for the module that asks for it (test_version_matrix.py).
SLURM_RELEASES = {"22.05": "bookworm", "24.11": "trixie", "26.05": "forky"}


def _release_cluster(release: str) -> Iterator[DockerCluster]:
    """A cluster of ``release``'s Slurm, the same shape as the session one."""
    require(_engine_answers(),
            "no Docker engine answers (start one with docker-slurm/start-dockerd.sh)")
    start = time.monotonic()
    image = build_image.build(include_package=False, quiet=True, release_name=release)
    cluster = DockerCluster(image, dict(NODES), env=dict(CLUSTER_ENV)).start()
    print(f"\ne2e {release} image + cluster up in {time.monotonic() - start:.0f}s",
          file=sys.stderr)
    try:
        yield cluster
    finally:
        cluster.stop(check=True)


@pytest.fixture(scope="module")
def trixie_cluster() -> Iterator[DockerCluster]:
    """Debian 13: Slurm 24.11."""
    yield from _release_cluster("trixie")


@pytest.fixture(scope="module")
def forky_cluster() -> Iterator[DockerCluster]:
    """Debian testing (forky): Slurm 26.05."""
    yield from _release_cluster("forky")


@pytest.fixture(params=list(SLURM_RELEASES))
def versioned_cluster(request: pytest.FixtureRequest) -> Iterator[DockerCluster]:
    """The cluster of each Slurm version of the matrix, idle before, healed after.

    Checks that the containers really run that Slurm (``scontrol -V`` on the controller).
    """
    release = SLURM_RELEASES[request.param]
    name = "docker_cluster" if release == build_image.DEFAULT_RELEASE else f"{release}_cluster"
    cluster: DockerCluster = request.getfixturevalue(name)
    cluster.wait_ready(timeout=120)
    version = cluster.sh("ctl", "scontrol -V").split()[-1]
    assert version.startswith(request.param + "."), (release, version)
    try:
        yield cluster
    finally:
        heal(cluster)


def heal(cluster: DockerCluster) -> None:
    """Undo any fault a test left: containers running and connected, healthy simulated
    hardware, no jobs, no drains."""
    for name in cluster.gpus:
        w = cluster.wrapped(name)
        w.reload()
        if w.status == "paused":
            w.unpause()
        elif w.status != "running":
            w.start()
        if cluster.network and cluster.network.name not in (
                w.attrs["NetworkSettings"]["Networks"] or {}):
            cluster.reconnect(name)
    cluster.sh("ctl", "scancel --full $(squeue -h -o %i) 2>/dev/null; true", check=False)
    for name in cluster.gpus:
        # Simulated hardware healthy again (and a new boot id, which ends the Xid latch).
        cluster.exec(name, ["sg-fault", "clear"], check=False)
        node = cluster.node(name)
        if node.get("Reason", "").startswith("slurmguard:") or "DOWN" in node.get("State", ""):
            cluster.exec("ctl", ["scontrol", "update", f"nodename={name}", "state=resume"],
                         check=False)
    cluster.wait_ready(timeout=120)


@pytest.fixture
def cluster(docker_cluster: DockerCluster) -> Iterator[DockerCluster]:
    """The session cluster, all nodes idle before the test; faults undone after it."""
    docker_cluster.wait_ready(timeout=120)
    try:
        yield docker_cluster
    finally:
        heal(docker_cluster)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test on the dockerized cluster carries the marker ``e2e`` (docs/testing.md,
    "Scopes and markers"); a native-Slurm test in this folder keeps its ``slurm`` marker only."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents and "docker_cluster" in getattr(
                item, "fixturenames", ()):
            item.add_marker(pytest.mark.e2e)
