"""host-timesync: chronyd, ntpd and systemd-timesyncd read, and their verdicts.

Each service's client is stood in by a small executable that prints that tool's real output
(the shapes below were taken from real machines), and the real adapter runs it through
run_command, as on a node.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fakehw.sysfs import write_config
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmguard import config
from slurmguard.adapters import timesync
from slurmguard.checks.base import CheckContext
from slurmguard.checks.timesync import host_timesync
from slurmguard.contract import Health
from slurmguard.errors import ConfigError
from slurmguard.sources import GatherContext

NTPQ_HEAD = ("     remote           refid      st t when poll reach   delay   offset  jitter\n"
             "==============================================================================\n")
SHOW_SYNCED = ("Timezone=Etc/UTC\nLocalRTC=no\nCanNTP=yes\nNTP=yes\nNTPSynchronized=yes\n"
               "TimeUSec=Fri 2026-12-04 05:00:00 UTC\n")
STATUS = ("       Server: 10.0.0.1 (ntp.example.org)\n"
          "Poll interval: 34min 8s (min: 32s; max 34min 8s)\n"
          "         Leap: normal\n      Version: 4\n      Stratum: 2\n    Reference: C0248F86\n"
          "    Precision: 1us (-24)\nRoot distance: 19.584ms (max: 5s)\n"
          "       Offset: {offset}\n        Delay: 13.025ms\n       Jitter: 1.230ms\n"
          " Packet count: 5\n    Frequency: +3.942ppm\n")

# (tool, its output(s), required) -> (health, reason)
TABLE: list[tuple[str, Any, bool, Health, str]] = [
    # chronyd: a real server, a PPS refclock, a leap second pending
    ("chronyc", "A9FEA97B,169.254.169.123,4,1764688400.1,0.000012345,-0.000004,0.00002,-12.345,"
     "0.001,0.050,0.0003,0.0002,64.2,Normal", False, Health.HEALTHY, ""),
    ("chronyc", "50505300,PPS,1,1764688400.1,0.000000123,0.0,0.0,1.0,0.0,0.01,0.0,0.0,16.0,Normal",
     False, Health.HEALTHY, ""),
    ("chronyc", "C0A80101,192.168.1.1,3,1764688400.0,0.0001,0.0,0.0,1.0,0.0,0.1,0.001,0.002,64.0,"
     "Insert second", False, Health.HEALTHY, ""),
    ("chronyc", "C0A80101,192.168.1.1,3,1764688400.0,-2.5,0.1,0.2,-1.0,0.0,0.1,0.001,0.002,64.0,"
     "Normal", False, Health.DEGRADED, "clock off by 2.500s"),
    ("chronyc", "C0A80101,192.168.1.1,3,1764688400.0,45.0,0.1,0.2,-1.0,0.0,0.1,0.001,0.002,64.0,"
     "Normal", False, Health.UNHEALTHY, "clock off by 45.000s"),
    ("chronyc", "00000000,,0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,1.0,1.0,0.0,Not synchronised", False,
     Health.DEGRADED, "clock not synchronised"),
    # chronyd's `local stratum 10` as its only source: "Normal", but following itself
    ("chronyc", "7F7F0101,,10,1764688400.0,0.0,0.0,0.0,-3.12,0.0,0.0,0.0,0.0,0.0,Normal", False,
     Health.DEGRADED, "clock not synchronised: chronyd follows the node's own clock "
     "(7F7F0101, stratum 10)"),
    ("chronyc", "4C4F434C,LOCL,10,1764688400.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,Normal", False,
     Health.DEGRADED, "clock not synchronised: chronyd follows the node's own clock "
     "(LOCL, stratum 10)"),
    # ntpd
    ("ntpq", NTPQ_HEAD + "*192.168.1.1     .GPS.            1 u   33   64  377    0.452   -0.026"
     "   0.011\n+10.0.0.2        192.168.1.1      2 u   12   64  377    0.300    0.120   0.050\n",
     False, Health.HEALTHY, ""),
    ("ntpq", NTPQ_HEAD + "*10.0.0.1        .PPS.            1 u    3   16  377    0.100  2500.123"
     "   0.500\n", False, Health.DEGRADED, "clock off by 2.500s"),
    ("ntpq", NTPQ_HEAD + " 10.0.0.2        .INIT.          16 u    -   64    0    0.000    0.000"
     "   0.000\n", False, Health.DEGRADED, "clock not synchronised"),
    ("ntpq", NTPQ_HEAD + "*127.127.1.0     .LOCL.          10 l   47   64  377    0.000    0.000"
     "   0.000\n", False, Health.DEGRADED, "clock not synchronised: ntpd follows the node's own "
     "clock (127.127.1.0, stratum 10)"),
    # systemd-timesyncd
    ("timedatectl", {"show": SHOW_SYNCED, "timesync-status": STATUS.format(offset="-1.104ms")},
     False, Health.HEALTHY, ""),
    ("timedatectl", {"show": SHOW_SYNCED, "timesync-status": STATUS.format(offset="+1min 2.5s")},
     False, Health.UNHEALTHY, "clock off by 62.500s"),
    ("timedatectl", {"show": SHOW_SYNCED.replace("NTPSynchronized=yes", "NTPSynchronized=no"),
                     "timesync-status": STATUS.format(offset="+0us")},
     False, Health.DEGRADED, "clock not synchronised"),
    # no sync service at all: unsupported, or unhealthy when required
    ("timedatectl", {"show": SHOW_SYNCED.replace("NTP=yes", "NTP=no")}, False,
     Health.UNSUPPORTED, "no time sync service (timedatectl: NTP=no)"),
    ("timedatectl", {"show": SHOW_SYNCED.replace("NTP=yes", "NTP=no")}, True,
     Health.UNHEALTHY, "no time sync service (timedatectl: NTP=no)"),
    ("", None, False, Health.UNSUPPORTED, "no time sync service (no chronyc, ntpq or timedatectl)"),
    ("", None, True, Health.UNHEALTHY, "no time sync service (no chronyc, ntpq or timedatectl)"),
]


def _tool(path: Path, outputs: Any) -> str:
    """An executable printing ``outputs`` (a dict: by its first argument)."""
    if isinstance(outputs, str):
        outputs = {"*": outputs}
    cases = "".join(f"  {k}) cat <<'EOF'\n{v.rstrip(chr(10))}\nEOF\n  ;;\n" for k, v in outputs.items())
    path.write_text(f"#!/bin/sh\ncase \"$1\" in\n{cases}  *) echo \"no $1\" >&2; exit 1;;\nesac\n")
    path.chmod(0o755)
    return str(path)


def run(tmp: Path, tool: str, outputs: Any, **params: Any):
    paths = {t: str(tmp / f"absent-{t}") for t in ("chronyc", "ntpq", "timedatectl")}
    if tool:
        paths[tool] = _tool(tmp / tool, outputs)
    values = {f"checks.timesync.{k}": v for k, v in {**paths, **params}.items()}
    cfg = config.load(str(write_config(tmp / "ts.toml", values)))
    snap = timesync.gather(cfg, GatherContext("n1", "check", time.monotonic() + 10))
    return host_timesync.run(CheckContext(cfg.section("checks.timesync"), {"timesync": snap}))


@pytest.mark.parametrize("tool,outputs,required,health,reason", TABLE)
def test_timesync_table(tmp_path: Path, tool: str, outputs: Any, required: bool, health: Health,
                        reason: str) -> None:
    r = run(tmp_path, tool, outputs, required=required)
    assert (r.health, r.reason) == (health, reason)


def test_daemon_not_answering_is_degraded(tmp_path: Path) -> None:
    r = run(tmp_path, "chronyc", {"nothing": ""})
    assert r.health is Health.DEGRADED and r.reason.startswith("chronyd not answering: ")


def test_stratum_above_the_limit(tmp_path: Path) -> None:
    line = "C0A80101,192.168.1.1,12,1764688400.0,0.0001,0.0,0.0,1.0,0.0,0.1,0.0,0.0,64.0,Normal"
    assert run(tmp_path, "chronyc", line).health is Health.HEALTHY
    r = run(tmp_path, "chronyc", line, max_stratum=8)
    assert (r.health, r.reason) == (Health.DEGRADED, "clock at stratum 12 (> 8)")


def test_moved_keys_say_where_they_went(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^checks\.host\.max_offset: moved to "
                                          r"checks\.timesync\.max_offset \(in "):
        config.load(str(write_config(tmp_path / "old.toml", {"checks.host.max_offset": 1.0})))


@given(st.text())
@settings(max_examples=300, deadline=None)
def test_parsers_raise_only_value_error(text: str) -> None:
    for parse in (timesync.parse_chrony_tracking, timesync.parse_ntpq_peers, timesync.parse_span):
        try:
            parse(text)
        except ValueError:
            pass


@given(tally=st.sampled_from("*o+- x#"), st_=st.integers(1, 16),
       offset_ms=st.floats(-1e6, 1e6, allow_nan=False).map(lambda x: round(x, 3)),
       a=st.integers(1, 254), b=st.integers(1, 254))
@settings(max_examples=300, deadline=None)
def test_ntpq_selected_peer(tally: str, st_: int, offset_ms: float, a: int, b: int) -> None:
    row = f"{tally}10.{a}.0.{b}        .GPS.  {st_:>3} u   33   64  377    0.452 {offset_ms:9.3f}   0.011"
    ts = timesync.parse_ntpq_peers(NTPQ_HEAD + row + "\n")
    assert ts.synced is (tally in "*o")
    if ts.synced:
        assert ts.stratum == st_ and ts.reference == f"10.{a}.0.{b}"
        assert ts.offset == pytest.approx(abs(offset_ms) / 1000)


@given(minutes=st.integers(0, 59), seconds=st.integers(0, 59), ms=st.integers(0, 999),
       sign=st.sampled_from("+-"))
@settings(max_examples=200, deadline=None)
def test_span_property(minutes: int, seconds: int, ms: int, sign: str) -> None:
    text = sign + (f"{minutes}min " if minutes else "") + f"{seconds}.{ms:03d}s"
    assert timesync.parse_span(text) == pytest.approx(minutes * 60 + seconds + ms / 1000)


def test_unreadable_answer_is_degraded_naming_the_daemon(tmp_path: Path) -> None:
    r = run(tmp_path, "chronyc", "506 Cannot talk to daemon")
    assert r.health is Health.DEGRADED
    assert r.reason.startswith("chronyd not answering: unexpected chronyc output")


def test_timedatectl_without_timedated_is_no_service(tmp_path: Path) -> None:
    """In a container timedatectl cannot reach timedated: no evidence of timesyncd."""
    r = run(tmp_path, "timedatectl", {"nothing": ""})
    assert r.health is Health.UNSUPPORTED
    assert r.reason.startswith("no time sync service (timedatectl: ")


@given(ref=st.from_regex(r"[0-9A-F]{8}", fullmatch=True), stratum=st.integers(0, 16),
       offset=st.floats(-1e4, 1e4, allow_nan=False),
       leap=st.sampled_from(["Normal", "Insert second", "Delete second", "Not synchronised"]))
@settings(max_examples=300, deadline=None)
def test_chrony_tracking_property(ref: str, stratum: int, offset: float, leap: str) -> None:
    line = f"{ref},n,{stratum},1764688400.0,{offset!r},0,0,0,0,0,0,0,64,{leap}"
    ts = timesync.parse_chrony_tracking(line)
    assert (ts.stratum, ts.leap_status) == (stratum, leap)
    assert ts.offset == pytest.approx(abs(offset))
    assert ts.synced is (leap != "Not synchronised" and ref != "00000000")
    assert ts.local is (ref == "7F7F0101")
