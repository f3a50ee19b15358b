"""Observe mode (``policy.mode``, docs/policy.md "Observe mode") without a cluster: the key
per group and its default, the config a first `setup` writes, the Slurm adapter's choke point
with recording stand-ins for scontrol and sbatch (real subprocesses), and the would-events
in a real store: once per episode, with the guard's decision, counted as drains are.
The same on a real cluster behind a Slurm shim: tests/test_observe_cluster.py."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from support.sgserve import new_store

from slurmguard import config
from slurmguard.adapters.slurm import burnin as slurm_burnin
from slurmguard.adapters.slurm.commands import SlurmCLI
from slurmguard.contract import CheckResult, Health
from slurmguard.drainguard import WOULD_APPLIED, StorePermit, guarded_drain
from slurmguard.errors import ConfigError, RefusedError
from slurmguard.install.config_example import render
from slurmguard.install.plan import observing_first, prefixed_config
from slurmguard.node.record import make_record
from slurmguard.observe import Withheld, observer, observing_groups, state_change
from slurmguard.policy.lemon import lemon_verdict
from slurmguard.policy.params import PolicyParams
from slurmguard.store import Store
from slurmguard.wouldledger import end_episodes, withheld_to_ledger

NOW = 1_800_000_000.0
NODES = frozenset(f"n{i}" for i in range(1, 5))
SCOPES = {"fleet": NODES, "partition:gpu": NODES}


def _cfg(tmp_path: Path, text: str) -> config.Config:
    p = tmp_path / "sg.toml"
    p.write_text(text)
    return config.load(str(p), env={})


def test_mode_defaults_to_act_and_is_set_per_group(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "")
    assert cfg["policy.mode"] == "act" and observing_groups(cfg) == []
    assert not observer(cfg)("n1")
    cfg = _cfg(tmp_path, '[[group]]\nnodes = "n[1-2]"\npolicy.mode = "observe"\n')
    obs = observer(cfg)
    assert [obs(n) for n in ("n1", "n2", "n3")] == [True, True, False] and not obs(None)
    assert observing_groups(cfg) == ["n[1-2]"]
    cfg = _cfg(tmp_path, '[policy]\nmode = "observe"\n[[group]]\nnodes = "n3"\npolicy.mode = "act"\n')
    assert [observer(cfg)(n) for n in ("n1", "n3")] == [True, False]
    assert observing_groups(cfg) == ["the other nodes (not n3)"]
    with pytest.raises(ConfigError, match=r'policy.mode: expected one of observe, act, got "watch"'):
        _cfg(tmp_path, '[policy]\nmode = "watch"\n')


@pytest.mark.parametrize("content", [render().encode(), prefixed_config("/opt/sg")],
                         ids=["root", "prefix"])
def test_the_first_config_setup_writes_observes_and_says_how_to_act(tmp_path: Path,
                                                                    content: bytes) -> None:
    text = observing_first(content).decode()
    assert tomllib.loads(text)["policy"]["mode"] == "observe"
    assert 'set\n# mode = "act" here, or per [[group]]' in text
    assert _cfg(tmp_path, text)["policy.mode"] == "observe"
    assert tomllib.loads(content.decode()).get("policy", {}).get("mode") is None  # the example acts


@pytest.mark.parametrize("argv,want", [
    (["scontrol", "show", "node", "-o", "n1"], None),
    (["sinfo", "-h", "-N", "-n", "n1"], None),
    (["scontrol", "update", "nodename=n1", "state=drain", "reason=slurmguard: x"],
     ("drain", ("n1",), "", "slurmguard: x")),
    (["scontrol", "update", "nodename=n1", "state=UNDRAIN"], ("undrain", ("n1",), "", "")),
    (["scontrol", "reboot", "ASAP", "nextstate=DOWN", "reason=slurmguard: r", "n2"],
     ("reboot", ("n2",), "", "slurmguard: r")),
    (["scontrol", "update", "jobid=12", "ExcNodeList=n[3-4]"], ("update_job", ("n[3-4]",), "12", "")),
    (["scontrol", "release", "12"], ("release", (), "12", "")),
    (["scontrol", "update", "nodename=n1", "Weight=65000"], ("weight", ("n1",), "", "")),
    (["scontrol", "create", "reservation", "reservationname=r", "nodes=n1"],
     ("reservation", ("n1",), "", "")),
    (["/usr/bin/sbatch", "--parsable", "-w", "n4"], ("sbatch", ("n4",), "", "")),
])
def test_which_calls_change_slurm(argv: list[str], want: object) -> None:
    assert state_change(argv[0], argv[1:]) == want


def _recorders(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """scontrol and sbatch stand-ins: each call appends its argv to calls.jsonl."""
    log = tmp_path / "calls.jsonl"
    tools = {}
    for t in ("scontrol", "sbatch"):
        p = tmp_path / t
        p.write_text(f"#!/usr/bin/python3\nimport json, sys\nopen({str(log)!r}, 'a').write("
                     "json.dumps(sys.argv[1:]) + '\\n')\nprint('77')\n")
        p.chmod(0o755)
        tools[t] = str(p)
    return tools, log


def _calls(log: Path) -> list[list[str]]:
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def test_the_adapter_withholds_every_change_of_an_observing_node_and_no_other(
        tmp_path: Path) -> None:
    tools, log = _recorders(tmp_path)
    cfg = _cfg(tmp_path, f'[slurm]\nscontrol = "{tools["scontrol"]}"\nsbatch = "{tools["sbatch"]}"\n'
                         '[[group]]\nnodes = "n[1-2]"\npolicy.mode = "observe"\n')
    cli = SlurmCLI.from_config(cfg)
    seen = []
    cli.on_withheld = seen.append
    cli.reboot("n1", "slurmguard: repair: x")
    cli.update_job(12, ExcNodeList="n2")
    cli.release(12)  # names no node: goes by the ExcNodeList this adapter sent for job 12
    cli.update_job(12, EligibleTime="now")
    with pytest.raises(RefusedError, match="not submitted"):
        slurm_burnin.sbatch(cli, "#!/bin/sh\n", ["-w", "n1"])
    assert _calls(log) == []
    assert [(w.verb, w.nodes, w.job) for w in seen] == [
        ("reboot", ("n1",), ""), ("update_job", ("n2",), "12"), ("release", ("n2",), "12"),
        ("update_job", ("n2",), "12"), ("sbatch", ("n1",), "")]
    cli.reboot("n3", "slurmguard: repair: x")  # n3 acts
    cli.update_job(13, ExcNodeList="n3")
    assert _calls(log) == [["reboot", "ASAP", "nextstate=DOWN", "reason=slurmguard: repair: x", "n3"],
                           ["update", "jobid=13", "ExcNodeList=n3"]]
    person = SlurmCLI.from_config(cfg, person=True)  # an admin's own `slurmguard drain`
    person.reboot("n1", "slurmguard: repair: by hand")
    assert _calls(log)[-1][-1] == "n1"


@pytest.fixture
def store(tmp_path: Path):
    s = Store.open(url=new_store(tmp_path))
    yield s
    s.close()


def _would(store: Store, node: str, cause: str, at: float) -> tuple[bool, bool, str]:
    permit = StorePermit(store, PolicyParams(blast_max_percent=50.0), SCOPES, via="test")
    return permit.would(node, cause, f"slurmguard: {cause}: x", now=at)


def test_would_drains_are_written_once_per_episode_and_counted_by_the_guard(store: Store) -> None:
    assert _would(store, "n1", "fs-mount", NOW) == (True, True, "allowed")
    assert _would(store, "n1", "fs-mount", NOW + 60) == (False, True, "allowed")  # same episode
    assert _would(store, "n2", "fs-mount", NOW + 61)[:2] == (True, True)
    written, allowed, why = _would(store, "n3", "fs-mount", NOW + 62)  # cap 2 of 4: refused
    assert written and not allowed and "fs-mount failing on 3 nodes" in why
    assert _would(store, "n3", "fs-mount", NOW + 63)[:2] == (False, False)
    assert _would(store, "n3", "gpu-xid:79", NOW + 64)[:2] == (True, True)  # another cause
    kinds = [(e.node, e.kind, e.source) for e in reversed(store.nodes.events())]
    assert kinds == [("n1", "would_drain", "fs-mount"), ("n2", "would_drain", "fs-mount"),
                     ("n3", "would_drain_refused", "fs-mount"), ("n3", "would_drain", "gpu-xid:79")]
    assert end_episodes(store, "n1", "healthcheck passes", at=NOW + 100)
    assert not end_episodes(store, "n1", "healthcheck passes", at=NOW + 101)  # none open
    assert _would(store, "n1", "fs-mount", NOW + 200)[0]  # a new episode: written again
    assert [e.kind for e in store.nodes.events(node="n1")] == ["would_drain", "would_end",
                                                               "would_drain"]


def test_a_hooks_would_drain_is_held_for_a_second_look_as_when_acting(store: Store) -> None:
    """A hook's would-drain asks as its drain would have (serve's /permit): the third node
    failing a shared-service check within the window waits for its second look, which the
    guard then decides (refused at the cap of 2 of 4); without ``asks_as`` it is not held."""
    permit = StorePermit(store, PolicyParams(blast_max_percent=50.0, second_look_delay=10.0),
                         SCOPES, via="healthcheck")

    def ask(node: str, at: float, asks_as: str = "permit") -> tuple[bool, bool, str]:
        return permit.would(node, "fs-mount", "slurmguard: fs-mount: x", now=at,
                            via="healthcheck", asks_as=asks_as)

    assert ask("n1", NOW)[:2] == ask("n2", NOW + 1)[:2] == (True, True)
    written, allowed, why = ask("n3", NOW + 2)
    assert (written, allowed) == (False, False) and why.startswith("held for a second look")
    assert ask("n3", NOW + 5)[:2] == (False, False)  # too soon: still held, nothing written
    written, allowed, why = ask("n3", NOW + 13)  # its second look: the guard, at its cap
    assert written and not allowed and "fs-mount failing on 3 nodes" in why
    assert [(e.node, e.kind) for e in reversed(store.nodes.events())] == [
        ("n1", "would_drain"), ("n2", "would_drain"), ("n3", "drain_held"),
        ("n3", "would_drain_refused")]
    assert ask("n4", NOW + 14, asks_as="")[0]  # as a healthcheck's own via: never held


def test_an_observing_fleets_shared_fault_opens_the_alert_and_flaps_no_node(store: Store) -> None:
    """A filer hangs twice while the fleet observes: the guard's refusal opens the fleet alert
    as it does when acting (a finding, no change to Slurm), so the policy pass excuses the
    hangs' failures and calls no node flapping; without the alert, n4 would be."""
    for i, node in enumerate(sorted(NODES)):  # the first hang: every node fails fs-mount
        _would(store, node, "fs-mount", NOW + i)
    (alert,) = store.nodes.alerts()
    assert (alert.cause, alert.count) == ("fs-mount", 4) and "failing on" in alert.message
    assert [e.kind for e in store.nodes.events(node="n4")] == ["would_drain_refused"]
    ok = [CheckResult("fs-mount", Health.HEALTHY)]
    bad = [CheckResult("fs-mount", Health.UNHEALTHY, "/scratch hangs")]
    for at, results in ((-60, ok), (3, bad), (20, ok), (40, bad), (60, ok)):  # it hangs again
        store.nodes.record_results(make_record("n4", "healthcheck", results,
                                               "pass" if results is ok else "drain", "",
                                               started=NOW + at, duration=0.1))
    now = NOW + 90
    (view,) = store.nodes.policy_views(["n4"], window=3600.0, now=now, scopes=SCOPES).values()
    assert view.shared and lemon_verdict(view, now, PolicyParams()) is None
    bare = lemon_verdict(replace(view, shared=()), now, PolicyParams())
    assert bare is not None and bare.source == "flapping", bare


