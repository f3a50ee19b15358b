"""Slurm's configuration as doctor and setup read it: `scontrol show config` (real 22.05
output captured from the test cluster) and slurm.conf files (includes, records, case)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.helpers import REPO

from slurmguard.adapters.slurm.conf import (
    parse_show_config,
    parse_slurm_conf,
    plugstack_path,
    scheduler_parameters,
    slurm_user,
    timeout_seconds,
)
from slurmguard.errors import ParseError

SHOW = (REPO / "tests/data/slurm/show-config-22.05.8.txt").read_text()


def test_real_show_config_of_22_05() -> None:
    conf = parse_show_config(SHOW)
    assert conf["prologepilogtimeout"] == "60"
    assert conf["prolog"] == "" and conf["epilog"] == ""  # (null)
    assert scheduler_parameters(conf) == ["nohold_on_prolog_fail"]
    assert slurm_user(conf) == "root"
    assert conf["slurmctldhost[0]"].endswith("(localhost)")
    assert plugstack_path(conf, "/etc/slurm/slurm.conf") == "/etc/slurm/plugstack.conf"
    assert conf["schedulertimeslice"] == "30 sec"


def test_show_config_garbage_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="no 'Key = value' lines"):
        parse_show_config("slurm_load_ctl_conf error: Unable to contact slurm controller\n")


def test_slurm_conf_file_includes_records_and_case(tmp_path) -> None:
    (tmp_path / "hooks.conf").write_text("prolog=/usr/lib/slurmguard/prolog/slurmguard-prolog\n")
    text = ("# comment\nSlurmctldHost=ctld\nInclude hooks.conf\n"
            "NodeName=gpu[001-004] CPUs=64 Prolog=/not/a/global  # a record line\n"
            "SchedulerParameters=bf_continue,NOHOLD_ON_PROLOG_FAIL\n"
            "PlugStackConfig=plugstack.d/main.conf\nPrologEpilogTimeout=65534\n"
            "Epilog=/a Epilog=/b\n")
    conf = parse_slurm_conf(text, base_dir=str(tmp_path))
    assert conf["prolog"] == "/usr/lib/slurmguard/prolog/slurmguard-prolog"
    assert "nodename" not in conf and "cpus" not in conf
    assert "nohold_on_prolog_fail" in scheduler_parameters(conf)
    assert plugstack_path(conf, f"{tmp_path}/slurm.conf") == f"{tmp_path}/plugstack.d/main.conf"
    assert timeout_seconds(conf["prologepilogtimeout"]) is None  # INFINITE16
    assert conf["epilog"] == "/b"  # the last one wins, as in Slurm


def test_missing_include_names_the_file(tmp_path) -> None:
    with pytest.raises(ParseError, match=f"include {tmp_path}/nope.conf"):
        parse_slurm_conf("include nope.conf\n", base_dir=str(tmp_path))


@pytest.mark.parametrize("value,seconds", [("60", 60.0), ("", None), ("N/A", None),
                                           ("65534", None), ("120 sec", 120.0)])
def test_timeout_seconds(value: str, seconds: float | None) -> None:
    assert timeout_seconds(value) == seconds


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
KEY = st.builds(lambda a, b: a + b, st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
                st.text(_LETTERS, min_size=2, max_size=20)).filter(
    lambda k: k.lower() not in {"nodename", "partitionname", "nodeset", "frontendname",
                                "downnodes", "switchname", "include"})
VALUE = st.text(_LETTERS + "0123456789/_.,:-", max_size=30)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(KEY, VALUE, min_size=1, max_size=12))
def test_slurm_conf_round_trip(pairs: dict[str, str]) -> None:
    text = "\n".join(f"{k}={v}" for k, v in pairs.items()) + "\n"
    conf = parse_slurm_conf(text)
    want: dict[str, str] = {}
    for k, v in pairs.items():
        want[k.lower()] = v
    assert conf == want


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=400).filter(lambda t: "include" not in t.lower()))
def test_slurm_conf_never_crashes(text: str) -> None:
    assert isinstance(parse_slurm_conf(text), dict)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(KEY, VALUE, min_size=1, max_size=12))
def test_show_config_round_trip(pairs: dict[str, str]) -> None:
    text = "Configuration data as of 2026-12-03T07:16:41\n" + "".join(
        f"{k:<23} = {v or '(null)'}\n" for k, v in pairs.items())
    assert parse_show_config(text) == {k.lower(): v for k, v in pairs.items()}
