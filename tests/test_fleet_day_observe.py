"""The shadow arm's judge (tests/support/fleet_day_observe.py), pure: whether NHC saw a fault
from its runs, and the report's lists against the truth. The arm itself:
tests/scale/test_fleet_day_shadow_small.py."""

from __future__ import annotations

from support.fleet_day_observe import Look, compare, nhc_saw

T = 1_800_000_000.0


def test_nhc_saw_a_fault_when_a_run_meanwhile_failed_on_its_check() -> None:
    looks = [Look("nhc", "n1", T + 1, T + 2, 0), Look("nhc", "n1", T + 5, T + 6, 1, "check_hw_ib"),
             Look("slurmguard", "n1", T + 6, T + 7, 0)]
    assert nhc_saw(looks, T + 4, None, "check_hw_ib")
    assert not nhc_saw(looks, T + 4, None, "check_fs_mount")  # failed on another check
    assert not nhc_saw(looks, T + 4, None, None)  # NHC has no check for the kind
    assert not nhc_saw(looks, T + 2.5, T + 4.5, "check_hw_ib")  # no run while it was on
    assert nhc_saw(looks, T + 5.5, T + 9, "check_hw_ib")  # a run across its start that failed


def _row(node: str, cause: str, **kw: object) -> dict[str, object]:
    return {"node": node, "cause": cause, "at": T, **kw}


def test_the_lists_against_the_truth() -> None:
    truth = [{"node": "n7", "cause": "gpu-ecc", "nhc": False, "slurmguard": True},
             {"node": "n2", "cause": "ib-link", "nhc": True, "slurmguard": True},
             {"node": "n2", "cause": "fs-mount", "nhc": True, "slurmguard": True},
             {"node": "n3", "cause": "fs-mount", "nhc": True, "slurmguard": False}]
    rep = {"both": [_row("n2", "ib-link"), _row("n2", "fs-mount")],
           "only_slurmguard": [_row("n7", "gpu-ecc"), _row("n2", "flapping")],
           "only_incumbent": [{"node": "n3", "at": T, "check": "fs-mount"}],
           "would_have_been_false": []}
    got = compare(rep, truth)
    assert got["diff"] == {} and got["extra"] == []
    assert got["expected"]["only_incumbent"] == [("n3", "fs-mount")]
    assert got["mapped"] == [["only_slurmguard", "n2", "flapping", "fs-mount"]]
    # The ECC fault listed twice (one fault split into two episodes), a row of a healthy node.
    rep["only_slurmguard"] += [_row("n7", "gpu-ecc"), _row("n9", "gpu-ecc")]
    got = compare(rep, truth)
    assert got["diff"]["only_slurmguard"] == {
        "report": [("n7", "gpu-ecc"), ("n7", "gpu-ecc"), ("n9", "gpu-ecc")],
        "truth": [("n7", "gpu-ecc")]}
    assert got["extra"] == [("n9", "gpu-ecc")]
    # NHC's drain of n7 for the hang, which the report left to NHC alone.
    truth.append({"node": "n7", "cause": "fs-mount", "nhc": True, "slurmguard": True})
    rep["only_incumbent"].append({"node": "n7", "at": T, "check": "fs-mount"})
    got = compare(rep, truth)
    assert got["diff"]["only_incumbent"] == {"report": [("n3", "fs-mount"), ("n7", "fs-mount")],
                                             "truth": [("n3", "fs-mount")]}


def test_a_false_row_on_a_fault_slurmguard_alone_saw_counts_with_only_slurmguard() -> None:
    """With Slurm accounting the report puts a fault after which every job completed (the
    hang gone before the next job, thermal) in would-have-been-false: the truth has no such
    split, so it counts with only-slurmguard; a false row on a node without it stays false."""
    truth = [{"node": "n7", "cause": "gpu-ecc", "nhc": False, "slurmguard": True},
             {"node": "n15", "cause": "gpu-thermal", "nhc": False, "slurmguard": True}]
    rep = {"both": [], "only_slurmguard": [_row("n7", "gpu-ecc")], "only_incumbent": [],
           "would_have_been_false": [_row("n15", "gpu-thermal")]}
    got = compare(rep, truth)
    assert got["diff"] == {} and got["extra"] == [] and got["false"] == []
    assert got["false_on_fault"] == [("n15", "gpu-thermal")]
    rep["would_have_been_false"].append(_row("n9", "gpu-thermal"))  # a healthy node
    got = compare(rep, truth)
    assert got["diff"] == {} and got["false"] == [("n9", "gpu-thermal")]
    rep["would_have_been_false"] = []  # the thermal fault in no list
    assert compare(rep, truth)["diff"]["only_slurmguard"] == {
        "report": [("n7", "gpu-ecc")], "truth": [("n15", "gpu-thermal"), ("n7", "gpu-ecc")]}
