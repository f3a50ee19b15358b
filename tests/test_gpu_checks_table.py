"""GPU checks on hand-built NVML snapshots: a table per check, and Hypothesis for the
invariants every check keeps (never raises, one-line reason, NOT_SUPPORTED never unhealthy).
The same checks over the stand-in library are in test_gpu_checks.py."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from fakehw.nvml import H100_BUS_IDS, HW_SLOWDOWN, SW_THERMAL_SLOWDOWN
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmguard.adapters.nvml import GpuInfo, NvmlSnapshot, normalize_bus_id
from slurmguard.checks.base import CheckContext
from slurmguard.checks.gpu import CHECKS, PARAMS
from slurmguard.health import Health

BY_NAME = {c.name: c for c in CHECKS}
BUS = [normalize_bus_id(b) for b in H100_BUS_IDS]
DEFAULTS = {k: f.default for k, f in PARAMS.items()}


# ---- table tests on hand-built snapshots ------------------------------------------------------


def healthy_gpu(i: int, **kw: Any) -> GpuInfo:
    base = GpuInfo(index=i, pci_bus_id=BUS[i], name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{i}",
                   temperature=35, temperature_slowdown=89, temperature_shutdown=92,
                   ecc_enabled=True, ecc_volatile_uncorrected=0, ecc_aggregate_uncorrected=0,
                   remap_correctable=0, remap_uncorrectable=0, remap_pending=False,
                   remap_failure=False, clocks_event_reasons=1,
                   nvlink=tuple((n, True) for n in range(18)), pcie_width=16, pcie_max_width=16,
                   pcie_gen=5, pcie_max_gen=5, persistence_mode=True)
    return replace(base, **kw)


def snap_of(*gpus: GpuInfo, count: int | None = None, driver: tuple[str, ...] | None = None) -> NvmlSnapshot:
    return NvmlSnapshot("550.90.07", len(gpus) if count is None else count, tuple(gpus), driver)


def one(name: str, snap: NvmlSnapshot, previous: dict[str, Any] | None = None, **params: Any) -> tuple[str, str]:
    r = BY_NAME[name].run(CheckContext(params={**DEFAULTS, **params}, sources={"nvml": snap},
                                       previous=previous or {}))
    return r.health.value, r.reason


EIGHT = [healthy_gpu(i) for i in range(8)]

TABLE: list[tuple[str, NvmlSnapshot, dict[str, Any], tuple[str, str]]] = [
    ("gpu-count", snap_of(*EIGHT), {}, ("healthy", "")),
    ("gpu-count", snap_of(*EIGHT[:7]), {"expected_count": 8}, ("unhealthy", "found 7 of 8 GPUs")),
    ("gpu-count", snap_of(*EIGHT), {"expected_count": 4}, ("degraded", "found 8 GPUs, expected 4")),
    ("gpu-count", snap_of(), {"expected_count": 0}, ("healthy", "")),
    ("gpu-lost", snap_of(*EIGHT[:2], replace(EIGHT[2], lost=True, lost_reason="GPU is lost", pci_bus_id="")),
     {}, ("unhealthy", "GPU 2 (bus id unknown) is lost (GPU is lost)")),
    ("gpu-lost", snap_of(*EIGHT[:2], replace(EIGHT[2], lost=True, lost_reason="Unknown Error", pci_bus_id=""),
                         *EIGHT[3:]), {"expected_bus_ids": BUS},
     ("unhealthy", "GPU 2 (0000:3A:00.0) is lost (Unknown Error)")),
    ("gpu-lost", snap_of(*EIGHT[:2], *EIGHT[3:]), {"expected_bus_ids": ["00000000:3a:00.0"]},
     ("unhealthy", "GPU 0 (0000:3A:00.0) fell off the bus")),
    ("gpu-lost", snap_of(*EIGHT[:6], driver=tuple(BUS)), {},
     ("unhealthy", "GPU 6 (0000:BA:00.0) fell off the bus; 1 more")),
    ("gpu-ecc", snap_of(replace(EIGHT[0], ecc_aggregate_uncorrected=3)), {}, ("degraded", "GPU 0 (0000:18:00.0) has 3 lifetime uncorrectable ECC errors")),
    ("gpu-ecc", snap_of(replace(EIGHT[0], ecc_aggregate_uncorrected=3)), {"ecc_aggregate_max": 2},
     ("unhealthy", "GPU 0 (0000:18:00.0) has 3 lifetime uncorrectable ECC errors (max 2)")),
    ("gpu-ecc", snap_of(replace(EIGHT[0], ecc_volatile_uncorrected=1)), {"ecc_volatile_max": 1}, ("healthy", "")),
    ("gpu-ecc", snap_of(replace(EIGHT[1], ecc_enabled=False, ecc_volatile_uncorrected=None,
                                ecc_aggregate_uncorrected=None)), {}, ("degraded", "GPU 1 (0000:2A:00.0) has ECC disabled")),
    ("gpu-ecc", snap_of(replace(EIGHT[1], ecc_enabled=False)), {"ecc_disabled": "ignore"}, ("healthy", "")),
    ("gpu-remap", snap_of(replace(EIGHT[0], remap_pending=None, remap_failure=None, retired_pages_pending=True)),
     {}, ("unhealthy", "GPU 0 (0000:18:00.0) has a page retirement pending: reset the GPU")),
    ("gpu-remap", snap_of(replace(EIGHT[0], remap_uncorrectable=5)), {}, ("healthy", "")),
    ("gpu-thermal", snap_of(replace(EIGHT[0], temperature=85)), {}, ("degraded", "GPU 0 (0000:18:00.0) is at 85 C, near its limit of 89 C")),
    ("gpu-thermal", snap_of(replace(EIGHT[0], temperature=85)), {"temperature_max": 80}, ("unhealthy", "GPU 0 (0000:18:00.0) is at 85 C (limit 80 C)")),
    ("gpu-thermal", snap_of(replace(EIGHT[0], temperature=95, temperature_slowdown=None)), {}, ("healthy", "")),
    ("gpu-thermal", snap_of(replace(EIGHT[0], clocks_event_reasons=SW_THERMAL_SLOWDOWN | 0x4)), {},
     ("degraded", "GPU 0 (0000:18:00.0) clocks held down: SW thermal slowdown")),
    ("gpu-thermal", snap_of(replace(EIGHT[0], clocks_event_reasons=HW_SLOWDOWN)), {"throttle_unhealthy": []}, ("healthy", "")),
    ("gpu-nvlink", snap_of(replace(EIGHT[0], nvlink=((0, True), (1, False), (2, True)))), {"nvlink_expected": 2}, ("healthy", "")),
    ("gpu-nvlink", snap_of(replace(EIGHT[0], nvlink=((0, True), (1, False), (2, False)))), {"nvlink_expected": 2},
     ("unhealthy", "GPU 0 (0000:18:00.0) has 1 of 2 NVLinks active (down: 1,2)")),
    ("gpu-nvlink", snap_of(replace(EIGHT[0], nvlink=((0, False),))), {"nvlink_expected": 0}, ("healthy", "")),
    # PCIe boards: links reported, none cabled on any GPU -> not judged by default ...
    ("gpu-nvlink", snap_of(*(replace(g, nvlink=tuple((n, False) for n in range(18))) for g in EIGHT[:2])), {},
     ("healthy", "")),
    # ... but required when asked for, and one GPU dark among cabled ones is a fault
    ("gpu-nvlink", snap_of(*(replace(g, nvlink=tuple((n, False) for n in range(18))) for g in EIGHT[:2])),
     {"nvlink_expected": 18}, ("unhealthy", "GPU 0 (0000:18:00.0) has 0 of 18 NVLinks active (down: 0,1,2,3,4,5,6,7,...); 1 more")),
    ("gpu-nvlink", snap_of(EIGHT[0], replace(EIGHT[1], nvlink=tuple((n, False) for n in range(18)))), {},
     ("unhealthy", "GPU 1 (0000:2A:00.0) has NVLink 0,1,2,3,4,5,6,7,... down (0 of 18 active)")),
    ("gpu-nvlink", snap_of(replace(EIGHT[0], nvlink=None)), {"nvlink_expected": 18}, ("unsupported", "no GPU reports NVLink")),
    ("gpu-pcie", snap_of(replace(EIGHT[3], pcie_width=8)), {}, ("degraded", "GPU 3 (0000:5D:00.0) PCIe link is x8 (max x16)")),
    ("gpu-pcie", snap_of(replace(EIGHT[3], pcie_gen=1)), {}, ("healthy", "")),
    ("gpu-pcie", snap_of(replace(EIGHT[3], pcie_gen=3)), {"pcie_gen_down": "degraded"},
     ("degraded", "GPU 3 (0000:5D:00.0) PCIe link is gen 3 (max gen 5)")),
    ("gpu-persistence", snap_of(*EIGHT[:2], replace(EIGHT[2], persistence_mode=False)), {},
     ("degraded", "GPU 2 (0000:3A:00.0) has persistence mode off")),
    ("gpu-persistence", snap_of(), {}, ("unsupported", "no GPU reports persistence mode")),
]


@pytest.mark.parametrize(("name", "snap", "params", "expected"), TABLE)
def test_table(name: str, snap: NvmlSnapshot, params: dict[str, Any], expected: tuple[str, str]) -> None:
    assert one(name, snap, **params) == expected


def test_unhealthy_beats_error_beats_degraded() -> None:
    errored = replace(EIGHT[1], persistence_mode=None, errors=(("persistence_mode", "Unknown Error"),))
    off = replace(EIGHT[2], persistence_mode=False)
    assert one("gpu-persistence", snap_of(EIGHT[0], errored, off))[0] == "error"
    assert one("gpu-persistence", snap_of(EIGHT[0], errored, off), persistence_off="unhealthy")[0] == "unhealthy"


# ---- invariants ---------------------------------------------------------------------------------

opt_int = st.none() | st.integers(min_value=0, max_value=2**40)
opt_bool = st.none() | st.booleans()
gpu_st = st.builds(
    GpuInfo,
    index=st.integers(0, 63),
    pci_bus_id=st.sampled_from(BUS + ["", "garbage\nline"]),
    name=st.text(max_size=20),
    lost=st.booleans(),
    lost_reason=st.text(max_size=30),
    temperature=opt_int, temperature_slowdown=opt_int,
    ecc_enabled=opt_bool, ecc_volatile_uncorrected=opt_int, ecc_aggregate_uncorrected=opt_int,
    retired_pages_pending=opt_bool, remap_pending=opt_bool, remap_failure=opt_bool,
    remap_correctable=opt_int, remap_uncorrectable=opt_int,
    clocks_event_reasons=st.none() | st.integers(0, 2**64 - 1),
    nvlink=st.none() | st.lists(st.tuples(st.integers(0, 35), st.booleans()), max_size=36).map(tuple),
    pcie_width=opt_int, pcie_max_width=opt_int, pcie_gen=opt_int, pcie_max_gen=opt_int,
    persistence_mode=opt_bool,
    errors=st.lists(st.tuples(st.sampled_from(["ecc", "pcie", "nvlink", "handle", "temperature"]),
                              st.text(max_size=20)), max_size=2).map(tuple),
)
snap_st = st.builds(NvmlSnapshot, driver_version=st.text(max_size=10), count=st.integers(0, 64),
                    gpus=st.lists(gpu_st, max_size=9).map(tuple),
                    driver_bus_ids=st.none() | st.lists(st.sampled_from(BUS), max_size=8).map(tuple))
params_st = st.fixed_dictionaries({
    "expected_count": st.integers(-1, 16), "ecc_volatile_max": st.integers(0, 3),
    "ecc_aggregate_max": st.integers(-1, 3), "ecc_aggregate_warn": st.integers(-1, 3),
    "temperature_max": st.integers(0, 120), "temperature_margin": st.integers(0, 20),
    "nvlink_expected": st.integers(-1, 18),
    "pcie_width_down": st.sampled_from(["degraded", "unhealthy", "ignore"]),
    "persistence_off": st.sampled_from(["degraded", "unhealthy", "ignore"]),
    "expected_bus_ids": st.lists(st.sampled_from(BUS), max_size=3),
})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snap=snap_st, params=params_st, prev=st.none() | st.dictionaries(st.sampled_from(BUS), st.integers(0, 7)))
def test_checks_never_raise_and_keep_their_contract(snap: NvmlSnapshot, params: dict[str, Any],
                                                     prev: dict[str, int] | None) -> None:
    for c in CHECKS:
        ctx = CheckContext(params={**DEFAULTS, **params}, sources={"nvml": snap},
                           previous={"inventory": prev} if prev is not None else {})
        r = c.run(ctx)
        assert r.name == c.name and isinstance(r.health, Health)
        assert "\n" not in r.reason and len(r.reason) <= 200
        assert (r.reason == "") == (r.health == Health.HEALTHY)
        json.dumps(r.to_dict())
        json.dumps(ctx.new_state)


@settings(max_examples=100, deadline=None)
@given(snap=snap_st)
def test_nothing_supported_is_never_unhealthy(snap: NvmlSnapshot) -> None:
    """A GPU whose every field is NOT_SUPPORTED (None) never makes a field check unhealthy."""
    blank = tuple(GpuInfo(index=g.index, pci_bus_id=g.pci_bus_id) for g in snap.gpus)
    snap = replace(snap, gpus=blank)
    for c in CHECKS:
        if c.name in ("gpu-count", "gpu-lost"):
            continue
        r = c.run(CheckContext(params=DEFAULTS, sources={"nvml": snap}))
        assert r.health in (Health.UNSUPPORTED, Health.HEALTHY), r
