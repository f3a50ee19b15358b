"""The repair decision core (slurmguard/repair/plan.py): a table of situations -> the next
action, the ladder config refused at load, and the invariants under random ledgers
(Hypothesis): never above the limits, never a rung on a node with a job, never a shared
cause, attempts within the budget, K repairs in W -> a ticket and no more repairs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmguard import config
from slurmguard.errors import ConfigError
from slurmguard.policy.repair_params import REBOOTS, RepairParams, Rung, parse_ladder
from slurmguard.repair.plan import Fleet, NodeIn, RepairEvent, episode_state, plan

P = RepairParams.from_section(config.defaults()["repair"])
FLEET = Fleet(scope_sizes={"fleet": 1000, "partition:gpu": 1000})
NOW = 1_000_000.0


def node(name: str = "n1", cause: str = "gpu-xid:79", **kw: object) -> NodeIn:
    kw.setdefault("mode", "act")
    kw.setdefault("scopes", ("fleet", "partition:gpu"))
    return NodeIn(name, cause, episode=kw.pop("episode", 7), **kw)  # type: ignore[arg-type]


def ev(kind: str, at: float, episode: int = 7, **details: object) -> RepairEvent:
    return RepairEvent(at, kind, {"episode": episode, **details})


def one(n: NodeIn, events: list[RepairEvent] = (), fleet: Fleet = FLEET, p: RepairParams = P):
    [a] = plan([n], {n.name: list(events)}, fleet, p, NOW)
    return a


# -- config ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text,problem", [
    ('"gpu-xid:79" = "rebot, ticket"', "unknown rung 'rebot'"),
    ('"gpu-bogus" = "reboot"', "unknown cause 'gpu-bogus'"),
    ('"gpu-nvlink" = "restart-service"', "restart-service takes one unit name"),
    ('"gpu-lost" = "reboot now"', "restart-service takes one unit name"),
])
def test_a_bad_ladder_is_refused_at_load_with_one_line(tmp_path, text, problem):
    f = tmp_path / "sg.toml"
    f.write_text(f"[repair.ladders]\n{text}\n")
    with pytest.raises(ConfigError) as err:
        config.load(str(f))
    msg = str(err.value)
    assert msg.startswith("repair.ladders:") and problem in msg and "\n" not in msg


def test_site_ladders_replace_a_cause_and_keep_the_defaults(tmp_path):
    f = tmp_path / "sg.toml"
    f.write_text('[repair]\nmode = "act"\n[repair.ladders]\n"gpu-xid:79" = "power-cycle, ticket"\n'
                 '"burnin-gpu-matmul" = "reset-gpu, ticket"\n')
    p = RepairParams.from_section(config.load(str(f)).section("repair"))
    assert p.ladder("gpu-xid:79") == (Rung("power-cycle"), Rung("ticket"))
    assert p.ladder("gpu-xid:31") == parse_ladder("reboot, ticket")  # the family's default
    assert p.ladder("burnin-gpu-matmul")[0] == Rung("reset-gpu")
    assert p.ladder("burnin-host-membw") == parse_ladder("reboot, ticket")
    assert p.ladder("gpu-nvlink")[0] == Rung("restart-service", "nvidia-fabricmanager")
    assert config.defaults()["repair"]["mode"] == "observe"


# -- the table -------------------------------------------------------------------------------

def test_a_fresh_drain_takes_the_first_rung_and_collects_evidence():
    a = one(node())
    assert (a.kind, a.rung, a.attempt, a.first) == ("rung", Rung("reboot"), 1, True)


def test_observe_mode_records_once_and_never_acts():
    a = one(node(mode="observe"))
    assert (a.kind, a.why) == ("observe", "would take reboot")
    assert one(node(mode="observe"), [ev("repair_observe", NOW - 60)]).kind == "hold"


@pytest.mark.parametrize("n,fleet,why", [
    (node(cause="gpu-pcie"), FLEET, "no ladder for gpu-pcie"),
    (node(cause="ib-link"), Fleet({"fleet": 9}, shared_causes=frozenset({"ib-link"})),
     "shared cause"),
    (node(cause="gpu-xid:79"), Fleet({"fleet": 9}, shared_causes=frozenset({"gpu-xid"})),
     "shared cause"),
    (node(lemon=True), FLEET, "lemon"),
    (node(jobs=1), FLEET, "job(s) running"),
    (node(), Fleet({"fleet": 9}, paused=True), "repair paused"),
    (node(), Fleet({"fleet": 9}, reboots_last_hour=4), "reboots in the last hour"),
])
def test_nothing_is_done_when(n, fleet, why):
    a = one(n, fleet=fleet)
    assert a.kind == "hold" and why in a.why


def test_a_reboot_is_proven_by_a_new_boot_id_and_slurmd_registered():
    taken = [ev("repair_start", NOW - 300), ev("repair_rung", NOW - 290, rung="reboot",
                                                boot_before="b1")]
    assert one(node(boot_id="b1", registered=True), taken).kind == "hold"
    assert one(node(boot_id="b2", registered=False), taken).kind == "hold"
    a = one(node(boot_id="b2", registered=True), taken)
    assert (a.kind, a.result) == ("outcome", "proven")
    late = [ev("repair_start", NOW - P.settle - 20),
            ev("repair_rung", NOW - P.settle - 10, rung="reboot", boot_before="b1")]
    a = one(node(boot_id="b1", registered=True), late)
    assert (a.kind, a.result) == ("outcome", "transient")


def test_verified_returns_failing_climbs_and_the_climb_ends_in_a_ticket():
    base = [ev("repair_start", NOW - 900), ev("repair_rung", NOW - 890, rung="reboot"),
            ev("repair_outcome", NOW - 600, rung="reboot", result="proven")]
    a = one(node(healthy_since=NOW - 100), base, p=P._replace(verify_burnin=False))
    assert (a.kind, a.result) == ("outcome", "verified")
    assert one(node(), [*base, ev("repair_outcome", NOW - 90, result="verified")]).kind == "return"
    failed = [*base, ev("repair_outcome", NOW - 90, result="transient")]
    with_ipmi = Fleet({"fleet": 9}, available=frozenset({"reboot", "power-cycle", "ticket"}))
    a = one(node(), failed, fleet=with_ipmi)
    assert (a.kind, a.rung, a.attempt, a.first) == ("rung", Rung("power-cycle"), 2, False)
    a = one(node(), failed, fleet=Fleet({"fleet": 9}, available=frozenset({"reboot"})))
    assert a.kind == "ticket" and "ladder exhausted" in a.why  # power-cycle not configured


def test_the_health_check_at_boot_judges_the_reboot_though_it_reports_before_the_proof():
    """HealthCheckProgram runs when slurmd starts, before it registers: its run comes before
    serve sees the proof. A failure there is the fault surviving the reboot; a failure from
    before the boot (the fault the reboot was for) proves nothing."""
    base = [ev("repair_start", NOW - 900), ev("repair_rung", NOW - 890, rung="reboot"),
            ev("repair_outcome", NOW - 600, rung="reboot", result="proven")]
    booted = NOW - 700  # between the rung and its proof
    a = one(node(booted_at=booted, failing_since=booted + 2), base)
    assert (a.kind, a.result) == ("outcome", "transient") and "fails again" in a.why
    a = one(node(booted_at=booted, failing_since=booted - 50), base)  # before the boot
    assert (a.kind, a.why) == ("hold", "verifying: waiting for a health check")
    a = one(node(booted_at=booted, failing_since=booted - 50, healthy_since=booted + 2), base)
    assert a.kind == "burnin"  # the boot's pass, newer than the failure before the boot
    a = one(node(booted_at=booted, healthy_since=booted + 2, failing_since=booted + 5), base)
    assert (a.kind, a.result) == ("outcome", "transient")  # the newest run decides
    a = one(node(booted_at=None, failing_since=booted + 2), base)  # boot time unknown
    assert (a.kind, a.why) == ("hold", "verifying: waiting for a health check")
    # A command rung has no boot: a failure counts from its proof (the command's end).
    cmd = [ev("repair_start", NOW - 900), ev("repair_rung", NOW - 890, rung="reset-gpu"),
           ev("repair_outcome", NOW - 600, rung="reset-gpu", result="proven")]
    a = one(node(booted_at=booted, failing_since=NOW - 650), cmd)
    assert a.kind == "hold"


def test_verification_is_the_health_checks_and_then_a_quick_burn_in():
    base = [ev("repair_start", NOW - 900), ev("repair_rung", NOW - 890, rung="reboot"),
            ev("repair_outcome", NOW - 600, rung="reboot", result="proven")]
    assert P.verify_burnin  # the default
    assert one(node(), base).kind == "hold"  # no health result yet: no burn-in
    a = one(node(healthy_since=NOW - 100), base)
    assert (a.kind, a.rung, a.attempt) == ("burnin", Rung("reboot"), 1)
    assert one(node(healthy_since=NOW - 100), base,
               fleet=Fleet({"fleet": 9}, paused=True)).why == "repair paused"
    sub = [*base, ev("repair_burnin", NOW - 60, run=5)]
    assert episode_state(sub, 7).state == "burn-in"
    a = one(node(healthy_since=NOW - 100, burnin="pending"), sub)
    assert (a.kind, a.why) == ("hold", "verifying: quick burn-in running")
    for verdict in ("pass", "no_verdict", "degrading"):  # what the nightly report returns on
        a = one(node(healthy_since=NOW - 100, burnin=verdict), sub)
        assert (a.kind, a.result) == ("outcome", "verified"), verdict
    for verdict in ("failed", "flagged", "suspect", "partial"):
        a = one(node(healthy_since=NOW - 100, burnin=verdict, burnin_why="gpu-ecc: DBE"), sub)
        assert (a.kind, a.result) == ("outcome", "transient"), verdict
        assert f"quick burn-in {verdict}" in a.why and "gpu-ecc: DBE" in a.why
    # The health check fails while the burn-in runs: transient at once.
    a = one(node(healthy_since=NOW - 100, failing_since=NOW - 10, burnin="pending"), sub)
    assert (a.kind, a.result) == ("outcome", "transient")
    late = [ev("repair_start", NOW - 5000), ev("repair_rung", NOW - 4990, rung="reboot"),
            ev("repair_outcome", NOW - 4000, rung="reboot", result="proven"),
            ev("repair_burnin", NOW - P.burnin_timeout - 1, run=5)]
    a = one(node(healthy_since=NOW - 3000, burnin="pending"), late)
    assert (a.kind, a.result) == ("outcome", "transient") and "no verdict in" in a.why
    # A failed burn-in climbs: the next rung's proof needs a burn-in of its own.
    climbed = [*sub, ev("repair_outcome", NOW - 50, result="transient"),
               ev("repair_rung", NOW - 40, rung="power-cycle"),
               ev("repair_outcome", NOW - 30, rung="power-cycle", result="proven")]
    a = one(node(healthy_since=NOW - 20, burnin="failed"), climbed)
    assert (a.kind, a.rung) == ("burnin", Rung("power-cycle"))


def test_a_command_rung_interrupted_by_a_restart_is_not_taken_twice():
    events = [ev("repair_start", NOW - 60), ev("repair_rung", NOW - 50, rung="reset-gpu")]
    a = one(node(cause="gpu-xid:48", gpus=(3,)), events)
    assert (a.kind, a.result, a.rung) == ("outcome", "transient", Rung("reset-gpu"))
    after = [*events, ev("repair_outcome", NOW - 40, rung="reset-gpu", result="transient")]
    assert one(node(cause="gpu-xid:48", gpus=(3,)), after).rung == Rung("reboot")


def test_reset_gpu_needs_the_gpus_named_by_the_drain():
    assert one(node(cause="gpu-xid:48", gpus=(3,)),
               fleet=Fleet({"fleet": 9}, available=frozenset({"reset-gpu", "reboot"}))
               ).rung == Rung("reset-gpu")
    assert one(node(cause="gpu-xid:48")).rung == Rung("reboot")


def test_k_repairs_in_the_window_make_a_lemon_until_a_person_returns_it():
    old = [ev("repair_return", NOW - d * 86400, episode=d) for d in (1, 2, 3)]
    a = one(node(), old)
    assert a.kind == "ticket" and "repaired 3 times" in a.why
    admin = RepairEvent(NOW - 3600, "lemon_cleared", {}, admin=True)
    assert one(node(), [*old, admin]).kind == "rung"
    assert one(node(), [ev("repair_return", NOW - 8 * 86400, episode=d) for d in (1, 2, 3)]
               ).kind == "rung"  # outside the window


def test_the_fleet_limits_hold_within_one_pass():
    nodes = [node(f"n{i:03d}", episode=i) for i in range(20)]
    fleet = Fleet({"fleet": 1000, "partition:gpu": 1000})
    acts = plan(nodes, {}, fleet, P, NOW)
    assert sum(a.kind == "rung" for a in acts) == min(P.max_nodes, P.reboots_per_hour)
    small = Fleet({"fleet": 1000, "partition:gpu": 20})  # 5 % of 20: one node
    assert sum(a.kind == "rung" for a in plan(nodes, {}, small, P, NOW)) == 1


# -- invariants ------------------------------------------------------------------------------

RUNG_NAMES = ["reset-gpu", "restart-service", "reboot", "power-cycle"]


@st.composite
def situations(draw):
    n_nodes = draw(st.integers(1, 30))
    nodes, events = [], {}
    for i in range(n_nodes):
        name = f"n{i:03d}"
        cause = draw(st.sampled_from(["gpu-xid:79", "gpu-xid:48", "ib-link", "gpu-lost",
                                      "host-munge", "gpu-pcie"]))
        evs = []
        t = NOW - draw(st.integers(0, 20 * 86400))
        for _ in range(draw(st.integers(0, 8))):
            kind = draw(st.sampled_from(["repair_start", "repair_rung", "repair_outcome",
                                         "repair_return"]))
            rung = draw(st.sampled_from(RUNG_NAMES))
            evs.append(RepairEvent(t, kind, {"episode": draw(st.sampled_from([1, 2])),
                                             "rung": rung, "result": draw(st.sampled_from(
                                                 ["proven", "transient", "verified"]))}))
            t += draw(st.integers(1, 86400))
        events[name] = evs
        nodes.append(NodeIn(name, cause, episode=2, jobs=draw(st.integers(0, 1)),
                            lemon=draw(st.booleans()), gpus=(0,), boot_id="b",
                            registered=draw(st.booleans()),
                            mode=draw(st.sampled_from(["act", "act", "observe"])),
                            scopes=("fleet", f"partition:p{i % 3}")))
    fleet = Fleet({"fleet": n_nodes, **{f"partition:p{k}": 10 for k in range(3)}},
                  shared_causes=frozenset(draw(st.sets(st.sampled_from(["ib-link", "gpu-xid"])))),
                  reboots_last_hour=draw(st.integers(0, 5)), paused=draw(st.booleans()),
                  available=frozenset(RUNG_NAMES + ["ticket"]))
    p = P._replace(max_nodes=draw(st.integers(1, 6)), reboots_per_hour=draw(st.integers(0, 6)),
                   attempts=draw(st.integers(1, 4)), max_percent=draw(st.sampled_from([5.0, 30.0])))
    return nodes, events, fleet, p


@settings(max_examples=150, deadline=None)
@given(situations())
def test_invariants_hold_for_any_ledger(sit):
    nodes, events, fleet, p = sit
    acts = plan(nodes, events, fleet, p, NOW)
    by = {n.name: n for n in nodes}
    states = {n.name: episode_state(events[n.name], n.episode) for n in nodes}
    rungs = [a for a in acts if a.kind == "rung"]
    acting = [a for a in acts if a.kind in ("rung", "ticket", "return")]
    if fleet.paused:
        assert acting == []
    for a in acts:
        n, s = by[a.node], states[a.node]
        if a.kind in ("rung", "ticket", "return"):
            assert n.mode == "act"
            assert n.cause not in fleet.shared_causes
            assert n.cause.partition(":")[0] not in fleet.shared_causes
        if a.kind == "rung":
            assert n.jobs == 0
            assert a.rung not in s.taken  # never a rung twice in an episode
            ladder = [r for r in p.ladder(n.cause) if r.name in fleet.available]
            before = ladder[:ladder.index(a.rung)]
            assert all(r in s.taken for r in before), (a, s)  # none skipped
            assert sum(r.name != "ticket" for r in s.taken) < p.attempts
            assert not (n.lemon and not s.started)
    starts = [a for a in rungs if a.first]
    busy = sum(1 for n in nodes if n.mode == "act" and states[n.name].started
               and not states[n.name].done)
    assert not starts or busy + len(starts) <= p.max_nodes
    for k in range(3):
        scope = f"partition:p{k}"
        cap = max(1, int(10 * p.max_percent / 100))
        before = sum(1 for n in nodes if scope in n.scopes and n.mode == "act"
                     and states[n.name].started and not states[n.name].done)
        new = sum(1 for a in starts if scope in by[a.node].scopes)
        assert new == 0 or before + new <= cap
    reboots = sum(1 for a in rungs if a.rung.name in REBOOTS)
    assert reboots == 0 or fleet.reboots_last_hour + reboots <= p.reboots_per_hour
