"""From a fresh Debian to a checked cluster, as a site admin does it (Debian 12 and 13).

The image (docker-slurm/site/) is a fresh Debian with Debian's Slurm and munge, on which the
README's first command ran verbatim in a copy of this checkout (pip given the host's CA
through PIP_CERT, the pins through PIP_CONSTRAINT). In a container of it, one host that is both controller and node, the
test does only what docs/install.md tells an admin:

1. a plain site slurm.conf, munged, slurmctld and slurmd;
2. `.venv/bin/slurmguard setup node` and `setup controller`; the slurm.conf and
   plugstack.conf lines they print are appended as printed; the daemons restarted;
3. `slurmguard doctor node` and `doctor controller` pass;
4. a fault (the site's /scratch, listed in the site's config, fills up) makes the prolog
   drain the node with our reason;
5. the slurmguard binary removed: the next prolog exits 0 (the job runs), syslog says why
   (a datagram reader on /dev/log stands in for the syslog daemon), the marker names it,
   the node_exporter textfile counts it, and `doctor` fails naming the binary.
"""

from __future__ import annotations

import json
import shlex
import time
import uuid
from collections.abc import Iterator

import docker
import pytest
from dockercluster import LABEL, ClusterError, parse_kv, wait_for
from support.helpers import require

pytestmark = pytest.mark.e2e

SG = "/root/slurmguard/.venv/bin/slurmguard"
HOST = "sgsite"
SITE_CONF = f"""\
ClusterName=site
SlurmctldHost={HOST}
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
NodeName={HOST} CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=main Nodes={HOST} Default=YES State=UP
"""
# The site's filesystems and node_exporter's textfile directory, told to slurmguard the
# documented way (a conf.d file; setup then writes SLURMGUARD_TEXTFILE_DIR for the hooks).
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
SITE_TOML = ('[checks.fs]\nmounts = ["/", "/scratch"]\ndirs = ["/tmp", "/scratch"]\n'
             f'[metrics]\ntextfile_dir = "{TEXTFILE_DIR}"\n'
             # setup's new config observes first (docs/install.md); this site has watched
             # and acts, as the rollout's last step says.
             '[policy]\nmode = "act"\n')
# A syslog daemon's socket: what `logger` sends lands in /var/log/syslog-test.
SYSLOG = r"""
import os, socket
try: os.unlink("/dev/log")
except FileNotFoundError: pass
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.bind("/dev/log"); os.chmod("/dev/log", 0o666)
with open("/var/log/syslog-test", "ab", buffering=0) as f:
    while True: f.write(s.recv(65536) + b"\n")
"""


class Site:
    """One container of the site image: `sh` runs a shell command in it."""

    def __init__(self, client: docker.DockerClient, image: str) -> None:
        run_id = uuid.uuid4().hex[:8]
        self.network = client.networks.create(f"sg-site-{run_id}", labels={LABEL: run_id})
        self.container = client.containers.run(
            image, name=f"sg-site-{run_id}", hostname=HOST, detach=True,
            network=self.network.name, labels={LABEL: run_id}, mem_limit="1g",
            tmpfs={"/scratch": "size=4m"})

    def sh(self, script: str, check: bool = True) -> tuple[int, str]:
        rc, out = self.container.exec_run(["bash", "-c", script])
        text = out.decode(errors="replace")
        if check and rc != 0:
            raise ClusterError(f"site: {script!r} exited {rc}: {text.strip()}\n{self.logs()}")
        return rc, text

    def logs(self) -> str:
        return self.container.exec_run(
            ["bash", "-c", "tail -n 15 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log; "
                           "sinfo -N -o '%N %T %E'; squeue"]).output.decode(errors="replace")

    def node(self) -> dict[str, str]:
        _, out = self.sh(f"scontrol show node -o {HOST}", check=False)
        return parse_kv(out.strip()) if out.startswith("NodeName=") else {}

    def job(self, job_id: str) -> dict[str, str]:
        _, out = self.sh(f"scontrol show job -o {job_id}", check=False)
        return parse_kv(out.strip()) if out.startswith("JobId=") else {}

    def wait_job(self, job_id: str, states: set[str], timeout: float) -> dict[str, str]:
        return wait_for(f"job {job_id} in {sorted(states)}",
                        lambda: (j := self.job(job_id)).get("JobState") in states and j,
                        timeout, context=self.logs)

    def start_daemons(self) -> None:
        self.sh("slurmctld && slurmd")
        wait_for(f"{HOST} idle", lambda: self.node().get("State") == "IDLE", 90,
                 context=self.logs)

    def stop_daemons(self) -> None:
        self.sh("scontrol shutdown; for i in $(seq 100); do pgrep -x 'slurmctld|slurmd' "
                ">/dev/null || exit 0; sleep 0.2; done; exit 1")

    def remove(self) -> None:
        self.container.remove(force=True)
        self.network.remove()


def printed_lines(setup_out: str, header_start: str) -> list[str]:
    """The indented lines under the setup output's header starting with ``header_start``."""
    lines, on = [], False
    for line in setup_out.splitlines():
        if line.startswith(header_start):
            on = True
        elif on and line.startswith("    ") and line.strip():
            lines.append(line.strip())
        elif on and lines:
            break
    return lines


@pytest.fixture(params=["bookworm", "trixie"])
def site(request: pytest.FixtureRequest) -> Iterator[Site]:
    import build_image  # docker-slurm/, on sys.path through conftest

    client = docker.from_env()
    require(_engine(client), "no Docker engine answers (docker-slurm/start-dockerd.sh)")
    start = time.monotonic()
    image = build_image.build_site(request.param, quiet=True)
    print(f"\nsite image {image} ready in {time.monotonic() - start:.0f}s")
    s = Site(client, image)
    try:
        yield s
    finally:
        s.remove()
        left = client.containers.list(all=True, filters={"label": f"{LABEL}"})
        assert s.container.name not in [c.name for c in left]


