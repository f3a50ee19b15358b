"""ib-link / ib-counters over sysfs fixture trees read by the real adapter."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fakehw.sysfs import set_counter, write_config, write_ib_fabric, write_ib_port
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmguard import config
from slurmguard.adapters.sysfs import gather_ib, has_roce_gid, parse_rate
from slurmguard.checks.base import CheckContext
from slurmguard.checks.ib import COUNTER_BITS, ib_counters, ib_link, saturated
from slurmguard.contract import Health
from slurmguard.errors import Unsupported
from slurmguard.sources import GatherContext


def run(check: Any, root: Path, tmp: Path, previous: dict | None = None, **params: Any):
    values = {"checks.ib.sysfs_root": str(root)}
    values.update({f"checks.ib.{k}": v for k, v in params.items()})
    cfg = config.load(str(write_config(tmp / "ib.toml", values)))
    snap = gather_ib(cfg, GatherContext("n1", "check", time.monotonic() + 5))
    ctx = CheckContext(cfg.section("checks.ib"), {"ib": snap}, previous or {}, time.time())
    return check.run(ctx), ctx.new_state


@pytest.mark.parametrize("text,gbps", [
    ("400 Gb/sec (4X NDR)", 400.0), ("200 Gb/sec (4X HDR)", 200.0), ("100 Gb/sec (4X EDR)", 100.0),
    ("2.5 Gb/sec (1X SDR)", 2.5), ("", 0.0), ("garbage", 0.0),
])
def test_parse_rate(text: str, gbps: float) -> None:
    assert parse_rate(text) == gbps


def test_no_ib_is_unsupported(tmp_path: Path) -> None:
    with pytest.raises(Unsupported, match="no InfiniBand"):
        run(ib_link, tmp_path / "absent", tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(Unsupported):
        run(ib_link, tmp_path / "empty", tmp_path)


LINK_LOCAL = "fe80:0000:0000:0000:0e42:a1ff:fe2b:3c4d"  # from the MAC: every port has it
ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"  # an empty slot (older kernels)
IPV4_GID = "0000:0000:0000:0000:0000:ffff:0a0a:0117"  # 10.10.1.23 on the netdev: RoCE v2
IPV6_GID = "fd00:0000:0000:0012:0e42:a1ff:fe2b:3c4d"

# (port overrides for mlx5_3, params) -> (health, reason)
LINK_TABLE = [
    ({}, {}, Health.HEALTHY, ""),
    ({"state": "1: DOWN", "phys_state": "3: Disabled"}, {}, Health.UNHEALTHY,
     "mlx5_3/1 is DOWN/Disabled"),
    ({"state": "2: INIT", "phys_state": "5: LinkUp"}, {}, Health.UNHEALTHY,
     "mlx5_3/1 is INIT/LinkUp"),
    ({"state": "1: DOWN", "phys_state": "2: Polling"}, {"ignore_devices": ["mlx5_3"]},
     Health.HEALTHY, ""),
    ({"rate": "200 Gb/sec (4X HDR)"}, {"expected_rate": 400}, Health.UNHEALTHY,
     "mlx5_3/1 at 200 Gb/sec (4X HDR), expected >= 400 Gb/sec"),
    ({"rate": "200 Gb/sec (4X HDR)"}, {}, Health.HEALTHY, ""),
    ({}, {"expected_count": 9}, Health.UNHEALTHY, "8 of 9 IB devices present (mlx5_0, mlx5_1, "
     "mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7)"),
    ({}, {"expected_count": 8, "expected_rate": 400}, Health.HEALTHY, ""),
    ({"state": "1: DOWN", "link_layer": "Ethernet"}, {"link_layers": ["InfiniBand"]},
     Health.HEALTHY, ""),
    ({"state": "1: DOWN"}, {"devices": ["mlx5_[0-2]"]}, Health.HEALTHY, ""),
    # Ethernet ports: a plain one (link-local GID only, or no GID table) never drains by
    # default; a RoCE one (an IP-derived GID) is judged like an IB port; naming the device or
    # ethernet = "all" (the old default) judges the plain one too.
    ({"state": "1: DOWN", "link_layer": "Ethernet", "gids": [LINK_LOCAL]}, {},
     Health.HEALTHY, ""),
    ({"state": "1: DOWN", "link_layer": "Ethernet"}, {}, Health.HEALTHY, ""),
    ({"state": "1: DOWN", "link_layer": "Ethernet", "gids": [LINK_LOCAL, ZERO, IPV4_GID]}, {},
     Health.UNHEALTHY, "mlx5_3/1 is DOWN/Disabled"),
    ({"state": "1: DOWN", "link_layer": "Ethernet", "gids": [LINK_LOCAL, IPV6_GID]}, {},
     Health.UNHEALTHY, "mlx5_3/1 is DOWN/Disabled"),
    ({"state": "1: DOWN", "link_layer": "Ethernet", "gids": [LINK_LOCAL]}, {"ethernet": "all"},
     Health.UNHEALTHY, "mlx5_3/1 is DOWN/Disabled"),
    ({"state": "1: DOWN", "link_layer": "Ethernet"}, {"devices": ["mlx5_3"]},
     Health.UNHEALTHY, "mlx5_3/1 is DOWN/Disabled"),
    # a plain Ethernet device still counts as present (expected_count as before)
    ({"state": "1: DOWN", "link_layer": "Ethernet"}, {"expected_count": 8}, Health.HEALTHY, ""),
]


@pytest.mark.parametrize("port,params,health,reason", LINK_TABLE)
def test_ib_link_table(tmp_path: Path, port: dict, params: dict, health: Health,
                       reason: str) -> None:
    root = write_ib_fabric(tmp_path / "ib", 8)
    if port:
        port = {"phys_state": "3: Disabled", **port} if port.get("link_layer") else port
        write_ib_port(root, "mlx5_3", 1, **port)
    r, _ = run(ib_link, root, tmp_path, **params)
    assert (r.health, r.reason) == (health, reason)


def test_two_ports_down_says_more(tmp_path: Path) -> None:
    root = write_ib_fabric(tmp_path / "ib", 4)
    write_ib_port(root, "mlx5_1", 1, state="1: DOWN", phys_state="2: Polling")
    write_ib_port(root, "mlx5_2", 1, state="1: DOWN", phys_state="2: Polling")
    r, _ = run(ib_link, root, tmp_path)
    assert r.reason == "mlx5_1/1 is DOWN/Polling (+1 more)"
    assert r.details["ports"]["mlx5_0/1"]["rate"] == "400 Gb/sec (4X NDR)"


# counter -> (rise, expected health)
COUNTER_TABLE = [
    ("symbol_error", 5, Health.HEALTHY),
    ("symbol_error", 1000, Health.DEGRADED),
    ("link_downed", 1, Health.DEGRADED),
    ("link_downed", 5, Health.UNHEALTHY),
    ("link_error_recovery", 100, Health.UNHEALTHY),
    ("port_xmit_discards", 10**6, Health.HEALTHY),  # not configured: never flagged
    ("port_rcv_errors", -3, Health.HEALTHY),  # counter reset (HCA reset): not a fault
]


@pytest.mark.parametrize("counter,rise,health", COUNTER_TABLE)
def test_ib_counters_table(tmp_path: Path, counter: str, rise: int, health: Health) -> None:
    root = write_ib_fabric(tmp_path / "ib", 2, counters={counter: 10})
    first, state = run(ib_counters, root, tmp_path)
    assert first.health is Health.HEALTHY  # first run: baseline only
    set_counter(root, "mlx5_1", 1, counter, 10 + rise)
    r, state2 = run(ib_counters, root, tmp_path, state)
    assert r.health is health
    if health is not Health.HEALTHY:
        assert r.reason == f"mlx5_1/1 {counter} +{rise} since last run"
    assert state2["counters"]["mlx5_1/1"][counter] == 10 + rise
    # and the run after that, with no further rise, is healthy again
    r3, _ = run(ib_counters, root, tmp_path, state2)
    assert r3.health is Health.HEALTHY


def test_counter_thresholds_configurable(tmp_path: Path) -> None:
    root = write_ib_fabric(tmp_path / "ib", 1)
    _, state = run(ib_counters, root, tmp_path)
    set_counter(root, "mlx5_0", 1, "link_downed", 1)
    r, _ = run(ib_counters, root, tmp_path, state, degraded_on={"link_downed": "0"},
               unhealthy_on={"link_downed": "1"})
    assert r.health is Health.UNHEALTHY


def test_bad_threshold_config_names_key(tmp_path: Path) -> None:
    from slurmguard.errors import ConfigError

    with pytest.raises(ConfigError, match="checks.ib.unhealthy_on"):
        config.load(str(write_config(tmp_path / "bad.toml",
                                     {"checks.ib.unhealthy_on": {"link_downed": "many"}})))


# A counter stuck at the maximum of its width can never rise again: degraded, naming the
# counter, its width and the fix; never unhealthy on its own, first run or later.
SATURATED_TABLE = [
    ("link_downed", 255, 8),
    ("port_xmit_discards", 65535, 16),
    ("symbol_error", 65535, 16),
    ("local_link_integrity_errors", 15, 4),
    ("port_xmit_wait", 4294967295, 32),  # watched below, no width in the table: 32-bit max
]


@pytest.mark.parametrize("counter,value,bits", SATURATED_TABLE)
def test_saturated_counter_is_degraded_never_a_drain(tmp_path: Path, counter: str, value: int,
                                                     bits: int) -> None:
    root = write_ib_fabric(tmp_path / "ib", 2)
    set_counter(root, "mlx5_1", 1, counter, value)
    want = f"mlx5_1/1 {counter} saturated at {value} ({bits}-bit): clear with perfquery -R"
    state: dict = {}
    watch = {} if counter in COUNTER_BITS else {"degraded_on": {counter: "1000000"}}
    for _ in range(2):  # the first run (baseline) and the next one say the same
        r, state = run(ib_counters, root, tmp_path, state, **watch)
        assert (r.health, r.reason) == (Health.DEGRADED, want)
        assert r.details["saturated"] == {"mlx5_1/1": {counter: bits}}


def test_rise_outranks_saturation(tmp_path: Path) -> None:
    root = write_ib_fabric(tmp_path / "ib", 1, counters={"symbol_error": 65535})
    _, state = run(ib_counters, root, tmp_path)
    set_counter(root, "mlx5_0", 1, "link_downed", 5)
    r, _ = run(ib_counters, root, tmp_path, state)
    assert (r.health, r.reason) == (Health.UNHEALTHY, "mlx5_0/1 link_downed +5 since last run "
                                    "(+1 more)")


@given(name=st.sampled_from(sorted(COUNTER_BITS)), value=st.integers(0, 2**64))
@settings(max_examples=300, deadline=None)
def test_saturated_only_at_the_width_maximum(name: str, value: int) -> None:
    bits = COUNTER_BITS[name]
    assert (saturated(name, value) == bits) is (value == (1 << bits) - 1)
    assert saturated(name, (1 << bits) - 1) == bits


def test_unwatched_counter_without_width_is_not_judged(tmp_path: Path) -> None:
    root = write_ib_fabric(tmp_path / "ib", 1, counters={"port_xmit_wait": 2**32 - 1})
    r, _ = run(ib_counters, root, tmp_path)
    assert r.health is Health.HEALTHY  # a congestion counter, not an error counter


@given(words=st.lists(st.integers(0, 0xFFFF), min_size=8, max_size=8))
@settings(max_examples=200, deadline=None)
def test_roce_gid_property(tmp_path_factory: pytest.TempPathFactory, words: list[int]) -> None:
    """An Ethernet port is RoCE exactly when a GID is neither empty nor link-local (fe80:)."""
    gid = ":".join(f"{w:04x}" for w in words)
    root = tmp_path_factory.mktemp("gid")
    write_ib_port(root, "mlx5_0", 1, link_layer="Ethernet", gids=[LINK_LOCAL, gid])
    want = any(words) and words[0] != 0xFE80
    assert has_roce_gid(root / "mlx5_0" / "ports" / "1") is want
