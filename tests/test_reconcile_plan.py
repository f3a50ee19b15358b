"""The reconcile planner: a table of (Slurm view, Kubernetes view) -> actions, and properties."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmguard.contract import CORDONED_BY, MARKED_AT, REASON_ANNOTATION, TAINT_KEY, rfc3339
from slurmguard.reconcile.plan import (
    HOLD,
    K8S_MARK,
    K8S_UNMARK,
    K8S_UPDATE,
    NONE,
    REFUSED,
    SLURM_DRAIN,
    SLURM_UNDRAIN,
    Rules,
    plan,
    plan_node,
    taint_value,
)
from slurmguard.reconcile.views import KubeView, NameMapping, SlurmView, kube_view, map_kube_names

NOW = 1_800_000_000.0
R = Rules(not_ready_grace=300, min_hold=300, blast_max_nodes=100, blast_max_percent=100)

# -- builders -------------------------------------------------------------------------------------

ok_s = SlurmView("n1", "idle")
admin_drain = SlurmView("n1", "idle", frozenset({"DRAIN"}), "bad dimm, ticket 42", NOW - 9999)
sg_drain = SlurmView("n1", "idle", frozenset({"DRAIN"}), "slurmguard: gpu-xid: Xid 79 on GPU 3", NOW - 9999)
k8s_drain = SlurmView("n1", "idle", frozenset({"DRAIN"}), "slurmguard: k8s: NotReady", NOW - 9999)
k8s_drain_new = SlurmView("n1", "idle", frozenset({"DRAIN"}), "slurmguard: k8s: NotReady", NOW - 10)
down = SlurmView("n1", "down", frozenset(), "Not responding", NOW - 9999)
# Right after an UNDRAIN, or a slurmctld restart, until the next ping answers: "idle*".
pinging = SlurmView("n1", "idle", frozenset({"NOT_RESPONDING"}))


def kv(*, ready: str = "True", ready_age: float = 9999, unsched: bool = False, ours: bool = False,
       taint: str | None = None, conds: dict[str, str] | None = None, marked_age: float | None = 9999,
       reason: str = "", cond: str = "") -> KubeView:
    ann: dict[str, str] = {}
    if ours:
        ann[CORDONED_BY] = "slurmguard"
    if (ours or taint is not None) and marked_age is not None:
        ann[MARKED_AT] = rfc3339(NOW - marked_age)
    if reason:
        ann[REASON_ANNOTATION] = reason
    return KubeView("n1", unschedulable=unsched, cordoned_by_us=ours and unsched, our_taint=taint,
                    ready=ready, ready_since=NOW - ready_age,
                    conditions={"Ready": ready, **(conds or {})}, annotations=ann,
                    our_condition=cond, resource_version="7")


ok_k = kv(cond="True")
marked = kv(unsched=True, ours=True, taint="gpu-xid", reason=sg_drain.reason, cond="False")

TABLE = [
    # (name, slurm, kube, expected kinds)
    ("both healthy", ok_s, ok_k, [NONE]),
    ("slurmguard drain -> mark", sg_drain, ok_k, [K8S_MARK]),
    ("admin drain -> mark", admin_drain, ok_k, [K8S_MARK]),
    ("slurm down -> mark", down, ok_k, [K8S_MARK]),
    ("slurm down and not responding -> mark", SlurmView("n1", "down", frozenset({"NOT_RESPONDING"}),
                                                        "Not responding", NOW - 9999), ok_k, [K8S_MARK]),
    ("not responding alone (after an undrain) is not down", pinging, ok_k, [NONE]),
    ("not responding alone: our old mark comes off", pinging, marked, [K8S_UNMARK]),
    ("not responding alone: a k8s problem still drains", pinging, kv(unsched=True), [SLURM_DRAIN]),
    ("already marked, same reason", sg_drain, marked, [NONE]),
    ("reason changed -> update", admin_drain, marked, [K8S_UPDATE]),
    ("healthy again, mark old -> unmark", ok_s, marked, [K8S_UNMARK]),
    ("healthy again, mark new -> hold", ok_s, kv(unsched=True, ours=True, taint="x", marked_age=10), [HOLD]),
    ("admin cordon, never ours -> drain", ok_s, kv(unsched=True), [SLURM_DRAIN]),
    ("admin cordon + admin drain: nothing to undo", admin_drain, kv(unsched=True, cond="True"), [K8S_MARK]),
    ("NotReady past grace -> drain", ok_s, kv(ready="False", ready_age=600), [SLURM_DRAIN]),
    ("NotReady Unknown past grace -> drain", ok_s, kv(ready="Unknown", ready_age=600), [SLURM_DRAIN]),
    ("NotReady within grace -> hold", ok_s, kv(ready="False", ready_age=60), [HOLD]),
    ("problem condition -> drain", ok_s, kv(conds={"KernelDeadlock": "True"}), [SLURM_DRAIN]),
    ("unconfigured condition ignored", ok_s, kv(conds={"DiskPressure": "True"}, cond="True"), [NONE]),
    ("k8s drain not echoed back", k8s_drain, kv(ready="False", ready_age=600), [NONE]),
    ("k8s healthy -> undrain our k8s drain", k8s_drain, ok_k, [SLURM_UNDRAIN]),
    ("k8s healthy, our drain new -> hold", k8s_drain_new, ok_k, [HOLD]),
    ("k8s healthy never undrains a health-check drain", sg_drain, marked, [NONE]),
    ("k8s healthy never undrains an admin drain", admin_drain, kv(reason="bad dimm, ticket 42", taint="slurm-drain", cond="False"), [NONE]),
    ("NotReady but slurm down: left alone (and marked)", down, kv(ready="False", ready_age=600), [K8S_MARK, NONE]),
    ("NotReady on admin-drained node: no second drain", admin_drain, kv(ready="False", ready_age=600), [K8S_MARK]),
    ("our cordon is not 'cordoned by others'", sg_drain, marked, [NONE]),
    ("k8s drain + k8s still NotReady: not undrained", k8s_drain, kv(ready="False", ready_age=10), [HOLD]),
    ("Ready condition absent: no drain, no undrain", k8s_drain, kv(ready=""), [NONE]),
    ("stale condition False with no marks -> unmark", ok_s, kv(cond="False", marked_age=None), [K8S_UNMARK]),
]


@pytest.mark.parametrize("name,s,k,kinds", TABLE, ids=[t[0] for t in TABLE])
def test_plan_table(name: str, s: SlurmView, k: KubeView, kinds: list[str]) -> None:
    assert [a.kind for a in plan_node(s, k, R, NOW)] == kinds


def test_mark_details() -> None:
    [a] = plan_node(sg_drain, ok_k, R, NOW)
    assert (a.taint, a.reason, a.cordon) == ("gpu-xid", sg_drain.reason, True)
    [a] = plan_node(admin_drain, kv(unsched=True, cond="True"), R, NOW)
    assert a.cordon is False and a.taint == "slurm-drain"  # someone else's cordon: not claimed
    [a] = plan_node(ok_s, kv(ready="False", ready_age=600, unsched=True, conds={"KernelDeadlock": "True"}), R, NOW)
    assert a.reason == "slurmguard: k8s: NotReady, cordoned, KernelDeadlock"


def test_taint_values_are_label_values() -> None:
    assert taint_value(SlurmView("n", "idle", frozenset({"DRAIN"}), "slurmguard: fs mount!: x")) == "fs-mount"
    assert taint_value(down) == "slurm-down"
    assert taint_value(SlurmView("n", "idle", frozenset({"FAIL"}), "x")) == "slurm-fail"


def test_fail_closed_when_a_side_is_unreadable() -> None:
    s = {"n1": sg_drain}
    k = {"n1": kv(ready="False", ready_age=600)}
    for sv, kvs, failed in ((None, k, ["slurm"]), (s, None, ["kubernetes"]), (None, None, ["slurm", "kubernetes"])):
        p = plan(sv, kvs, R, NOW)
        assert p.actions == [] and p.failed == failed


def test_one_sided_nodes_are_reported_not_acted_on() -> None:
    p = plan({"n1": sg_drain, "n9": sg_drain}, {"n1": ok_k, "k7": kv(ready="False")}, R, NOW,
             unmapped=["weird"])
    assert p.slurm_only == ["n9"]
    assert p.k8s_only == ["n1", "weird"]  # k7's view is named n1 by the builder
    assert {a.node for a in p.actions} == {"n1"}


def test_blast_radius_goes_through_the_health_paths_guard() -> None:
    rules = Rules(blast_max_nodes=3, blast_max_percent=100, blast_window=3600, min_hold=0)
    slurm = {f"n{i}": SlurmView(f"n{i}", "idle", frozenset({"DRAIN"}), "maintenance") for i in range(10)}
    kube = {f"n{i}": KubeView(f"n{i}", ready_since=NOW - 9999) for i in range(10)}
    p = plan(slurm, kube, rules, NOW)
    kinds = [a.kind for a in p.actions]
    assert kinds.count(K8S_MARK) == 3 and kinds.count(REFUSED) == 7
    assert len(p.alerts) == 1 and p.alerts[0].startswith(
        "blast-radius guard: slurm-drain failing on 10 nodes of fleet (cap 3 drains per 1h)")
    # marks placed within the window count against the cap
    recent = {n: KubeView(n, unschedulable=True, cordoned_by_us=True, our_taint="slurm-drain",
                          annotations={MARKED_AT: rfc3339(NOW - 60), REASON_ANNOTATION: "maintenance"},
                          our_condition="False")
              for n in ("n0", "n1")}
    p = plan(slurm, {**kube, **recent}, rules, NOW)
    assert [a.kind for a in p.actions].count(K8S_MARK) == 1
    # so do the health path's own drains in the window; mirroring one of them costs nothing more
    hc = {"n0": SlurmView("n0", "idle", frozenset({"DRAIN"}), "slurmguard: fs-mount: /shared", NOW - 60),
          "n1": SlurmView("n1", "idle", frozenset({"DRAIN"}), "slurmguard: fs-mount: /shared", NOW - 60)}
    p = plan({**slurm, **hc}, kube, rules, NOW)
    marked = sorted(a.node for a in p.actions if a.kind == K8S_MARK)
    assert marked == ["n0", "n1", "n2"]
    # percent cap per partition: 10% of a 10-node partition is 1
    part = {n: SlurmView(n, s.state, s.flags, s.reason, partitions=("gpu",)) for n, s in slurm.items()}
    p = plan(part, kube, Rules(blast_max_nodes=100, blast_max_percent=10, min_hold=0), NOW)
    assert [a.kind for a in p.actions].count(K8S_MARK) == 1
    assert "of partition:gpu (cap 1 drains per 1h)" in p.alerts[0]
    # NotReady on many Nodes at once (an API-server partition?) is one cause: k8s-NotReady
    sick = {n: KubeView(n, ready="False", ready_since=NOW - 9999) for n in slurm}
    p = plan({n: SlurmView(n) for n in slurm}, sick, rules, NOW)
    assert [a.kind for a in p.actions].count(SLURM_DRAIN) == 3
    assert "k8s-NotReady failing on 10 nodes of fleet" in p.alerts[0]


def test_name_mapping_modes() -> None:
    a = KubeView("gpu1.example.org", labels={"slurm": "gpu001"})
    b = KubeView("gpu2.example.org")
    mapped, unmapped = map_kube_names([a, b], NameMapping("label", label="slurm"))
    assert list(mapped) == ["gpu001"] and unmapped == ["gpu2.example.org"]
    mapped, _ = map_kube_names([a, b], NameMapping("pattern", pattern=r"(?P<name>[^.]+)\..*"))
    assert sorted(mapped) == ["gpu1", "gpu2"]
    c = KubeView("gpu1.other.org")
    mapped, unmapped = map_kube_names([a, c, b], NameMapping("pattern", pattern=r"([^.]+)\..*"))
    assert list(mapped) == ["gpu2"] and sorted(unmapped) == ["gpu1.example.org", "gpu1.other.org"]


def test_kube_view_from_raw_node() -> None:
    raw = {"metadata": {"name": "n1", "resourceVersion": "12",
                        "annotations": {CORDONED_BY: "slurmguard", MARKED_AT: "2026-12-02T10:00:00Z"}},
           "spec": {"unschedulable": True, "taints": [{"key": TAINT_KEY, "value": "gpu-xid", "effect": "NoSchedule"},
                                                     {"key": "other", "effect": "NoExecute"}]},
           "status": {"conditions": [{"type": "Ready", "status": "False",
                                      "lastTransitionTime": "2026-12-02T10:00:00Z"}]}}
    v = kube_view(raw)
    assert (v.unschedulable, v.cordoned_by_us, v.our_taint, v.ready) == (True, True, "gpu-xid", "False")
    assert v.ready_since == v.marked_at and v.resource_version == "12"
    assert kube_view({"metadata": {"name": "x"}}).ready == ""  # no status yet: not "NotReady"


# -- properties ----------------------------------------------------------------------------------

reasons = st.sampled_from(["", "maintenance", "slurmguard: gpu-xid: Xid 79", "slurmguard: k8s: NotReady",
                           "slurmguard: k8s: cordoned", "Not responding"])
slurm_views = st.builds(
    SlurmView, name=st.just("n1"), state=st.sampled_from(["idle", "allocated", "mixed", "down", "fail"]),
    flags=st.frozensets(st.sampled_from(["DRAIN", "NOT_RESPONDING", "FAIL", "COMPLETING"])),
    reason=reasons, reason_time=st.one_of(st.none(), st.floats(NOW - 10000, NOW)))


@st.composite
def kube_views(draw: st.DrawFn) -> KubeView:
    unsched = draw(st.booleans())
    ours = draw(st.booleans())
    ann = {}
    if ours:
        ann[CORDONED_BY] = "slurmguard"
    if draw(st.booleans()):
        ann[MARKED_AT] = rfc3339(draw(st.floats(NOW - 10000, NOW)))
    ready = draw(st.sampled_from(["True", "False", "Unknown", ""]))
    return KubeView("n1", unschedulable=unsched, cordoned_by_us=unsched and ours,
                    our_taint=draw(st.one_of(st.none(), st.sampled_from(["gpu-xid", "slurm-drain"]))),
                    ready=ready, ready_since=draw(st.one_of(st.none(), st.floats(NOW - 10000, NOW))),
                    conditions={"Ready": ready, "KernelDeadlock": draw(st.sampled_from(["True", "False"]))},
                    annotations=ann, our_condition=draw(st.sampled_from(["", "True", "False"])))


rules_st = st.builds(Rules, not_ready_grace=st.floats(0, 1000), min_hold=st.floats(0, 1000),
                     blast_max_nodes=st.integers(1, 5), blast_max_percent=st.floats(0, 100),
                     blast_window=st.floats(1, 5000))


@settings(max_examples=400, deadline=None)
@given(slurm_views, kube_views(), rules_st)
def test_never_undoes_a_mark_that_is_not_ours(s: SlurmView, k: KubeView, rules: Rules) -> None:
    acts = plan_node(s, k, rules, NOW)
    kinds = {a.kind for a in acts}
    assert SLURM_UNDRAIN not in kinds or (s.reason.startswith("slurmguard: k8s:") and s.drained)
    assert K8S_UNMARK not in kinds or k.marked or k.our_condition == "False"
    # never claims someone else's cordon
    assert not [a for a in acts if a.kind in (K8S_MARK, K8S_UPDATE) and a.cordon
                and k.unschedulable]
    assert not [a for a in acts if a.kind == SLURM_DRAIN and (
        s.drained or s.down or not a.reason.startswith("slurmguard: k8s: "))]


@settings(max_examples=400, deadline=None)
@given(slurm_views, kube_views(), rules_st)
def test_no_echo(s: SlurmView, k: KubeView, rules: Rules) -> None:
    kinds = {a.kind for a in plan_node(s, k, rules, NOW)}
    # a drain we made for Kubernetes never becomes a Kubernetes mark
    assert not (s.from_k8s and kinds & {K8S_MARK, K8S_UPDATE})
    own_cordon_only = (k.cordoned_by_us and not k.cordoned_by_others and k.ready == "True"
                       and k.conditions.get("KernelDeadlock") != "True")
    assert not (own_cordon_only and SLURM_DRAIN in kinds)  # our own cordon never drains Slurm


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from([f"n{i}" for i in range(8)]), slurm_views, max_size=8),
       st.dictionaries(st.sampled_from([f"n{i}" for i in range(8)]), kube_views(), max_size=8),
       rules_st, st.booleans(), st.booleans())
def test_acts_only_on_views_read_successfully(slurm: dict, kube: dict, rules: Rules,
                                              slurm_ok: bool, kube_ok: bool) -> None:
    slurm = {n: SlurmView(n, s.state, s.flags, s.reason, s.reason_time) for n, s in slurm.items()}
    kube = {n: KubeView(n, k.unschedulable, k.cordoned_by_us, k.our_taint, k.ready, k.ready_since,
                        k.conditions, {}, k.annotations, k.our_condition) for n, k in kube.items()}
    p = plan(slurm if slurm_ok else None, kube if kube_ok else None, rules, NOW)
    if not (slurm_ok and kube_ok):  # a failed lookup is never read as a state
        assert p.actions == [] and p.failed
        return
    for a in p.actions:
        assert a.node in slurm and a.node in kube
    marked = {a.node for a in p.actions if a.kind in (K8S_MARK, SLURM_DRAIN)}
    # nodes that carried no slurmguard mark before: never more than the guard's fleet cap per
    # cause (the guard caps each cause, not all together: a Kubernetes condition mirrored to
    # Slurm and a Slurm drain mirrored to Kubernetes are two causes; docs/policy.md)
    from slurmguard.reconcile.plan import _cause

    prior = {n for n in marked if kube[n].marked or slurm[n].reason.startswith("slurmguard:")}
    new = Counter(_cause(a) for a in p.actions
                  if a.kind in (K8S_MARK, SLURM_DRAIN) and a.node not in prior)
    assert all(v <= rules.blast_max_nodes for v in new.values()), new


@settings(max_examples=300, deadline=None)
@given(slurm_views, kube_views())
def test_a_failed_or_missing_lookup_is_never_read_as_drained(s: SlurmView, k: KubeView) -> None:
    # Kubernetes without a Ready condition (status not read yet) never drains Slurm
    k2 = KubeView("n1", ready="", conditions={}, annotations=k.annotations)
    assert SLURM_DRAIN not in {a.kind for a in plan_node(SlurmView("n1"), k2, R, NOW)}
    # a Slurm node without any DRAIN/DOWN/FAIL never gets a new Kubernetes mark
    if not s.bad:
        assert K8S_MARK not in {a.kind for a in plan_node(s, k, R, NOW)}


def test_reconcile_modules_do_not_import_kubernetes() -> None:
    import subprocess
    import sys

    from support.helpers import sg_env

    code = ("import sys, slurmguard.reconcile.plan, slurmguard.reconcile.apply, "
            "slurmguard.reconcile.watch, slurmguard.cli.reconcile; "
            "bad = [m for m in ('kubernetes', 'urllib3', 'sqlalchemy') if m in sys.modules]; "
            "assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], env=sg_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
