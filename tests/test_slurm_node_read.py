"""One node's state from ``sinfo -h -N -n NAME -O`` (formatted.py): the parser on hostile
text, and on a real cluster the same answer as ``scontrol show node`` for an idle, a drained
and a DOWN node at one RPC that slurmctld answers with that node alone
(REQUEST_NODE_INFO_SINGLE, where ``scontrol show node NAME`` packs the whole table).

The hooks' fallback reads (node/fallback.py): the drained nodes alone (``sinfo -t drain``,
the same parser over many nodes) and the partition table (``scontrol show partition -o``);
on the real cluster the drained nodes are those ``scontrol show node`` says are drained,
field for field, a DOWN+DRAIN node included."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_slurm_rpc_load import rpcs

from slurmguard.adapters.slurm.formatted import (
    SINFO_NODE_FIELDS,
    parse_sinfo_node,
    parse_sinfo_nodes,
)
from slurmguard.adapters.slurm.parse import parse_show_partition_oneliner
from slurmguard.errors import ParseError

names = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,20}", fullmatch=True)
# Free text as admins write reasons: spaces, colons, the delimiter, brackets; no newline.
reasons = st.text(st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="\n\r"),
                  max_size=80).filter(lambda r: r.strip() and r.strip().lower() not in
                                      ("none", "(null)", "n/a", "unknown"))
BASES = ["idle", "allocated", "mixed", "down", "IDLE", "DOWN"]
FLAGS = ["drain", "not_responding", "reboot_requested", "completing", "fail", "maintenance",
         "BLOCKED"]


def line(name: str, state: str, reason: str = "none", user: str = "Unknown",
         at: str = "Unknown", part: str = "gpu") -> str:
    return f"{name}|{state}|{user}|{at}|(null)|{part}|sgtest|sgtest|{reason}"


@given(names, st.sampled_from(BASES), st.lists(st.sampled_from(FLAGS), unique=True), reasons)
def test_reason_with_anything_and_state_with_flags(name: str, base: str, flags: list[str],
                                                   reason: str) -> None:
    state = "+".join([base, *flags])
    info = parse_sinfo_node(line(name, state, reason, "root", "2026-12-05T07:43:16"), name)
    assert info is not None and info.name == name
    assert info.state == base.lower()
    assert info.flags == {f.upper() for f in flags}
    assert info.raw["Reason"] == " ".join(reason.split())  # a '|' or ':' stays in the reason
    assert info.drained == ("drain" in flags)
    if info.reason:
        assert info.reason_user == "root" and info.reason_time == "2026-12-05T07:43:16"


@given(names, st.sampled_from(["none", "", "(null)"]))
def test_empty_reason_is_no_reason(name: str, empty: str) -> None:
    info = parse_sinfo_node(line(name, "idle", empty), name)
    assert info is not None and info.reason == "" and info.reason_user == ""
    assert not info.drained and not info.ours


def test_not_responding_suffix_and_several_partitions() -> None:
    text = "\n".join(line("n5", s, "Not responding", part=p)
                     for s, p in (("down*", "gpu"), ("down*", "debug"))) + "\n"
    info = parse_sinfo_node(text, "n5")
    assert info is not None and info.down and info.not_responding
    assert info.partitions == ("gpu", "debug") and info.reason == "Not responding"


def test_reason_with_newline_rejoined_but_faked_lines_refused() -> None:
    info = parse_sinfo_node(line("n1", "idle+drain", "slurmguard: x: first") + "\nsecond\n", "n1")
    assert info is not None and info.reason == "slurmguard: x: first second" and info.ours
    forged = line("n1", "idle+drain", "maint") + "\n" + line("n1", "idle", "none") + "\n"
    with pytest.raises(ParseError, match="partition lines disagree"):
        parse_sinfo_node(forged, "n1")


def test_no_line_is_no_such_node() -> None:
    assert parse_sinfo_node("", "n9") is None


@pytest.mark.parametrize("name, text, field", [
    ("n1", line("n1", "sleeping"), "StateComplete: not a Slurm node state: 'sleeping'"),
    ("n1", line("n1", "idle+dr ain"), "node state"),
    ("n1", "n1|idle|root", "expected 9 fields"),
    ("n1", line("n1", "idle+drain", "x", "root", "yesterday"), "TimeStamp: expected YYYY"),
    ("n1", line("n2", "idle"), "expected a line starting with 'n1|'"),
    ("n 1", line("n 1", "idle"), "NodeList: not a node name"),
])
def test_garbage_is_one_line_naming_the_field(name: str, text: str, field: str) -> None:
    with pytest.raises(ParseError) as err:
        parse_sinfo_node(text, name)
    assert field in str(err.value) and "\n" not in str(err.value)


@given(st.text(max_size=200), names)
def test_never_crashes(text: str, name: str) -> None:
    try:
        node = parse_sinfo_node(text, name)
    except ParseError as exc:
        assert "\n" not in str(exc)
    else:
        assert node is None or node.name == name


def test_many_nodes_each_once_with_its_partitions_and_reason() -> None:
    text = "\n".join([
        line("n1", "idle+drain", "slurmguard: fs-mount: /shared", "root", "2026-12-05T07:43:16"),
        line("n1", "idle+drain", "slurmguard: fs-mount: /shared", "root", "2026-12-05T07:43:16",
             part="debug"),
        line("n2", "down+drain", "admin: first line", "root", "2026-12-05T07:44:00"),
        "second line | with a bar",
        line("n10", "mixed+drain", "slurmguard: gpu-xid: Xid 79", "root", "2026-12-05T07:45:00"),
    ]) + "\n"
    got = {i.name: i for i in parse_sinfo_nodes(text)}
    assert sorted(got) == ["n1", "n10", "n2"]
    assert got["n1"].partitions == ("gpu", "debug") and got["n1"].ours
    assert got["n2"].reason == "admin: first line second line | with a bar" and got["n2"].down
    assert got["n10"].drained and got["n10"].reason_time == "2026-12-05T07:45:00"
    assert parse_sinfo_nodes("") == []
    with pytest.raises(ParseError, match="expected a line starting with a node name"):
        parse_sinfo_nodes("garbage first\n")


@given(st.text(max_size=300))
def test_many_nodes_never_crash(text: str) -> None:
    try:
        nodes = parse_sinfo_nodes(text)
    except ParseError as exc:
        assert "\n" not in str(exc)
    else:
        assert len({n.name for n in nodes}) == len(nodes)  # each node once


def test_partition_table() -> None:
    text = ("PartitionName=gpu AllowGroups=ALL Default=YES Nodes=gpu[001-128],n7 TotalNodes=129 "
            "TRES=cpu=8,mem=4000M,node=4\n"
            "PartitionName=empty AllowGroups=ALL Nodes=(null) TotalNodes=0\n")
    assert parse_show_partition_oneliner(text) == {"gpu": "gpu[001-128],n7", "empty": ""}
    assert parse_show_partition_oneliner("No partitions in the system\n") == {}
    with pytest.raises(ParseError, match="PartitionName="):
        parse_show_partition_oneliner("Nodes=n1\n")


def test_field_list_ends_in_the_free_text() -> None:
    assert SINFO_NODE_FIELDS[-1] == "Reason"  # what makes a '|' in a reason harmless


def test_one_node_read_agrees_with_scontrol_and_costs_one_node(slurm_cluster_factory) -> None:
    from support.slurmcluster import BIN

    c = slurm_cluster_factory(nodes=3)
    cli = c.cli()
    subprocess.run([BIN["scontrol"], "update", "nodename=n2", "state=drain",
                    "reason=slurmguard: gpu-xid: Xid 79 | on: GPU 3 [x@y]"],
                   env=c.env, check=True, timeout=30)
    c.kill_slurmd("n3")
    subprocess.run([BIN["scontrol"], "update", "nodename=n3", "state=down", "reason=cable pulled"],
                   env=c.env, check=True, timeout=30)
    # slurmctld marks it not responding at its next ping: compare once that has settled
    c.wait_node("n3", lambda n: n.not_responding, timeout=90, what="not responding")
    seen = {}
    for name in ("n1", "n2", "n3"):
        seen[name] = cli.node(name)
        assert seen[name] == cli.node_record(name), name  # every field NodeInfo compares
        assert seen[name].raw["Reason"] == cli.node_record(name).raw.get("Reason", "")
    assert seen["n1"].state == "idle" and not seen["n1"].flags and not seen["n1"].reason
    assert seen["n2"].drained and seen["n2"].ours
    assert seen["n2"].reason == "slurmguard: gpu-xid: Xid 79 | on: GPU 3 [x@y]"
    assert seen["n3"].down and seen["n3"].reason == "cable pulled" and not seen["n3"].ours
    # The fallback's reads: the drained nodes alone, as the whole table has them (n3 DOWN
    # and drained too now), and the partition table.
    subprocess.run([BIN["scontrol"], "update", "nodename=n3", "state=drain",
                    "reason=slurmguard: ib-link: down"], env=c.env, check=True, timeout=30)
    drained = {i.name: i for i in cli.nodes() if i.drained}
    assert sorted(drained) == ["n2", "n3"] and drained["n3"].down
    assert {i.name: i for i in cli.drained_nodes()} == drained
    assert cli.partitions() == {"gpu": "n[1-3]"}
    c.run("sdiag", "--reset")
    for _ in range(3):
        cli.node("n2")
    counts = {t: n for t, n in rpcs(c).items() if t != "REQUEST_STATS_INFO"}
    print(f"\nRPCs of 3 one-node reads by SlurmCLI.node: {counts}")
    assert counts.get("REQUEST_NODE_INFO_SINGLE") == 3, counts
    assert "REQUEST_NODE_INFO" not in counts, counts
