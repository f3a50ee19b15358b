"""What the resident agent reads, and when: counted reads, not time.

An idle agent at the default [agent] settings reads no slow source (fs, ib, procs, timesync,
munge) and does not re-read an unchanged kernel-log file: its idle reads per hour are K = 0
(with agent.refresh = R > 0, one read of each slow source a hook needs per refresh pass,
K = 3600 / R). A hook reads a slow source only when the kept value is older than
agent.max_age, so a new fault is seen within max_age: a lost mount by the first hook whose
value is younger than that, an Xid line by the very next hook (the kernel log is read at ask
time). The counts come from the agent's own `SGA1 status` ("reads", "passes"), real agent
process, real compiled client, the fixtures of tests/test_agent.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fakehw.kmsg import inject_xid
from support.wait import counter_advanced, wait_for
from test_agent import GPU2, AgentProc, Node, agent_status, build_clients, via_client

SLOW = ("fs", "ib", "procs", "timesync", "munge")
OLD_KEYS = "max_age = 0.0\nrefresh = 1.0\n"  # what tests/test_agent.py's node sets


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> Path:
    return build_clients(tmp_path_factory.mktemp("clients"))


def configure(n: Node, agent_keys: str, mounts: tuple[str, ...] = ("/",),
              mountinfo: Path | None = None) -> None:
    """The node's config with ``agent_keys`` as its [agent] settings (besides the socket)."""
    n.write_config(mounts)
    text = n.config.read_text()
    assert OLD_KEYS in text
    text = text.replace(OLD_KEYS, agent_keys)
    if mountinfo is not None:
        text = text.replace("[checks.fs]\n", f'[checks.fs]\nmountinfo = "{mountinfo}"\n')
    tmp = n.root / "new.toml"
    tmp.write_text(text)
    os.replace(tmp, n.config)


def reads(n: Node) -> dict[str, int]:
    return dict(agent_status(n)["reads"])


def slow_reads(r: dict[str, int]) -> int:
    return sum(r.get(s, 0) for s in SLOW)


def test_idle_agent_at_defaults_reads_nothing(tmp_path):
    """Defaults (refresh 0): over more than two periods of the old 5-s loop, and six looks of
    the kernel-log follower, no slow source is read and the unchanged log is not re-read."""
    n = Node(tmp_path / "n")
    configure(n, "")
    a = AgentProc(n)
    try:
        s0 = agent_status(n)
        counter_advanced(lambda: int(agent_status(n)["passes"]["follow"]), by=6, timeout=60,
                         what="kernel-log follower looks")
        wait_for(lambda: agent_status(n)["uptime"] >= s0["uptime"] + 11, timeout=60,
                 what="two periods of the old 5-s refresh loop")
        s1 = agent_status(n)
        assert slow_reads(s1["reads"]) == slow_reads(s0["reads"]) == 0, (s0, s1)
        assert s1["reads"]["kmsg"] == s0["reads"]["kmsg"], (s0, s1)
        assert s1["passes"]["background"] == 0
    finally:
        a.stop()


def test_refresh_reads_each_needed_slow_source_once_a_pass(tmp_path):
    """agent.refresh > 0 keeps the periodic refresh: one read of each slow source a hook
    needs (fs and ib among them) per pass, so K = 3600 / refresh reads per source per hour."""
    n = Node(tmp_path / "n")
    configure(n, "refresh = 1.0\nmax_age = 10.0\n")
    a = AgentProc(n)
    try:
        s0 = agent_status(n)
        counter_advanced(lambda: int(agent_status(n)["passes"]["background"]), by=3, timeout=60,
                         what="background passes")
        s1 = agent_status(n)
        passes = s1["passes"]["background"] - s0["passes"]["background"]
        for src in ("fs", "ib"):
            got = s1["reads"].get(src, 0) - s0["reads"].get(src, 0)
            assert passes - 1 <= got <= passes + 1, (src, got, passes, s0, s1)
    finally:
        a.stop()


@pytest.mark.parametrize("max_age, expected", [(0.0, 2), (300.0, 1)])
def test_hooks_read_a_slow_source_once_per_max_age(client, tmp_path, max_age, expected):
    """Two prologs back to back: max_age 0 reads fs for each; max_age 300 reads it once and
    the second answer says how old its value is."""
    n = Node(tmp_path / "n")
    configure(n, f"max_age = {max_age}\n")
    a = AgentProc(n)
    try:
        r0 = reads(n)
        answers = [json.loads(via_client(client, n).stdout) for _ in range(2)]
        r1 = reads(n)
        assert r1.get("fs", 0) - r0.get("fs", 0) == expected, (r0, r1)
        ages = [ans["agent"]["ages"]["fs"] for ans in answers]
        assert ages[0] == 0.0
        assert (ages[1] == 0.0) if expected == 2 else (0 < ages[1] <= max_age), ages
    finally:
        a.stop()


def test_a_lost_mount_is_seen_within_max_age(client, tmp_path):
    """A required mount vanishes from the mount table after a hook read it: until a hook
    reads fs again, answers come from that value and say it is at most max_age old; the
    first answer from a value read after the loss fails fs-mount."""
    max_age = 3.0
    n = Node(tmp_path / "n")
    shared = n.root / "shared"
    shared.mkdir()
    mountinfo = n.root / "mountinfo"
    table = Path("/proc/self/mountinfo").read_text()
    line = f"9999 1 0:999 / {shared} rw,relatime shared:999 - nfs4 filer:/export rw\n"
    mountinfo.write_text(table + line)
    configure(n, f"max_age = {max_age}\n", mounts=("/", str(shared)), mountinfo=mountinfo)
    a = AgentProc(n)
    try:
        first = via_client(client, n)
        assert first.returncode == 0, first.stdout + first.stderr
        assert json.loads(first.stdout)["agent"]["ages"]["fs"] == 0.0
        mountinfo.write_text(table)  # the mount is gone

        def failing() -> dict | None:
            p = via_client(client, n)
            rec = json.loads(p.stdout)
            age = rec["agent"]["ages"]["fs"]
            if p.returncode == 0:
                # Served from the value read before the loss: never older than max_age.
                assert 0 < age <= max_age, rec["agent"]
                return None
            return rec

        rec = wait_for(failing, timeout=max_age + 60, interval=0.5,
                       what="a hook that sees the lost mount")
        assert rec["decision"]["reason"].startswith("slurmguard: fs-mount"), rec["decision"]
        assert rec["agent"]["ages"]["fs"] <= max_age
    finally:
        a.stop()


def test_an_xid_line_is_seen_by_the_next_hook_and_followed_without_one(client, tmp_path):
    """At the defaults: an Xid line written to the kernel log fails the very next hook (read
    at ask time); with no hook asked, the follower reads the grown file once."""
    n = Node(tmp_path / "n")
    configure(n, "")
    a = AgentProc(n)
    try:
        k0 = reads(n)["kmsg"]
        inject_xid(n.kmsg, GPU2, 79, "GPU has fallen off the bus.")
        got = counter_advanced(lambda: reads(n)["kmsg"], timeout=60,
                               what="the follower reading the grown kernel log")
        assert got >= k0 + 1
        p = via_client(client, n)
        assert "agent not used" not in p.stderr, p.stderr
        assert p.returncode == 1
        reason = json.loads(p.stdout)["decision"]["reason"]
        assert reason.startswith("slurmguard: gpu-xid: GPU 2 (PCI 0000:3a:00) Xid 79"), reason
    finally:
        a.stop()
