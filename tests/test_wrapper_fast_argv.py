"""`slurmguard run`'s parser without click (slurmguard/job/launch.py) against the click command
it stands in for (slurmguard/cli/run.py): on generated command lines and environments, every
command line the fast parser takes, it reads as click does; what it leaves to click, click
parses (or refuses) as before."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import click
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from support.helpers import sg_argv, sg_env

from slurmguard.cli import cli
from slurmguard.cli.run import run_cmd
from slurmguard.errors import EXIT_INPUT
from slurmguard.job import launch

_VALUES = ["/ck", "ck", "", "0", "3", "17", "1.5", ".5", "-1", "x", "nan", "1e3", "auto", "off",
           "log", "requeue", "USR1", "usr1", "none", "TERM"]
_OPTS = [*launch._OPTIONS, "--no-stderr-scan", "--drain-notice", "--no-drain-notice",
         "--help", "--show-checkpoint", "--bogus", "-x"]
_ENV = ["SLURMGUARD_CHECKPOINT_DIR", "SLURMGUARD_RESUME", "SLURMGUARD_MAX_REQUEUES",
        "SLURMGUARD_STALL_TIMEOUT", "SLURMGUARD_GRACE", "SLURMGUARD_NOTICE_SIGNAL",
        "SLURMGUARD_DRAIN_NOTICE", "SLURMGUARD_PROGRESS"]


_GOOD = {"path": ["/ck", "ck", ""], "count": ["0", "3", "17"], "seconds": ["0", "1.5", "60", "7."]}


def _value(kind: object) -> st.SearchStrategy[str]:
    good = _GOOD[kind] if isinstance(kind, str) else list(kind)  # type: ignore[call-overload]
    return st.one_of(st.sampled_from(good), st.sampled_from(good), st.sampled_from(good),
                     st.sampled_from(_VALUES))  # mostly values both parsers take


@st.composite
def _argv(draw: st.DrawFn) -> list[str]:
    out = draw(st.sampled_from([["run"], ["run"], ["-c", "/etc/x.toml", "run"], ["check"],
                                ["-v", "run"]]))
    for _ in range(draw(st.integers(0, 5))):
        opt = draw(st.sampled_from(_OPTS[:12] * 3 + _OPTS))
        if opt in launch._OPTIONS:
            v = draw(_value(launch._OPTIONS[opt][1]))
            out += [f"{opt}={v}"] if draw(st.booleans()) else [opt, v]
        else:
            out.append(opt)
    out += draw(st.sampled_from([["--", "train", "--x"], ["train", "-y"], ["--"], [], ["-", "a"],
                                 ["--", "python", "t.py"]]))
    return out


@st.composite
def _env(draw: st.DrawFn) -> dict[str, str]:
    kinds = {e: k for _, k, e in launch._OPTIONS.values()}
    names = draw(st.lists(st.sampled_from(_ENV), max_size=3, unique=True))
    return {n: draw(_value(kinds[n]) if n in kinds else st.sampled_from(_VALUES)) for n in names}


@contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in [*_ENV, "SLURMGUARD_CONFIG"]}
    for k in saved:
        os.environ.pop(k, None)
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v


def _clicks(argv: list[str]) -> dict | None:
    """run_cmd's parameters and the group's config path as click parses ``argv``."""
    with warnings.catch_warnings():  # click 8.2 deprecates protected_args, 9.0 drops it
        warnings.simplefilter("ignore", DeprecationWarning)
        gctx = cli.make_context("slurmguard", list(argv), resilient_parsing=False)
        tokens = [*getattr(gctx, "protected_args", []), *gctx.args]
    with gctx:
        assert tokens[:1] == ["run"]
        rest = tokens[1:]
        with run_cmd.make_context("run", rest, parent=gctx) as ctx:
            params = dict(ctx.params)
            params["command"] = tuple(params["command"])
            params["config_path"] = gctx.params["config_path"]
            return params


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(argv=_argv(), env=_env())
def test_every_command_line_the_fast_parser_takes_reads_as_clicks(argv, env):
    with _environ(env):
        fast = launch.parse_fast(argv, os.environ)
        assume(fast is not None)  # else click parses it, as it always did
        got = _clicks(argv)
    if got["command"][:1] == ("--",):  # run_cmd drops a "--" click left in (launch does too)
        got["command"] = got["command"][1:]
    if fast["command"][:1] == ("--",):
        fast["command"] = fast["command"][1:]
    assert fast == got


def test_the_common_lines_take_the_fast_path_and_the_rest_go_to_click():
    env = {"SLURMGUARD_MAX_REQUEUES": "5"}
    fast = launch.parse_fast(["run", "--checkpoint-dir", "/ck", "--", "python", "t.py"], env)
    assert fast is not None and fast["max_requeues"] == 5 and fast["command"] == ("python", "t.py")
    for argv in (["run", "--help"], ["run", "--show-checkpoint", "--checkpoint-dir", "/ck"],
                 ["run", "--grace", "-1", "--", "x"], ["run"], ["check"]):
        assert launch.parse_fast(argv, {}) is None, argv
    assert launch.parse_fast(["run", "--", "x"], {"SLURMGUARD_DRAIN_NOTICE": "0"}) is None
    with _environ({}):
        try:
            _clicks(["run", "--grace", "-1", "--", "x"])
        except click.BadParameter as exc:
            assert "--grace" in exc.format_message()
        else:
            raise AssertionError("click took a negative grace")


def test_a_bad_checkpoint_dir_is_said_alike_on_the_fast_path_and_through_click():
    """The fast path says an error as the click CLI says it: one line, InputError's code
    (SLURMGUARD_DRAIN_NOTICE set sends the same command line through click)."""
    said = []
    for extra in ({}, {"SLURMGUARD_DRAIN_NOTICE": "1"}):
        p = subprocess.run(sg_argv("run", "--checkpoint-dir", "relative", "--", "true"),
                           env=sg_env(**extra), capture_output=True, text=True, timeout=60)
        said.append((p.returncode, p.stderr))
    assert said[0] == said[1] == (EXIT_INPUT, "slurmguard: error: --checkpoint-dir: expected "
                                              "an absolute path, got 'relative'\n")
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "slurmguard", "run", "--", "true"],
                       env=sg_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and " click" not in p.stderr  # the fast path imports no click
