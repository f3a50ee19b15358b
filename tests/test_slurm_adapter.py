"""The Slurm adapter's pure side: parsers on real captured output, garbage, hostile input.

The captured files (tests/data/slurm/) are real output of Slurm 22.05.8 (capture.py, the
native cluster) and 24.11.5 (capture_docker.py, the Debian 13 containers).
Tests against a running cluster are in test_slurm_cluster.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmguard.adapters.slurm.commands import (
    REASON_MAX,
    SlurmCLI,
    format_reason,
    job_info_from_json,
    job_info_from_show,
    node_info_from_show,
    nodes_from_text,
    parse_show_job_oneliner,
    parse_show_node_oneliner,
    parse_sinfo_json,
    parse_squeue_json,
    validate_node_name,
)
from slurmguard.adapters.slurm.parse import (
    NodeInfo,
    parse_node_state,
    parse_scontrol_nodes_json,
    parse_version,
)
from slurmguard.errors import InputError, ParseError

DATA = Path(__file__).parent / "data" / "slurm"
# Real output of both ends of the version matrix: 22.05.8 from the native test cluster
# (capture.py), 24.11.5 and 26.05.5 from the Debian 13 and forky containers
# (capture_docker.py), the same moments.
VERSIONS = ["22.05.8", "24.11.5", "26.05.5"]
V = "22.05.8"
OUR_XID = "slurmguard: gpu-xid: Xid=79 on GPU 3 (pci=0000:3b:00.0) fell off the bus"
OUR_ECC = "slurmguard: gpu-ecc: 3 uncorrectable ECC errors on GPU 0"
# n6: drained by its Prolog, which then failed (22.05: a shell prolog; 24.11: slurmguard's
# own prolog finding an injected Xid on GPU 2).
N6_REASON = {"22.05.8": "slurmguard: test: prolog failed",
             "24.11.5": "slurmguard: gpu-xid: GPU 2 (PCI 0000:3a:00) Xid 79: GPU has fallen off the bus",
             "26.05.5": "slurmguard: gpu-xid: GPU 2 (PCI 0000:3a:00) Xid 79: GPU has fallen off the bus"}
# Node features: the native cluster sets Feature=sgtest, the containers none.
FEATURES = {"22.05.8": ("sgtest",), "24.11.5": (), "26.05.5": ()}

# moment -> node -> (state, flags, reason or None for "none"); "N6" is N6_REASON.
EXPECTED = {
    "alloc-mixed": {
        "n1": ("allocated", set(), None), "n2": ("mixed", set(), None),
        "n3": ("idle", {"DRAIN"}, OUR_XID), "n4": ("idle", {"DRAIN"}, "maintenance"),
        "n5": ("idle", set(), None), "n6": ("idle", set(), None),
    },
    "states": {
        "n1": ("idle", set(), None), "n2": ("mixed", {"DRAIN"}, OUR_ECC),
        "n3": ("idle", {"DRAIN"}, OUR_XID), "n4": ("idle", {"DRAIN"}, "maintenance"),
        "n5": ("down", {"NOT_RESPONDING"}, "Not responding"),
        "n6": ("idle", {"DRAIN"}, "N6"),
    },
    "idle": {f"n{i}": ("idle", set(), None) for i in range(1, 7)},
    # 24.11 only: n3's drain (ours) cleared with UNDRAIN; Slurm kept the old reason text
    # on the idle node (raw), the parser drops it.
    "undrained": {
        "n1": ("idle", set(), None), "n2": ("mixed", {"DRAIN"}, OUR_ECC),
        "n3": ("idle", set(), None), "n4": ("idle", {"DRAIN"}, "maintenance"),
        "n5": ("down", {"NOT_RESPONDING"}, "Not responding"),
        "n6": ("idle", {"DRAIN"}, "N6"),
    },
}
MOMENTS = [(m, v) for m in EXPECTED for v in VERSIONS
           if (DATA / f"show-node-{m}-{v}.txt").exists() or m != "undrained"]


def _nodes(name: str) -> dict[str, object]:
    text = (DATA / name).read_text()
    return {n.name: n for n in map(node_info_from_show, parse_show_node_oneliner(text))}


def _expect(moment: str, version: str) -> dict[str, tuple[str, frozenset[str], str]]:
    out = {}
    for name, (state, flags, reason) in EXPECTED[moment].items():
        out[name] = (state, frozenset(flags),
                     N6_REASON[version] if reason == "N6" else reason or "")
    return out


@pytest.mark.parametrize("moment,version", MOMENTS)
def test_show_node_table(version: str, moment: str) -> None:
    """`scontrol show node -o`, every captured moment of both versions, node by node."""
    nodes = _nodes(f"show-node-{moment}-{version}.txt")
    want = _expect(moment, version)
    assert {n: (i.state, i.flags, i.reason) for n, i in nodes.items()} == want
    for n in nodes.values():
        assert n.partitions == ("gpu",) and n.features == FEATURES[version]
        assert n.ours == (n.reason.startswith("slurmguard:") and n.drained)
        if n.reason:
            assert n.reason_user in ("root", "slurm")
            assert len(n.reason_time) == 19 and n.reason_time[10] == "T"
        # A value with spaces stays whole; a value with '=' signs stays whole.
        assert n.raw["OS"].startswith("Linux ") and " " in n.raw["OS"]
        assert n.raw["CfgTRES"] == "cpu=2,mem=1000M,billing=2"


@pytest.mark.parametrize("version", VERSIONS)
def test_show_node_derived_properties(version: str) -> None:
    nodes = _nodes(f"show-node-states-{version}.txt")
    assert nodes["n2"].draining and nodes["n2"].ours and not nodes["n2"].down
    assert nodes["n3"].drained and not nodes["n3"].draining and nodes["n3"].ours
    assert nodes["n4"].drained and not nodes["n4"].ours
    n5 = nodes["n5"]
    assert n5.down and n5.not_responding and not n5.ours and not n5.drained
    assert nodes["n6"].drained and nodes["n6"].ours
    assert nodes["n1"].state == "idle" and not nodes["n1"].flags


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("stem", ["idle", "states"])
def test_sinfo_json_agrees_with_scontrol(version: str, stem: str) -> None:
    """sinfo --json of both shapes: 22.05 node objects, 24.11 node groups.

    On 24.11 a group of several nodes carries one reason for all of them (here n3 ours,
    n4 an admin's, n6 another of ours): the parser gives such nodes no reason at all.
    """
    by_json = {n.name: n for n in parse_sinfo_json((DATA / f"sinfo-{stem}-{version}.json").read_text())}
    by_text = _nodes(f"show-node-{stem}-{version}.txt")
    assert by_json.keys() == by_text.keys()
    grouped = version != "22.05.8"
    for name, n in by_text.items():
        j = by_json[name]
        assert (j.state, j.flags, j.partitions, j.features) == (
            n.state, n.flags, n.partitions, n.features), name
        alone = not grouped or len(j.raw["nodes"]["nodes"]) == 1
        if alone:
            assert (j.reason, j.reason_user, j.reason_time) == (
                n.reason, n.reason_user, n.reason_time), name
        else:
            assert (j.reason, j.reason_user, j.reason_time, j.ours) == ("", "", "", False), name
    if grouped and stem == "states":
        # The grouping that makes per-node reasons impossible: really seen on 24.11.5.
        shared = [g["nodes"]["nodes"] for g in json.loads(
            (DATA / f"sinfo-{stem}-{version}.json").read_text())["sinfo"]]
        assert ["n3", "n4", "n6"] in shared


def test_undrained_node_keeps_reason_text_on_2411() -> None:
    """What 24.11.5 really printed after UNDRAIN of our drain: the reason is still there."""
    (raw,) = [f for f in parse_show_node_oneliner(
        (DATA / "show-node-undrained-24.11.5.txt").read_text()) if f["NodeName"] == "n3"]
    assert raw["State"] == "IDLE" and raw["Reason"] == OUR_XID
    n3 = node_info_from_show(raw)
    assert (n3.reason, n3.reason_user, n3.reason_time, n3.ours, n3.drained) == (
        "", "", "", False, False)


def test_undrain_clears_the_reason_on_2605() -> None:
    """26.05.5 clears the reason with UNDRAIN (24.11.5 keeps it): the same NodeInfo either
    way, so nothing may depend on a reason kept after an UNDRAIN."""
    def n3(version: str) -> NodeInfo:
        (raw,) = [f for f in parse_show_node_oneliner(
            (DATA / f"show-node-undrained-{version}.txt").read_text()) if f["NodeName"] == "n3"]
        return node_info_from_show(raw)

    new, old = n3("26.05.5"), n3("24.11.5")
    assert "Reason" not in new.raw and old.raw["Reason"] == OUR_XID
    assert (new.state, new.flags, new.reason, new.ours) == (old.state, old.flags, old.reason,
                                                            old.ours) == ("idle", frozenset(), "",
                                                                          False)


@pytest.mark.parametrize("version,parser", [("22.05.8", "v0.0.38"), ("24.11.5", "v0.0.42"),
                                            ("26.05.5", "v0.0.45")])
def test_sinfo_reason_user_where_each_data_parser_puts_it(version: str, parser: str) -> None:
    """The user who set a reason: the node object (v0.0.38), `reason.user` of a group
    (v0.0.42), a group's top-level `reason_set_by_user` (v0.0.45): read by presence."""
    doc = json.loads((DATA / f"sinfo-states-{version}.json").read_text())
    assert parser in json.dumps(doc["meta"])
    n2 = {n.name: n for n in parse_sinfo_json(json.dumps(doc))}["n2"]
    assert (n2.reason, n2.reason_user) == (OUR_ECC, "root")


@pytest.mark.parametrize("line,reason", [
    # Seen on 24.11.5: an idle node with a leftover reason of ours stops answering.
    ("NodeName=n2 State=DOWN+NOT_RESPONDING Reason=slurmguard: t: q : Not responding "
     "[slurm@2026-12-03T06:44:58]", "Not responding"),
    ("NodeName=n2 State=IDLE Reason=slurmguard: t: q [root@2026-12-03T06:43:47]", ""),
    # A DOWN node's own reason (someone ran state=down reason=...) is why it is down: kept
    # (tests/test_cli_admin_slurm.py::test_down_node_is_left_alone on the real cluster).
    ("NodeName=n2 State=DOWN Reason=slurmguard: t: q [root@2026-12-03T06:43:47]",
     "slurmguard: t: q"),
    # Still in effect: drained (also when DOWN as well), or someone else's reason.
    ("NodeName=n2 State=DOWN+DRAIN Reason=slurmguard: t: q [root@2026-12-03T06:43:47]",
     "slurmguard: t: q"),
    ("NodeName=n2 State=IDLE Reason=maintenance [root@2026-12-03T06:43:47]", "maintenance"),
])
def test_leftover_reasons_of_ours(line: str, reason: str) -> None:
    (n,) = [node_info_from_show(f) for f in parse_show_node_oneliner(line)]
    assert n.reason == reason
    assert n.ours == ("DRAIN" in n.flags)


@pytest.mark.parametrize("version", ["24.11.5", "26.05.5"])
@pytest.mark.parametrize("stem", ["idle", "states", "undrained"])
def test_scontrol_json_agrees_with_scontrol_text(stem: str, version: str) -> None:
    """scontrol --json show nodes (23.02+): every node with its own reason."""
    by_json = {n.name: n for n in parse_scontrol_nodes_json(
        (DATA / f"scontrol-nodes-{stem}-{version}.json").read_text())}
    by_text = _nodes(f"show-node-{stem}-{version}.txt")
    assert by_json.keys() == by_text.keys()
    for name, n in by_text.items():
        j = by_json[name]
        assert (j.state, j.flags, j.reason, j.reason_user, j.reason_time, j.partitions,
                j.features, j.ours) == (n.state, n.flags, n.reason, n.reason_user,
                                        n.reason_time, n.partitions, n.features, n.ours), name


def test_sinfo_json_top_level_shapes() -> None:
    """The 23.02-25.05 shapes around what was captured, and what is refused."""
    group = {"node": {"state": ["IDLE", "DRAIN"]}, "nodes": {"nodes": ["a1"]},
             "partition": {"name": "p"}, "features": {"active": "x,y", "total": "x,y"},
             "reason": {"description": "slurmguard: t: x", "user": "root",
                        "time": {"set": True, "infinite": False, "number": 1700000000}}}
    (a1,) = parse_sinfo_json(json.dumps({"sinfo": [group]}))
    assert (a1.state, a1.flags, a1.reason, a1.features, a1.partitions) == (
        "idle", frozenset({"DRAIN"}), "slurmguard: t: x", ("x", "y"), ("p",))
    # One node in two partitions: two groups, one node, both partitions.
    other = {**group, "partition": {"name": "q"}}
    (a1,) = parse_sinfo_json(json.dumps({"sinfo": [group, other]}))
    assert a1.partitions == ("p", "q")
    # 23.02: node objects under "nodes", state already a list, numbers wrapped.
    (b1,) = parse_sinfo_json(json.dumps({"nodes": [{
        "name": "b1", "state": ["MIXED", "DRAIN"], "reason": "slurmguard: t: y",
        "reason_set_by_user": "root", "reason_changed_at": {"set": True, "number": 1700000000},
        "partitions": ["p"], "active_features": ["f"]}]}))
    assert (b1.state, b1.flags, b1.draining, b1.features) == (
        "mixed", frozenset({"DRAIN"}), True, ("f",))
    with pytest.raises(ParseError, match=r"^sinfo --json: expected a 'nodes' or a 'sinfo' list"):
        parse_sinfo_json('{"meta": {}}')
    with pytest.raises(ParseError, match=r"^sinfo --json: sinfo: expected a list"):
        parse_sinfo_json('{"sinfo": {}}')
    with pytest.raises(ParseError, match=r"^sinfo --json: sinfo\[0\]: nodes: expected an object"):
        parse_sinfo_json('{"sinfo": [{"node": {"state": ["IDLE"]}}]}')
    with pytest.raises(ParseError, match=r"nodes.nodes: not a node name: 'n1;id'"):
        parse_sinfo_json(json.dumps({"sinfo": [{**group, "nodes": {"nodes": ["n1;id"]}}]}))
    with pytest.raises(ParseError, match=r"^scontrol --json show nodes: nodes: expected a list"):
        parse_scontrol_nodes_json('{"sinfo": []}')


@pytest.mark.parametrize("text,version", [
    ("slurm 24.11.5\n", (24, 11, 5)), ("slurm-wlm 22.05.8\n", (22, 5, 8)),
    ("slurm 25.05.0-0rc1", (25, 5, 0)), ("slurm 23.02", (23, 2, 0)),
])
def test_parse_version(text: str, version: tuple[int, int, int]) -> None:
    assert parse_version(text) == version


@pytest.mark.parametrize("bad", ["", "slurm", "Segmentation fault", "slurm x.y.z", "slurm 24.11.5 extra"])
def test_parse_version_garbage(bad: str) -> None:
    with pytest.raises(ParseError, match=r"^scontrol -V: not a Slurm version"):
        parse_version(bad)


@pytest.mark.parametrize("version", VERSIONS)
def test_show_job_variants(version: str) -> None:
    running = job_info_from_show(parse_show_job_oneliner(
        (DATA / f"show-job-running-{version}.txt").read_text())[0])
    assert (running.state, running.nodes, running.batch_host, running.requeue) == (
        "RUNNING", "n1", "n1", True)
    assert running.restart_count == 0 and not running.held and running.eligible_time

    pending = job_info_from_show(parse_show_job_oneliner(
        (DATA / f"show-job-pending-requeued-{version}.txt").read_text())[0])
    assert (pending.state, pending.restart_count, pending.held, pending.nodes) == (
        "PENDING", 1, False, "")
    submit = job_info_from_show({**pending.raw, "EligibleTime": pending.raw["SubmitTime"]})
    # The ~121 s a requeued job waits (cred_expire=120): what the requeue watcher removes.
    assert 100 < pending.eligible_time - submit.eligible_time < 200

    held = job_info_from_show(parse_show_job_oneliner(
        (DATA / f"show-job-requeued-held-{version}.txt").read_text())[0])
    assert held.held and held.priority == 0 and held.reason == "job_requeued_in_held_state"

    every = parse_show_job_oneliner((DATA / f"show-job-all-{version}.txt").read_text())
    assert {f["JobId"] for f in every} == {"1", "2", "3"}


@pytest.mark.parametrize("version", VERSIONS)
def test_squeue_json_agrees_with_scontrol(version: str) -> None:
    jobs = {j.job_id: j for j in parse_squeue_json((DATA / f"squeue-{version}.json").read_text())}
    text = {f["JobId"]: job_info_from_show(f)
            for f in parse_show_job_oneliner((DATA / f"show-job-all-{version}.txt").read_text())}
    assert jobs.keys() == text.keys()
    for jid, t in text.items():
        j = jobs[jid]
        assert (j.state, j.restart_count, j.requeue, j.held, j.nodes) == (
            t.state, t.restart_count, t.requeue, t.held, t.nodes), jid


def test_squeue_json_unset_priority_is_not_held() -> None:
    doc = json.loads((DATA / "squeue-24.11.5.json").read_text())
    doc["jobs"][1]["priority"] = {"set": False, "infinite": False, "number": 0}
    job = parse_squeue_json(json.dumps(doc))[1]
    assert job.priority is None and not job.held


def test_job_name_with_spaces_and_equals() -> None:
    line = (DATA / f"show-job-running-{V}.txt").read_text()
    line = line.replace("JobName=job-", "JobName=my job a=b UserId x=", 1)
    f = parse_show_job_oneliner(line)[0]
    assert f["JobName"].startswith("my job a=b UserId x=") and f["UserId"] == "root(0)"


@given(st.lists(st.sampled_from(sorted(DATA.glob("show-node-*.txt"))), min_size=1, max_size=6),
       st.lists(st.booleans(), min_size=6, max_size=6))
@settings(max_examples=60, deadline=None)
def test_the_memo_parses_a_series_of_reads_as_a_whole_parse_does(paths, shuffles) -> None:
    """serve's reader parses each read with the memo of the last one (only the changed
    records): over any series of captured tables, read in any record order, it gives what
    a whole parse gives, and the memo holds this read's records alone."""
    memo: dict = {}
    for path, shuffle in zip(paths, shuffles, strict=False):
        text = path.read_text()
        lines = text.splitlines(keepends=True)
        if shuffle:
            lines.reverse()
        text = "".join(lines)
        assert nodes_from_text(text, memo) == nodes_from_text(text), path.name
        assert len(memo) == len(nodes_from_text(text))
    assert nodes_from_text("No nodes in the system\n", memo) == [] and memo == {}


def test_reason_with_newline_rejoined() -> None:
    # What scontrol printed here for a reason set with an embedded newline.
    line = ("NodeName=n3 State=IDLE+DRAIN Partitions=gpu "
            'Reason=has "quotes" and [root@2026-12-02T15:34:58]\n        newline\n')
    (f,) = parse_show_node_oneliner(line)
    assert f["Reason"] == 'has "quotes" and newline' and f["ReasonUser"] == "root"


@pytest.mark.parametrize("state,base,flags", [
    ("IDLE", "idle", set()), ("IDLE+DRAIN", "idle", {"DRAIN"}),
    ("DOWN*+DRAIN", "down", {"DRAIN", "NOT_RESPONDING"}), ("MIXED~", "mixed", {"POWERED_DOWN"}),
    (["DRAIN", "IDLE"], "idle", {"DRAIN"}), ("ALLOCATED+COMPLETING", "allocated", {"COMPLETING"}),
])
def test_node_states(state: object, base: str, flags: set[str]) -> None:
    assert parse_node_state(state) == (base, frozenset(flags))


@pytest.mark.parametrize("bad", ["", "IDLE+", "IDLE DRAIN", "42", [], [1], None, {"a": 1}])
def test_bad_node_states(bad: object) -> None:
    with pytest.raises(ParseError, match="node state"):
        parse_node_state(bad)


def test_garbage_messages_name_the_field() -> None:
    with pytest.raises(ParseError, match=r"^scontrol show node: expected a record starting"):
        parse_show_node_oneliner("Segmentation fault\n")
    with pytest.raises(ParseError, match=r"no State field"):
        node_info_from_show(parse_show_node_oneliner("NodeName=n1 Arch=x86_64\n")[0])
    with pytest.raises(ParseError, match=r"Restarts: expected an integer, got 'many'"):
        job_info_from_show({"JobId": "1", "JobState": "RUNNING", "Restarts": "many"})
    with pytest.raises(ParseError, match=r"sinfo --json: not valid JSON"):
        parse_sinfo_json('{"nodes": [')
    with pytest.raises(ParseError, match=r"sinfo --json: node n1: reason: expected a string"):
        parse_sinfo_json('{"nodes": [{"name": "n1", "state": "idle", "reason": 7}]}')


# --- Hypothesis: garbage in -> ParseError (never another exception) ---------------------------

KEYS = ["NodeName", "State", "Reason", "Partitions", "ActiveFeatures", "OS", "JobId", "JobState",
        "Restarts", "EligibleTime", "Priority", "Requeue", "JobName", "UserId", "x"]
soup = st.lists(st.tuples(st.sampled_from(KEYS), st.text(max_size=30)), max_size=12).map(
    lambda kvs: " ".join(f"{k}={v}" for k, v in kvs))


def _parse_everything(text: str) -> None:
    for parse, build in ((parse_show_node_oneliner, node_info_from_show),
                         (parse_show_job_oneliner, job_info_from_show)):
        try:
            for rec in parse(text):
                assert isinstance(rec, dict)
                build(rec)
        except ParseError as exc:
            assert "\n" not in str(exc) and str(exc)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(), soup, soup.map(lambda s: "NodeName=n1 " + s),
                 soup.map(lambda s: "JobId=1 " + s)))
