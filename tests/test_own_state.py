"""The node's saved record of its own Slurm state (slurmguard/node/ownstate.py): what serve's
``/nodestate`` answers and what the node keeps are read back exactly, and anything else (a
torn or hostile file, an answer that is not a node) is no state, never an exception."""

from __future__ import annotations

import json
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmguard import config
from slurmguard.adapters.slurm.parse import NodeInfo
from slurmguard.node import ownstate

names = st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)
texts = st.text(max_size=40)
infos = st.builds(
    NodeInfo, names, st.sampled_from(["idle", "mixed", "allocated", "down", "unknown"]),
    st.frozensets(st.sampled_from(["DRAIN", "NOT_RESPONDING", "COMPLETING", "FAIL"])),
    texts, texts, texts, st.tuples(names), st.tuples(names), texts)
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | texts,
                           lambda kids: st.lists(kids, max_size=4)
                           | st.dictionaries(texts, kids, max_size=6), max_leaves=20)


def _cfg(tmp: Path) -> config.Config:
    p = tmp / "sg.toml"
    p.write_text(f'[hooks]\nstate_dir = "{tmp}/state"\n')
    return config.load(str(p), env={})


@given(infos)
def test_a_node_reads_back_as_it_was_sent(info: NodeInfo) -> None:
    back = ownstate.info_of(json.loads(json.dumps(ownstate.as_dict(info))))
    assert back == info and back.gres == info.gres


@given(json_values)
@settings(max_examples=300)
def test_anything_else_is_no_node(obj: object) -> None:
    got = ownstate.info_of(obj)
    assert got is None or isinstance(got, NodeInfo)


def test_the_saved_record_round_trips_and_a_bad_one_is_none(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    info = NodeInfo("n1", "idle", frozenset({"DRAIN"}), "slurmguard: fs-mount: gone",
                    partitions=("gpu",), gres="gpu:8")
    ownstate.keep(cfg, "n1", info, 1000.0, "serve")  # its directory made on the way
    assert ownstate.load(cfg, "n1") == (info, 1000.0)
    path = ownstate.state_file(cfg, "n1")
    for bad in ("", "{", "[]", '{"at": "x", "info": {}}', '{"at": true, "info": null}',
                json.dumps({"at": 5, "info": {**ownstate.as_dict(info), "name": "n2"}})):
        path.write_text(bad)
        assert ownstate.load(cfg, "n1") is None, bad
    ownstate.forget(cfg, "n1")
    ownstate.forget(cfg, "n1")  # nothing there: no error
    assert not path.exists() and ownstate.load(cfg, "n1") is None


def test_its_own_drain_and_undrain_are_kept(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    before = NodeInfo("n1", "mixed", frozenset(), partitions=("gpu",), gres="gpu:8")
    ownstate.drained(cfg, "n1", "slurmguard: gpu-xid: Xid 79", before)
    got, at = ownstate.load(cfg, "n1")
    assert got.ours and got.reason == "slurmguard: gpu-xid: Xid 79" and got.gres == "gpu:8"
    assert abs(at - time.time()) < 5
    ownstate.undrained(cfg, "n1", got)
    got, _ = ownstate.load(cfg, "n1")
    assert not got.drained and not got.reason and got.partitions == ("gpu",)
    ownstate.undrained(cfg, "n1", None)  # unknown before: forgotten, asked again next run
    assert ownstate.load(cfg, "n1") is None