def test_a_pass_ends_only_what_its_run_could_see(store: Store) -> None:
    """A passing run ends a node's episodes only when it ran each open episode's check
    without an error, and began after the episode's first sighting (the fleet day's shadow
    arm: an epilog, which runs no gpu-ecc, split one ECC fault into two episodes)."""
    checks = ("gpu-ecc", "gpu-xid", "fs-mount")
    assert _would(store, "n5", "gpu-ecc", NOW)[0]
    assert _would(store, "n5", "gpu-xid:79", NOW + 1)[0]
    epilog = {"gpu-xid", "fs-mount"}  # no gpu-ecc
    assert not end_episodes(store, "n5", "epilog passes", at=NOW + 10, passed=epilog,
                            checks=checks)
    assert not end_episodes(store, "n5", "healthcheck passes", at=NOW + 0.5,
                            passed=set(checks), checks=checks)  # began before the Xid's sighting
    assert not _would(store, "n5", "gpu-ecc", NOW + 20)[0]  # still the one episode
    assert end_episodes(store, "n5", "healthcheck passes", at=NOW + 30, passed=set(checks),
                        checks=checks)
    # Records out of order: the hang's pass at +40 stored before a failing run from +35.
    assert _would(store, "n7", "fs-mount", NOW + 30)[0]
    assert end_episodes(store, "n7", "epilog passes", at=NOW + 40, passed=set(checks),
                        checks=checks)
    assert not _would(store, "n7", "fs-mount", NOW + 35)[0]  # the same episode, not a new one
    assert _would(store, "n7", "fs-mount", NOW + 45)[0]  # after the pass: a new one
    assert _would(store, "n6", "flapping", NOW)[0]  # a cause no check names: any pass ends it
    assert end_episodes(store, "n6", "epilog passes", at=NOW + 1, passed=epilog, checks=checks)


