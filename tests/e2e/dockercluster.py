"""A dockerized Slurm cluster for the end-to-end suite, driven with testcontainers-python.

One user-defined network, a controller container (`ctl`, slurmctld) and N node containers
(`n1`..`nN`, slurmd), all from the image that docker-slurm/build_image.py builds. Each node
container has its own hostname, filesystem and process table, so a test can lose a node for
real: `docker kill` (node lost), `docker pause` (node hung), `docker network disconnect`
(network partition).

The checkout's ``slurmguard/`` (and prolog/, epilog/ when present) are bind-mounted over the
copies installed in the image, so the containers always run this checkout's code while the
image is rebuilt only when the runtime changes.

Every container and the network carry the label ``slurmguard.e2e=<run id>``; ``stop()``
removes them and then asserts that nothing with that label is left.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import docker
from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network

# Ryuk (testcontainers' reaper) is an image from a registry; these machines reach none, and
# this module removes what it creates itself (and checks that it did).
testcontainers_config.ryuk_disabled = True

REPO = Path(__file__).resolve().parents[2]
# Where the image installed slurmguard: its label (build_image.py sets it per Debian
# release: python3.11 on bookworm, 3.13 on trixie), else bookworm's path.
SITE_LABEL = "org.slurmguard.site-packages"
SITE = "/opt/slurmguard/lib/python3.11/site-packages"
LABEL = "slurmguard.e2e"
T = TypeVar("T")


class ClusterError(AssertionError):
    """The cluster did not reach a state a test waited for (an assertion, with context)."""


def wait_for(what: str, fn: Callable[[], T | None], timeout: float, interval: float = 1.0,
             context: Callable[[], str] | None = None) -> T:
    """Call ``fn`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{context()}" if context else ""
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}{extra}")
        time.sleep(interval)


def parse_kv(line: str) -> dict[str, str]:
    """``scontrol show node|job -o`` line -> dict (values may contain spaces only in Reason)."""
    out: dict[str, str] = {}
    key = None
    for token in line.split(" "):
        if "=" in token and not (key == "Reason" and not token.split("=", 1)[0].isalpha()):
            k, v = token.split("=", 1)
            if k and k[0].isupper():
                key = k
                out[k] = v
                continue
        if key is not None:  # continuation of a value with spaces (Reason=..., Comment=...)
            out[key] += " " + token
    return out


@dataclass
class DockerCluster:
    """Controller + nodes on one network. ``gpus`` maps node name -> simulated GPU count."""

    image: str
    gpus: dict[str, int]
    env: dict[str, str] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    shared: Path = field(init=False)
    site: str = field(init=False, default="")
    network: Network | None = field(init=False, default=None)
    containers: dict[str, DockerContainer] = field(init=False, default_factory=dict)
    client: docker.DockerClient = field(init=False)

    def __post_init__(self) -> None:
        self.client = docker.from_env()
        labels = self.client.images.get(self.image).labels or {}
        self.site = labels.get(SITE_LABEL, SITE) + "/slurmguard"
        self.shared = Path(tempfile.mkdtemp(prefix=f"sg-e2e-{self.run_id}."))
        # A test key for root over SSH (triage collect); the nodes' entrypoint installs
        # shared/authorized_keys. The private half stays outside the shared directory.
        self.keydir = Path(tempfile.mkdtemp(prefix=f"sg-e2e-{self.run_id}-key."))
        self.identity = self.keydir / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sg-e2e",
                        "-f", str(self.identity)], check=True, capture_output=True)
        (self.shared / "authorized_keys").write_text(
            self.identity.with_suffix(".pub").read_text())

    # -- lifecycle -----------------------------------------------------------------------

    def _container(self, role: str, hostname: str, extra_env: dict[str, str]) -> DockerContainer:
        assert self.network is not None
        # A node's reboot is its container's restart (docker-slurm/sg-reboot, restart()):
        # slurmd then runs in a time namespace whose boot time is the container's start
        # (SG_FRESH_BOOT), which needs SYS_ADMIN and SYS_TIME in the container.
        node_kw: dict[str, Any] = {"cap_add": ["SYS_ADMIN", "SYS_TIME"]} if role == "node" else {}
        if role == "node":
            extra_env = {"SG_FRESH_BOOT": "1", **extra_env}
        c = (DockerContainer(self.image, labels={LABEL: self.run_id}, hostname=hostname,
                             # tini is in the image; a small memory cap keeps 7 engineers alive
                             mem_limit="512m", **node_kw)
             .with_name(f"sg-e2e-{self.run_id}-{hostname}")
             .with_network(self.network)
             .with_network_aliases(hostname)
             .with_volume_mapping(str(self.shared), "/shared", "rw")
             .with_volume_mapping(str(REPO / "slurmguard"), self.site, "ro")
             .with_command(role))
        for hook in ("prolog", "epilog"):
            if (REPO / hook).is_dir():
                c.with_volume_mapping(str(REPO / hook), f"/usr/lib/slurmguard/{hook}",
                                      "ro")
        for k, v in {**self.env, **extra_env}.items():
            c.with_env(k, v)
        return c

    def start(self, ready_timeout: float = 180) -> DockerCluster:
        """Create the network and containers, then wait until every node is idle."""
        self.network = Network(docker_network_kw={"labels": {LABEL: self.run_id}}).create()
        try:
            nodes = ",".join(self.gpus)
            ctl = self._container("controller", "ctl", {"SG_NODES": nodes})
            self.containers["ctl"] = ctl.start()
            for name, n in self.gpus.items():
                self.containers[name] = self._container("node", name, {"SG_GPUS": str(n)}).start()
            self.wait_ready(ready_timeout)
        except BaseException as exc:
            # The containers go away with stop(): keep what they said.
            logs = "\n".join(self.logs(name) for name in self.containers)
            self.stop(check=False)
            raise ClusterError(f"cluster did not start: {exc}\n{logs}") from exc
        return self

    def wait_ready(self, timeout: float = 180, nodes: list[str] | None = None) -> None:
        """`scontrol ping` answers UP and the nodes are idle (not drained, not down)."""
        for name in self.containers:
            w = self.wrapped(name)
            w.reload()
            if w.status == "exited":
                raise ClusterError(f"container {name} exited\n{self.logs(name)}")
        wait_for("slurmctld to answer `scontrol ping`",
                 lambda: "UP" in self.sh("ctl", "scontrol ping", check=False), timeout,
                 context=lambda: self.logs("ctl"))
        want = nodes or list(self.gpus)
        wait_for(f"nodes {want} idle",
                 lambda: all(self.node(n).get("State") == "IDLE" for n in want), timeout,
                 context=self.describe)

    def stop(self, check: bool = True) -> None:
        """Remove every container and the network; with ``check``, assert none is left."""
        def remove(c: DockerContainer) -> None:
            try:
                w = c.get_wrapped_container()
                w.reload()
                if w.status == "paused":
                    w.unpause()
                c.stop()
            except docker.errors.NotFound:
                pass

        # In parallel: with vfs, removing a container deletes a full copy of the image.
        with ThreadPoolExecutor(max_workers=len(self.containers) or 1) as pool:
            list(pool.map(remove, self.containers.values()))
        self.containers.clear()
        if self.network is not None:
            try:
                self.network.remove()
            except docker.errors.NotFound:
                pass
            self.network = None
        # Files written by root in containers; this suite runs as root too.
        shutil.rmtree(self.shared, ignore_errors=True)
        shutil.rmtree(self.keydir, ignore_errors=True)
        if check:
            self.assert_nothing_left()

    def assert_nothing_left(self) -> None:
        flt = {"label": f"{LABEL}={self.run_id}"}
        left = [c.name for c in self.client.containers.list(all=True, filters=flt)]
        nets = [n.name for n in self.client.networks.list(filters=flt)]
        assert not left and not nets, f"left behind: containers {left}, networks {nets}"

    # -- commands ------------------------------------------------------------------------

    def exec(self, where: str, argv: list[str], check: bool = True) -> tuple[int, str]:
        """Run ``argv`` in container ``where``; return (exit code, stdout+stderr)."""
        rc, out = self.containers[where].get_wrapped_container().exec_run(argv)
        text = out.decode(errors="replace")
        if check and rc != 0:
            raise ClusterError(f"{where}: {shlex.join(argv)} exited {rc}: {text.strip()}")
        return rc, text

    def sh(self, where: str, script: str, check: bool = True) -> str:
        return self.exec(where, ["bash", "-c", script], check=check)[1]

    def logs(self, where: str, lines: int = 30) -> str:
        try:
            w = self.containers[where].get_wrapped_container()
            text = w.logs(tail=lines).decode(errors="replace")
        except docker.errors.DockerException as exc:
            text = f"(no logs: {exc})"
        return f"--- logs of {where} ---\n{text}"

    def node(self, name: str) -> dict[str, str]:
        out = self.sh("ctl", f"scontrol show node -o {shlex.quote(name)}", check=False)
        return parse_kv(out.strip()) if out.startswith("NodeName=") else {}

    def job(self, job_id: str) -> dict[str, str]:
        out = self.sh("ctl", f"scontrol show job -o {shlex.quote(job_id)}", check=False)
        return parse_kv(out.strip()) if out.startswith("JobId=") else {}

    def sbatch(self, *args: str) -> str:
        """Submit a batch job from the controller; return its id."""
        return self.exec("ctl", ["sbatch", "--parsable", *args])[1].strip().split(";")[0]

    def wait_job(self, job_id: str, states: set[str], timeout: float) -> dict[str, str]:
        def done() -> dict[str, str] | None:
            j = self.job(job_id)
            return j if j.get("JobState") in states else None
        return wait_for(f"job {job_id} in {sorted(states)}", done, timeout,
                        context=lambda: f"{self.job(job_id)}\n{self.describe()}")

    def wait_node(self, name: str, pred: Callable[[dict[str, str]], bool], what: str,
                  timeout: float) -> dict[str, str]:
        def ok() -> dict[str, str] | None:
            n = self.node(name)
            return n if n and pred(n) else None
        return wait_for(f"node {name} {what}", ok, timeout, context=self.describe)

    def describe(self) -> str:
        return self.sh("ctl", "sinfo -N -o '%N %T %E'; squeue -o '%i %T %N %r'", check=False)

    def address(self, name: str) -> str:
        """The container's address on the cluster network (what the host reaches it at)."""
        assert self.network is not None
        w = self.wrapped(name)
        w.reload()
        return str(w.attrs["NetworkSettings"]["Networks"][self.network.name]["IPAddress"])

    def known_hosts(self, path: Path, names: list[str]) -> Path:
        """known_hosts for the nodes' addresses, with the host keys read inside the nodes
        (trusted through `docker exec`, never scanned over the network)."""
        lines = []
        for name in names:
            # The entrypoint writes the key at the container's start (ssh-keygen writes the
            # private key, then the public one): read it once it is whole, and say what was
            # seen if it never is. Seen once under load 30: a read that split to fewer than
            # two words.
            seen: list[str] = []

            def whole(name: str = name, seen: list[str] = seen) -> list[str] | None:
                rc, out = self.exec(name, ["cat", "/etc/ssh/ssh_host_ed25519_key.pub"], check=False)
                seen[:] = [f"exit {rc}: {out!r}"]
                return out.split() if rc == 0 and len(out.split()) >= 2 else None

            key = wait_for(f"{name}'s ssh host key", whole, timeout=30,
                           context=lambda name=name, seen=seen: f"last read {seen}\n{self.logs(name)}")
            lines.append(f"{self.address(name)} {key[0]} {key[1]}")
        path.write_text("\n".join(lines) + "\n")
        return path

    # -- faults --------------------------------------------------------------------------

    def wrapped(self, name: str) -> Any:
        return self.containers[name].get_wrapped_container()

    def kill(self, name: str) -> None:
        """Node lost: the container's processes die at once (SIGKILL)."""
        self.wrapped(name).kill()

    def revive(self, name: str) -> None:
        """Start a killed node container again (same filesystem, fresh processes)."""
        self.wrapped(name).start()

    def restart(self, name: str) -> None:
        """Reboot a node: restart its container (processes stopped, the same filesystem, a
        fresh boot: the entrypoint's sg-fault boot and slurmd's new boot time)."""
        self.wrapped(name).restart(timeout=10)

    def reboot_requests(self) -> list[str]:
        """Nodes whose RebootProgram (docker-slurm/sg-reboot) asked for a reboot; each
        request is taken (its file removed) once."""
        out = []
        for f in sorted(self.shared.glob("reboot-*")):
            f.unlink()
            out.append(f.name.split("-", 1)[1])
        return out

    def pause(self, name: str) -> None:
        """Node hung: every process frozen (cgroup freezer), sockets stay open."""
        self.wrapped(name).pause()

    def unpause(self, name: str) -> None:
        self.wrapped(name).unpause()

    def disconnect(self, name: str) -> None:
        """Network partition: the node keeps running but reaches nobody."""
        assert self.network is not None
        self.client.networks.get(self.network.name).disconnect(self.wrapped(name).id)

    def reconnect(self, name: str) -> None:
        assert self.network is not None
        self.client.networks.get(self.network.name).connect(self.wrapped(name).id,
                                                             aliases=[name])