def test_text_parsers_never_crash(text: str) -> None:
    _parse_everything(text)


_SINFO = (DATA / f"sinfo-states-{V}.json").read_text()
_SQUEUE = (DATA / f"squeue-{V}.json").read_text()
_SINFO_2411 = (DATA / "sinfo-states-24.11.5.json").read_text()
_SQUEUE_2411 = (DATA / "squeue-24.11.5.json").read_text()
_SCONTROL_2411 = (DATA / "scontrol-nodes-states-24.11.5.json").read_text()
_DOCS = {_SINFO: ("nodes", parse_sinfo_json), _SQUEUE: ("jobs", parse_squeue_json),
         _SINFO_2411: ("sinfo", parse_sinfo_json), _SQUEUE_2411: ("jobs", parse_squeue_json),
         _SCONTROL_2411: ("nodes", parse_scontrol_nodes_json)}
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                           lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(), c, max_size=3),
                           max_leaves=8)


@settings(max_examples=300)
@given(st.integers(min_value=0, max_value=max(map(len, _DOCS)) - 2), st.sampled_from(list(_DOCS)))
def test_truncated_json_is_a_parse_error(cut: int, doc: str) -> None:
    parse = _DOCS[doc][1]
    with pytest.raises(ParseError):
        parse(doc[: min(cut, len(doc.rstrip()) - 1)])