def test_guarded_drain_in_observe_mode_never_asks_slurm_to_drain(tmp_path: Path,
                                                                 store: Store) -> None:
    tools, log = _recorders(tmp_path)
    cfg = _cfg(tmp_path, f'[slurm]\nscontrol = "{tools["scontrol"]}"\n[policy]\nmode = "observe"\n')
    cli = SlurmCLI.from_config(cfg)
    permit = StorePermit(store, PolicyParams(), SCOPES, via="gate")
    done = guarded_drain(cli, permit, "n1", "fs-mount", "slurmguard: fs-mount: gone", via="gate",
                         ledger=store, now=NOW)
    assert (done.result, done.detail) == ("would", "guard: allowed")
    node_path = guarded_drain(cli, permit, "n1", "fs-mount", "slurmguard: fs-mount: gone",
                              via="prolog")  # a hook: serve writes the event from the record
    assert node_path.applied.startswith(WOULD_APPLIED)
    assert _calls(log) == []  # not even a read: observe does not depend on Slurm answering
    (e,) = store.nodes.events()
    assert (e.kind, e.details["via"], e.details["guard"]) == ("would_drain", "gate", "allowed")
    w = Withheld("undrain", ("n2",), "", ("scontrol", "update", "nodename=n2", "state=UNDRAIN"))
    assert withheld_to_ledger(store, w, at=NOW, via="serve") == 1
    assert withheld_to_ledger(store, w, at=NOW + 5, via="serve") == 0  # once per episode
    (a,) = store.nodes.events(kinds=["would_act"])
    assert (a.node, a.source, a.details["argv"]) == ("n2", "undrain", ["update", "nodename=n2",
                                                                       "state=UNDRAIN"])


