"""slurmguard.frozen: the hook path's record types (NodeInfo, JobInfo, AcctRecord, Withheld)
behave as the ``@dataclass(frozen=True)`` classes they replaced: ``==`` and hash leave out
``raw``/``extra``, the repr leaves out ``raw``, fields cannot be set, copies and pickles
are equal, ``replace`` is ``dataclasses.replace``."""

from __future__ import annotations

import copy
import pickle
from dataclasses import FrozenInstanceError as DataclassFrozen
from dataclasses import dataclass, field, replace

import pytest

from slurmguard.adapters.slurm.parse import AcctRecord, JobInfo, NodeInfo
from slurmguard.frozen import FrozenInstanceError
from slurmguard.observe import Withheld


@dataclass(frozen=True)
class _DataclassNode:  # NodeInfo as it was: the reference
    name: str
    state: str
    flags: frozenset[str] = frozenset()
    reason: str = ""
    reason_user: str = ""
    reason_time: str = ""
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    gres: str = ""
    raw: dict = field(default_factory=dict, compare=False, repr=False)


ARGS = [("n1", "idle"), ("n1", "idle", frozenset({"DRAIN"}), "slurmguard: gpu-xid: Xid 79"),
        ("gpu001", "mixed", frozenset(), "", "", "", ("gpu", "all"), ("h100",), "gpu:8")]


@pytest.mark.parametrize("args", ARGS)
def test_node_info_is_what_the_dataclass_was(args):
    ours, ref = NodeInfo(*args, raw={"k": 1}), _DataclassNode(*args, raw={"k": 1})
    assert repr(ours) == repr(ref).replace("_DataclassNode", "NodeInfo")
    other = NodeInfo(*args, raw={"k": 2})
    assert ours == other and hash(ours) == hash(other) and len({ours, other}) == 1
    assert ours != NodeInfo("n9", "down") and ours != ref and ours != tuple(args)
    assert copy.copy(ours) == ours and copy.deepcopy(ours).raw == {"k": 1}
    assert pickle.loads(pickle.dumps(ours)) == ours
    moved = ours.replace(partitions=("x",))
    assert moved.partitions == ("x",) and moved.raw == ours.raw
    assert replace(ref, partitions=("x",)).partitions == moved.partitions
    assert NodeInfo("a", "idle").raw == {} and NodeInfo("a", "idle").raw is not NodeInfo("a", "idle").raw


def test_fields_cannot_be_set_or_deleted_as_in_a_frozen_dataclass():
    n = NodeInfo("n1", "idle")
    for act in (lambda: setattr(n, "state", "down"), lambda: delattr(n, "state"),
                lambda: setattr(n, "new", 1)):
        with pytest.raises(FrozenInstanceError):
            act()
    assert issubclass(FrozenInstanceError, AttributeError)
    assert issubclass(DataclassFrozen, AttributeError)  # what callers could catch before
    with pytest.raises(TypeError):
        n.replace(nope=1)


def test_the_other_records_keep_their_equality_and_repr():
    j = JobInfo("5", "PENDING", "JobHeldUser", priority=0, raw={"a": 1})
    assert j == JobInfo("5", "PENDING", "JobHeldUser", priority=0) and j.held
    assert repr(j).startswith("JobInfo(job_id='5', state='PENDING'") and "raw" not in repr(j)
    a = AcctRecord("7", "COMPLETED", 1.0, 2.0, gpus=8)
    assert a == AcctRecord("7", "COMPLETED", 1.0, 2.0, gpus=8) != AcctRecord("7", "FAILED", 1.0, 2.0)
    assert repr(a).endswith("cluster='', workdir='')")
    w = Withheld("drain", ("n1",), "", ("/usr/bin/scontrol", "update"), "r", {"x": 1})
    assert w == Withheld("drain", ("n1",), "", ("/usr/bin/scontrol", "update"), "r")
    assert "extra={'x': 1}" in repr(w) and Withheld("a", (), "", ()).extra == {}