@settings(max_examples=300)
@given(st.data())
def test_wrong_types_in_json(data: st.DataObject) -> None:
    for doc, (key, parse) in _DOCS.items():
        obj = json.loads(doc)
        item = obj[key][data.draw(st.integers(0, len(obj[key]) - 1))]
        field = data.draw(st.sampled_from(sorted(item)))
        if isinstance(item[field], dict) and item[field] and data.draw(st.booleans()):
            # one level down too: 24.11's node.state, nodes.nodes, reason.description...
            item = item[field]
            field = data.draw(st.sampled_from(sorted(item)))
        item[field] = data.draw(json_values)
        try:
            out = parse(json.dumps(obj))
            assert len(out) >= 1
        except ParseError as exc:
            assert "\n" not in str(exc)
    with pytest.raises(ParseError):
        parse_sinfo_json(json.dumps(data.draw(json_values.filter(lambda v: not isinstance(v, dict)))))
    try:
        job_info_from_json(data.draw(json_values))
    except ParseError:
        pass


reason_text = st.text(st.characters(codec="ascii", categories=["L", "N", "P", "S", "Zs"]),
                      min_size=1, max_size=60).map(lambda s: " ".join(s.split())).filter(
    lambda s: s and s.lower() not in ("none", "n/a", "unknown", "(null)"))