def test_a_would_act_that_follows_a_state_is_not_ended_by_a_passing_run(store: Store) -> None:
    """A probation mark (or a Kubernetes mark, an undrain) stands whatever the checks say:
    once per change of what would be done, a reminder a day; a pass ends only what a check
    opened (no would_end for it alone)."""
    def mark(argv: tuple[str, ...], at: float) -> int:
        w = Withheld("features", ("n4",), "", ("scontrol", *argv))
        return withheld_to_ledger(store, w, at=at, via="serve")

    on = ("update", "nodename=n4", "AvailableFeatures=sg_probation")
    off = ("update", "nodename=n4", "AvailableFeatures=")
    assert mark(on, NOW) == 1
    assert not end_episodes(store, "n4", "prolog passes", at=NOW + 1)  # nothing a pass ends
    assert mark(on, NOW + 2) == 0  # the next pass: the same change, still standing
    assert mark(off, NOW + 3) == 1  # probation over: the mark would come off
    assert mark(off, NOW + 4) == 0
    assert mark(off, NOW + 86400 + 4) == 1  # a day on, still withheld: said again
    assert _would(store, "n4", "fs-mount", NOW + 86500)[0]  # a check's episode ...
    assert end_episodes(store, "n4", "prolog passes", at=NOW + 86501)  # ... a pass ends
    assert [e.kind for e in store.nodes.events(node="n4")][:2] == ["would_end", "would_drain"]


def test_nodes_node_show_and_doctor_say_which_nodes_observe(tmp_path: Path) -> None:
    from support.helpers import run_sg, sg_env

    url = new_store(tmp_path)
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f'[store]\nurl = "{url}"\n[slurm]\nscontrol = "/bin/false"\n'
                   '[repair]\nmode = "act"\n'
                   '[[group]]\nnodes = "n[1-2]"\npolicy.mode = "observe"\n')
    store = Store.open(url=url)
    for n in ("n1", "n3"):
        store.nodes.record_event(n, "clear", "admin:test", "seen", at=NOW)
    store.close()
    env = sg_env(SLURMGUARD_CONFIG=str(cfg))
    nodes = json.loads(run_sg("nodes", "--json", env=env).stdout)
    assert nodes["observing"] == ["n[1-2]"]
    assert {n["name"]: n["mode"] for n in nodes["nodes"]} == {"n1": "observe", "n3": "act"}
    text = run_sg("nodes", env=env).stdout
    assert "observe mode (policy.mode), nothing changed in Slurm: n[1-2]" in text
    show = run_sg("node", "show", "n1", env=env).stdout
    assert "mode:        observe  (policy.mode of [[group]] n[1-2]; checks run" in show, show
    n3 = json.loads(run_sg("node", "show", "n3", "--json", env=env).stdout)["node"]
    assert (n3["mode"], n3["mode_set_by"]) == ("act", "[policy]")
    doctor = json.loads(run_sg("doctor", "controller", "--json", env=env).stdout)
    (item,) = [i for i in doctor["items"] if i["name"] == "policy.mode"]
    assert item["status"] == "pass" and item["detail"].startswith("observe: n[1-2]")
    # precedence, said: repair.mode = act does not apply where policy.mode observes
    assert item["detail"].endswith("(repair.mode = act does not apply there: repair observes)")