def _engine(client: docker.DockerClient) -> bool:
    try:
        return bool(client.ping())
    except docker.errors.DockerException:
        return False


def test_fresh_debian_setup_doctor_fault_drains_and_a_missing_binary_fails_open(site: Site) -> None:
    # 1. The site as it was: munge, a plain slurm.conf, the daemons.
    site.sh("dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; "
            "chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; "
            "mkdir -p /run/munge /var/lib/slurm/slurmctld /var/log/slurm /var/spool/slurmd; "
            "chown munge:munge /run/munge; chown slurm:slurm /var/lib/slurm/slurmctld /var/log/slurm; "
            "su -s /bin/sh munge -c /usr/sbin/munged")
    site.sh(f"cat > /etc/slurm/slurm.conf <<'EOF'\n{SITE_CONF}EOF")
    site.sh(f"setsid python3 -c {shlex.quote(SYSLOG)} >/dev/null 2>&1 < /dev/null &")
    site.start_daemons()

    # 2. setup node + controller (as root, from the README's .venv), the printed lines, restart.
    _, node_out = site.sh(f"{SG} setup node")
    _, ctl_out = site.sh(f"{SG} setup controller")
    conf = printed_lines(ctl_out, "slurm.conf")
    assert any(line.startswith("Prolog=/usr/lib/slurmguard/") for line in conf), ctl_out
    assert printed_lines(node_out, "slurm.conf") and conf, node_out
    plug = printed_lines(node_out, "/etc/slurm/plugstack.conf")
    assert plug and "slurmguard_spank.so" in plug[0], node_out
    site.sh(f"printf '%s\\n' {shlex.join(conf)} >> /etc/slurm/slurm.conf; "
            f"printf '%s\\n' {shlex.join(plug)} >> /etc/slurm/plugstack.conf")
    # Idempotent on a real host too: a second run changes nothing.
    for role in ("node", "controller"):
        _, again = site.sh(f"{SG} setup {role}")
        assert "\n0 changes" in again, again
    site.sh(f"mkdir -p /etc/slurmguard/conf.d {TEXTFILE_DIR} && "
            f"printf %s {shlex.quote(SITE_TOML)} > /etc/slurmguard/conf.d/50-site.toml")
    _, again = site.sh(f"{SG} setup node")  # the site's config changed: setup again
    _, defaults = site.sh("cat /etc/default/slurmguard")
    assert f"SLURMGUARD_TEXTFILE_DIR={TEXTFILE_DIR}" in defaults, (again, defaults)
    site.stop_daemons()
    site.start_daemons()
    for role in ("node", "controller"):
        rc, out = site.sh(f"{SG} doctor {role} --json", check=False)
        report = json.loads(out)
        failed = [i for i in report["items"] if i["status"].upper() == "FAIL"]
        assert rc == 0 and report["ok"] and not failed, (role, failed or out)

    # 3. A fault: the site's /scratch is full. The prolog drains the node with our reason.
    site.sh("dd if=/dev/zero of=/scratch/fill bs=64k 2>/dev/null; true")
    _, job_id = site.sh("sbatch --parsable --requeue --wrap true")
    node = wait_for("the prolog's drain", lambda: "DRAIN" in (n := site.node()).get("State", "")
                    and n, 60, context=site.logs)
    assert node["Reason"].startswith("slurmguard: fs-mount: ") and "/scratch" in node["Reason"], node
    # Repaired: the fault first, then the job gone (its epilog, which also finds the fault
    # while it lasts, must be over), then our drain cleared.
    site.sh(f"rm -f /scratch/fill; scancel {job_id.strip()}")
    wait_for("no job left", lambda: not site.sh("squeue -h")[1].strip()
             and "COMPLETING" not in site.node().get("State", ""), 60, context=site.logs)
    site.sh(f"scontrol update nodename={HOST} state=resume")
    wait_for(f"{HOST} idle", lambda: site.node().get("State") == "IDLE", 60, context=site.logs)

    # 4. The slurmguard the hooks run is gone: the prolog fails open, loudly.
    site.sh(f"rm {SG}")
    _, job_id = site.sh("sbatch --parsable --wrap true")
    job = site.wait_job(job_id.strip(), {"COMPLETED"}, 60)
    assert int(job.get("Restarts", "0")) == 0 and "DRAIN" not in site.node()["State"], job
    _, syslog = site.sh("cat /var/log/syslog-test")
    assert "slurmguard" in syslog and "cannot run slurmguard" in syslog and SG in syslog, syslog
    _, marker = site.sh("cat /var/lib/slurmguard/hook-unrunnable.log")
    assert " prolog " in marker and SG in marker, marker
    _, prom = site.sh(f"cat {TEXTFILE_DIR}/slurmguard_hook_unrunnable.prom")
    assert 'slurmguard_hook_unrunnable_total{hook="prolog"} 1' in prom, prom
    rc, out = site.sh("/root/slurmguard/.venv/bin/python -m slurmguard doctor node --json",
                      check=False)
    report = json.loads(out)
    failed = {i["name"]: i for i in report["items"] if i["status"].upper() == "FAIL"}
    assert rc == 1 and not report["ok"], out
    assert any(SG in i["detail"] for i in failed.values()), failed
    assert any("marker" in name or "unrunnable" in name for name in failed), failed