@settings(max_examples=300)
@given(reason_text | reason_text.map(lambda r: r + " [admin@2026-01-01T00:00:00] tail"),
       st.sampled_from(["IDLE+DRAIN", "MIXED+DRAIN", "DOWN+DRAIN+NOT_RESPONDING"]))
def test_reason_roundtrip(reason: str, state: str) -> None:
    """Whatever the reason (spaces, '=' signs, 'Key=' look-alikes), it comes back whole."""
    line = (f"NodeName=n7 Arch=x86_64 OS=Linux 6.1 #1 SMP State={state} Partitions=gpu "
            f"CfgTRES=cpu=2 Reason={reason} [slurm@2026-12-02T15:34:33]\n")
    (node,) = [node_info_from_show(f) for f in parse_show_node_oneliner(line)]
    assert (node.reason, node.reason_user, node.reason_time) == (
        reason, "slurm", "2026-12-02T15:34:33")
    assert node.raw["OS"] == "Linux 6.1 #1 SMP" and node.partitions == ("gpu",)


# --- hostile input --------------------------------------------------------------------------

HOSTILE = ["n1;rm -rf /", "-x", "--help", "n 1", "n1\nn2", "", "x" * 300, "n1$(id)", "n[1-2]",
           "../n1", "n1\x00", "ñ1", None, 7, "n1 ", "\tn1"]