def test_precedence_policy_mode_observe_beats_repair_mode_act(tmp_path: Path) -> None:
    """The rule as repair reads it per node (slurmguard/repair/loop.py), and as doctor says
    it; on a real cluster: tests/test_repair_cluster.py and test_observe_cluster.py."""
    from slurmguard.observe import mode_set_by, repair_overridden

    cfg = _cfg(tmp_path, '[repair]\nmode = "act"\n[[group]]\nnodes = "n[1-2]"\n'
                         'policy.mode = "observe"\n[[group]]\nnodes = "n2"\nrepair.mode = "act"\n')
    for node, want in (("n1", "observe"), ("n2", "observe"), ("n3", "act")):
        n = cfg.for_node(node)
        got = "observe" if n["policy.mode"] == "observe" else n["repair.mode"]
        assert got == want, node
    assert repair_overridden(cfg) == ["n[1-2]"]
    assert [mode_set_by(cfg, n) for n in ("n1", "n3")] == ["[[group]] n[1-2]", "[policy]"]
    assert repair_overridden(_cfg(tmp_path, '[policy]\nmode = "observe"\n')) == []  # repair observes


def test_an_unguarded_drain_in_observe_mode_writes_its_would_drain_once(store: Store) -> None:
    """Burn-in restoring the drain it lifted, repair keeping a ticketed node out: no guard to
    ask (as when acting), and the would_drain written all the same, once per episode."""
    from slurmguard.drainguard import Unguarded

    class Observing:  # the adapter's one question; nothing else may be asked of it
        def observes(self, node: str) -> bool:
            return True

    permit = Unguarded("burn-in restores its own drain")
    for at in (NOW, NOW + 60):
        done = guarded_drain(Observing(), permit, "n2", "burnin", "slurmguard: awaiting burn-in",
                             via="burnin", ledger=store, now=at)
        assert (done.result, done.detail) == ("would", "guard: not asked: burn-in restores its "
                                                       "own drain")
    (e,) = store.nodes.events()
    assert (e.kind, e.source, e.details["via"]) == ("would_drain", "burnin", "burnin")


def test_a_drain_notice_of_an_observing_node_acts_on_nothing(tmp_path: Path) -> None:
    """slurmguard.job.respond: told and recorded; no notice file, no signal, no end. A later
    notice of an acting node asks for the checkpoint as always."""
    import os
    import signal
    import subprocess

    from slurmguard.job.notice import Drain, Notice
    from slurmguard.job.respond import NoticeResponse

    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    said: list[str] = []
    try:
        r = NoticeResponse(notice_path=str(tmp_path / "notice"), checkpoint_dir=None,
                           signum=signal.SIGUSR2, timeout=0.0, can_requeue=True,
                           child_pid=child.pid, say=said.append, observes=lambda n: n == "n1")
        r.told([Notice(Drain("n1", "NHC: gone", NOW, "root", "serve"), NOW)], NOW)
        assert r.tick(NOW + 100, [[NOW + 50, 10, 1.0]], (NOW + 100, 12)) is None
        assert not (tmp_path / "notice").exists() and child.poll() is None
        assert r.record()["observed_notices"] == ["n1"] and r.record()["notice_asked_at"] is None
        assert "n1 observes (policy.mode): would ask the job for a checkpoint now" in said[-1]
        r.told([Notice(Drain("n2", "NHC: gone", NOW, "root", "serve"), NOW + 1)], NOW + 1)
        assert json.loads((tmp_path / "notice").read_text())["nodes"] == ["n1", "n2"]
        assert child.wait(timeout=5) == -signal.SIGUSR2  # asked (and sleep dies of it)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
