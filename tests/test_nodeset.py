"""One validating NodeSet helper (slurmguard.nodeset), and every command goes through it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.helpers import REPO, run_sg, sg_env

from slurmguard import nodeset
from slurmguard.errors import InputError
from slurmguard.gate import answer as gate
from slurmguard.job.requeue import JobMemory, plan

MALFORMED = ["n[1-", "n[3-1]", "n[a-b]", "n1,,[", "n1;id", "n[1-2]x[", "-x", "../n1", "n 1"]


@pytest.mark.parametrize("text", MALFORMED)
def test_malformed_or_hostile_set_is_one_line_naming_source_and_value(text: str) -> None:
    with pytest.raises(InputError) as exc:
        nodeset.expand(text, source="SLURM_JOB_NODELIST")
    msg = exc.value.message
    assert "\n" not in msg
    assert msg.startswith(("SLURM_JOB_NODELIST: ", "node name: ")), msg
    assert repr(text) in msg or repr(text.strip()) in msg or "node name" in msg


def test_empty_is_an_error_unless_allowed() -> None:
    for text in ("", "  "):
        with pytest.raises(InputError, match="NODESET: empty node set"):
            nodeset.expand(text)
        assert nodeset.expand(text, allow_empty=True) == []
    assert nodeset.fold([]) == ""


def test_expand_and_fold() -> None:
    assert nodeset.expand("gpu[001-003],cpu7") == ["cpu7", "gpu001", "gpu002", "gpu003"]
    assert nodeset.fold(["n3", "n1", "n2", "n7"]) == "n[1-3,7]"
    assert nodeset.contains("gpu[001-064]", "gpu017") and not nodeset.contains("gpu[001-064]", "gpu65")


_name = st.from_regex(r"[a-z][a-z0-9-]{0,6}[a-z]", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_name, st.integers(0, 999)), min_size=1, max_size=30))
def test_fold_then_expand_gives_the_names_back(items: list[tuple[str, int]]) -> None:
    names = sorted({f"{p}{i}" for p, i in items})
    assert sorted(nodeset.expand(nodeset.fold(names))) == names


@given(st.text(min_size=1, max_size=40))
def test_accepted_names_are_path_and_shell_safe(name: str) -> None:
    try:
        nodeset.validate_node_name(name)
    except InputError as exc:
        assert exc.message.startswith("node name: ")
        return
    assert not set(name) & set("/ ;$`&|<>'\"\\\n\t*?[]") and name[0] not in "-._" and ".." not in name


def test_gate_requeue_and_admin_commands_give_the_same_answer(tmp_path: Path) -> None:
    cfg_path = tmp_path / "sg.toml"
    cfg_path.write_text(f'[store]\npath = "{tmp_path}/s.db"\n')
    from slurmguard import config

    cfg = config.load(str(cfg_path))
    with pytest.raises(InputError, match=r"^SLURM_JOB_NODELIST: not a node set: 'n\[1-'"):
        gate.run_gate(cfg, {"SLURM_JOB_NODELIST": "n[1-"})

    @dataclass(frozen=True)
    class Job:
        job_id: str = "7"
        state: str = "RUNNING"
        nodes: str = "n[1-"
        restart_count: int = 0
        reason: str = ""
        eligible_time: float | None = None
        exc_nodes: str = ""
        held: bool = False

    with pytest.raises(InputError, match=r"^NodeList: not a node set: 'n\[1-'"):
        plan([Job(state="COMPLETING")], {}, {"7": JobMemory(nodes="n1")}, 0.0, 3)
    # an empty ExcNodeList is a normal answer, not an error
    assert plan([Job(nodes="")], {}, {}, 0.0, 3)[0] == []

    env = sg_env(SLURMGUARD_CONFIG=str(cfg_path))
    for argv in (("drain", "n[1-", "--reason", "x"), ("resume", "n[1-"), ("nodes", "n[1-"),
                 ("triage", "collect", "n[1-")):
        r = run_sg(*argv, env=env)
        assert r.returncode == 6, (argv, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1 and "NODESET: not a node set: 'n[1-'" in r.stderr, r.stderr


def test_only_the_helper_parses_node_sets() -> None:
    users = sorted(str(p.relative_to(REPO)) for p in (REPO / "slurmguard").rglob("*.py")
                   if "ClusterShell" in p.read_text(encoding="utf-8").replace("ClusterShell NodeSet", ""))
    assert users == ["slurmguard/nodeset.py"]


simple_sets = st.lists(st.tuples(st.sampled_from(["n", "gpu", "a-"]),
                                 st.lists(st.tuples(st.integers(0, 300), st.integers(0, 40),
                                                    st.integers(1, 4)), min_size=1, max_size=3),
                                 st.sampled_from(["", "x", "-ib"])), min_size=1, max_size=3)


@settings(max_examples=200, deadline=None)
@given(simple_sets)
def test_size_bound_is_never_below_the_expanded_size(items) -> None:
    text = ",".join(f"{head}[{','.join(f'{lo}-{lo + span}/{step}' for lo, span, step in rs)}]"
                    f"{tail}" for head, rs, tail in items)
    assert nodeset.size_bound(text) >= len(nodeset.expand(text))


def test_a_huge_set_is_refused_at_once_naming_the_bound(tmp_path: Path) -> None:
    import time

    for text in ("n[1-99999999]", "a[1-1000]b[1-1000]", "n[1-60000],m[1-60000]"):
        with pytest.raises(InputError, match=r"names [\d,]+ nodes, more than the bound of "
                                             r"100,000$"):
            nodeset.expand(text)
        with pytest.raises(InputError, match="more than the bound"):
            nodeset.check(text, source="groups.big")
    assert len(nodeset.expand("n[1-100000]")) == nodeset.MAX_NODES
    cfg_path = tmp_path / "sg.toml"
    cfg_path.write_text(f'[store]\npath = "{tmp_path}/s.db"\n')
    t = time.monotonic()
    r = run_sg("drain", "n[1-99999999]", "--reason", "x", env=sg_env(SLURMGUARD_CONFIG=str(cfg_path)))
    assert time.monotonic() - t < 30
    assert r.returncode == 6 and r.stderr.count("\n") == 1, r.stderr
    assert "NODESET: node set 'n[1-99999999]' names 99,999,999 nodes, more than the bound of " \
           "100,000" in r.stderr