@pytest.fixture
def recording_cli(tmp_path: Path) -> tuple[SlurmCLI, Path]:
    """A SlurmCLI whose every tool is a real script that records that it ran."""
    marker = tmp_path / "ran"
    tool = tmp_path / "tool"
    tool.write_text(f'#!/bin/sh\necho "$@" >> {marker}\nexit 1\n')
    tool.chmod(0o755)
    section = {t: str(tool) for t in ("scontrol", "sinfo", "squeue", "sacct", "sbatch")}
    return SlurmCLI({**section, "timeout": 5}), marker


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_node_names_refused_before_any_command(name: object, recording_cli) -> None:
    cli, marker = recording_cli
    for call in (lambda: cli.node(name), lambda: cli.drain(name, "slurmguard: t: x"),
                 lambda: cli.undrain(name), lambda: validate_node_name(name)):
        with pytest.raises(InputError, match=r"^node name: not a valid Slurm node name"):
            call()
    assert not marker.exists()


@pytest.mark.parametrize("call", [
    lambda c: c.drain("n1", "maintenance"),  # not our prefix
    lambda c: c.nodes("n1;id"), lambda c: c.job("1;id"), lambda c: c.job("-1"),
    lambda c: c.update_job(1, **{"Eligible Time": "now"}),
    lambda c: c.update_job(1, EligibleTime="now\nx"), lambda c: c.update_job(1),
    lambda c: c.requeue("1 2"), lambda c: c.release(True),
])
def test_other_hostile_input(call, recording_cli) -> None:
    cli, marker = recording_cli
    with pytest.raises(InputError):
        call(cli)
    assert not marker.exists()


