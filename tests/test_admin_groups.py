"""Who may change what slurmguard does: `drain`, `resume`, `repair pause|resume` run by real
non-root users (made with useradd, run with runuser) against a real Slurm cluster and a real
store. A user outside admin.groups is refused in one line (exit 7) and nothing changes in the
store or in Slurm; a member of admin.groups gets through and is recorded by name; root always
may (docs/triage.md "Who may")."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support import reliability
from support.helpers import REPO, require, run_sg, sg_env
from support.sgserve import new_store

pytestmark = pytest.mark.slurm

OUTSIDER, INSIDER, GROUP = "sgtest-outsider", "sgtest-insider", "sgtest-admins"
SITE = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
    "site-packages"


@pytest.fixture(scope="module")
def users():
    require(os.geteuid() == 0 and shutil.which("useradd") and os.path.exists("/usr/sbin/runuser"),
            "root, useradd and runuser (the test makes two users)")
    made = []
    subprocess.run(["groupadd", "--system", GROUP], check=False, capture_output=True)
    for name, extra in ((OUTSIDER, []), (INSIDER, ["-G", GROUP])):
        subprocess.run(["userdel", name], check=False, capture_output=True)
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        *extra, name], check=True, capture_output=True)
        made.append(name)
    yield
    for name in made:
        subprocess.run(["userdel", name], check=False, capture_output=True)
    subprocess.run(["groupdel", GROUP], check=False, capture_output=True)


@pytest.fixture
def site(users, slurm_cluster_factory):
    """A cluster, a store and a config a non-root user can read (pytest's tmp dirs are root's
    alone); the store's directory writable by the admin group, as setup leaves it."""
    d = Path(tempfile.mkdtemp(prefix="sg-admin-", dir="/tmp"))
    d.chmod(0o755)
    store_dir = d / "store"
    store_dir.mkdir()
    url = new_store(store_dir)
    shutil.chown(store_dir, group=GROUP)
    store_dir.chmod(0o2770)
    db = store_dir / "store.db"
    shutil.chown(db, group=GROUP)
    db.chmod(0o660)
    c = slurm_cluster_factory(nodes=2)
    cfg = d / "sg.toml"
    cfg.write_text(f"""
[store]
url = "{url}"
[admin]
groups = ["{GROUP}"]
[repair]
pause_file = "{d}/repair.paused"
[slurm]
scontrol = "{c.slurm_section['scontrol']}"
""")
    cfg.chmod(0o644)
    yield d, cfg, c, url
    shutil.rmtree(d, ignore_errors=True)


def as_user(user: str, cfg: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """This checkout's slurmguard as ``user``: the system interpreter (the venv's lives under
    /root, which others cannot enter) with this checkout and the venv's packages on its path."""
    argv = ["/usr/sbin/runuser", "-u", user, "--", "/usr/bin/env",
            f"PYTHONPATH={REPO}:{SITE}", f"SLURM_CONF={env['SLURM_CONF']}",
            "/usr/bin/python3", "-m", "slurmguard", "-c", str(cfg), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def _events(url: str) -> list[tuple[str, str, str]]:
    from slurmguard.store import Store

    store = Store.open(url=url)
    try:
        return [(e.node, e.kind, e.who) for e in store.nodes.events(since=0)]
    finally:
        store.close()


def test_outside_admin_groups_drain_resume_and_repair_are_refused(site):
    d, cfg, c, url = site
    before = _events(url)
    lines = {}
    for args in (("drain", "n1", "--reason", "mine now"), ("resume", "n1"),
                 ("repair", "pause", "--reason", "x"), ("repair", "resume")):
        r = as_user(OUTSIDER, cfg, *args, env=c.env)
        assert r.returncode == 7, (args, r.stdout, r.stderr)
        assert r.stdout == ""
        command = " ".join(args[:2]) if args[0] == "repair" else args[0]
        assert r.stderr == (f"slurmguard: error: {command}: refused: {OUTSIDER} is neither root "
                            f"nor in admin.groups ({GROUP})\n"), r.stderr
        lines[command] = r.stderr.strip()
    assert _events(url) == before  # nothing recorded, nothing changed
    assert not (d / "repair.paused").exists()
    assert {n: (c.node(n).drained, c.node(n).reason) for n in c.nodes} == \
        {n: (False, "") for n in c.nodes}
    reliability.record(
        "admin-outside-groups", store="sqlite",
        bad_inputs=f"a real non-root user outside admin.groups runs {', '.join(lines)}",
        figures=f"{len(lines)} refused, exit 7, one line each; store events {len(before)} -> "
                f"{len(_events(url))}; Slurm nodes drained: "
                f"{sum(c.node(n).drained for n in c.nodes)}")


def test_a_member_of_admin_groups_is_recorded_by_name_and_root_always_may(site):
    d, cfg, c, url = site
    r = as_user(INSIDER, cfg, "repair", "pause", "--reason", "firmware", env=c.env)
    assert r.returncode == 0, r.stderr
    from slurmguard.store import Store
    from slurmguard.store.switches import REPAIR_PAUSED

    store = Store.open(url=url)
    try:
        row = store.switches.get(REPAIR_PAUSED)
    finally:
        store.close()
    assert row is not None and row.actor == f"admin:{INSIDER}" and row.reason == "firmware"
    assert as_user(INSIDER, cfg, "repair", "resume", env=c.env).returncode == 0
    # root: allowed without being in the group; the drain is recorded with root's name
    r = run_sg("-c", str(cfg), "drain", "n2", "--reason", "root may",
               env=sg_env(SLURM_CONF=c.env["SLURM_CONF"], SUDO_USER=""))
    assert r.returncode == 0, r.stderr
    assert ("n2", "drain", "admin:root") in [(n, k, w) for n, k, w in _events(url)]
    assert c.node("n2").drained and c.node("n2").reason == "slurmguard: admin: root may"


def test_admin_reads_follow_the_store_files_mode(site):
    """SQLite has no roles: a member of the store's group reads it (`nodes`, `node show`,
    `events`); anyone else cannot open it at all, and says so in one line (exit 5)."""
    d, cfg, c, url = site
    from slurmguard.store import Store

    store = Store.open(url=url)
    try:
        store.nodes.record_event("n1", "drain", "admin:root", "a test row")
    finally:
        store.close()
    r = as_user(INSIDER, cfg, "events", "--json", env=c.env)
    assert r.returncode == 0, r.stderr
    assert [e["node"] for e in json.loads(r.stdout)] == ["n1"]
    assert as_user(INSIDER, cfg, "nodes", "--json", env=c.env).returncode == 0
    denied = as_user(OUTSIDER, cfg, "events", "--json", env=c.env)
    assert denied.returncode == 5, denied.stderr
    assert len(denied.stderr.strip().splitlines()) == 1 and "store" in denied.stderr, denied.stderr