def test_commands_use_configured_tools_and_timeout(tmp_path: Path) -> None:
    slow = tmp_path / "slow-scontrol"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    cli = SlurmCLI({"scontrol": str(slow), "sinfo": str(slow), "timeout": 0.5})
    from slurmguard.errors import CommandError

    for read in (cli.node, cli.node_record):  # sinfo -n and scontrol show node
        with pytest.raises(CommandError, match="timed out after 0.5s"):
            read("n1")
    assert cli.ping() is False


@pytest.mark.parametrize("text", ["Xid 79\non GPU 3", "a\x1b[31mred\x07", "tab\there", "x" * 1000])
def test_format_reason_one_line_capped(text: str) -> None:
    r = format_reason("gpu-xid", text)
    assert r.startswith("slurmguard: gpu-xid: ") and r.isprintable() and len(r) <= REASON_MAX


def test_no_heavy_imports() -> None:
    import subprocess
    import sys

    code = ("import sys, slurmguard.adapters.slurm.commands; "
            "print(sorted(m for m in ('sqlalchemy','kubernetes','paramiko','tabulate','psycopg') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert out.stdout.strip() == "[]", out.stderr


@settings(max_examples=300)
@given(st.text(max_size=140))
def test_node_name_validator_property(name: str) -> None:
    """Anything accepted is one safe token: no whitespace, shell or option characters."""
    try:
        assert validate_node_name(name) == name
    except InputError as exc:
        assert str(exc).startswith("node name: ") and "\n" not in str(exc)
        return
    assert name and not name.startswith("-") and len(name) <= 128
    assert all(ch.isascii() and (ch.isalnum() or ch in "-_.") for ch in name)


def test_empty_job_list_is_not_garbage():
    from slurmguard.adapters.slurm.parse import parse_show_job_oneliner

    assert parse_show_job_oneliner("No jobs in the system\n") == []


def test_jobs_leaves_out_ended_jobs(tmp_path: Path) -> None:
    """22.05's `squeue --json` lists a COMPLETED job until MinJobAge (seen in the e2e
    matrix); `jobs()` leaves it out, as plain squeue and 24.11 do."""
    doc = json.loads((DATA / f"squeue-{V}.json").read_text())
    doc["jobs"][1]["job_state"] = "COMPLETED"
    (tmp_path / "out.json").write_text(json.dumps(doc))
    tool = tmp_path / "squeue"
    tool.write_text(f"#!/bin/sh\ncat {tmp_path / 'out.json'}\n")
    tool.chmod(0o755)
    jobs = SlurmCLI({"squeue": str(tool), "timeout": 5}).jobs()
    assert [j.job_id for j in jobs] == ["1", "3"] and not any(j.finished for j in jobs)
    assert parse_squeue_json(json.dumps(doc))[1].finished


@pytest.mark.parametrize("version", VERSIONS)
def test_show_config_hook_keys_on_both_versions(version: str) -> None:
    """`scontrol show config` of the test-cluster image: 22.05 prints `Prolog = ...`, 24.11
    `Prolog[0] = ...` (several scripts allowed): both read as the plain key."""
    from slurmguard.adapters.slurm.conf import parse_show_config

    conf = parse_show_config((DATA / f"show-config-docker-{version}.txt").read_text())
    assert conf["prolog"] == "/usr/lib/slurmguard/prolog/slurmguard-prolog"
    assert conf["epilog"] == "/usr/lib/slurmguard/epilog/slurmguard-epilog"
    assert conf["healthcheckprogram"] == "/usr/lib/slurmguard/prolog/slurmguard-healthcheck"
    assert conf["prologepilogtimeout"] == "60"
    assert "nohold_on_prolog_fail" in conf["schedulerparameters"]
    assert conf.get("prologslurmctld", "") == ""


def test_show_config_several_indexed_scripts() -> None:
    from slurmguard.adapters.slurm.conf import parse_show_config

    conf = parse_show_config("Prolog[1]               = /b\nProlog[0]               = /a\n"
                             "Epilog[0]               = (null)\nSlurmUser = slurm(64030)\n")
    assert conf["prolog"] == "/a,/b" and conf["prolog[1]"] == "/b" and not conf.get("epilog")
