"""Checks of area 'gpu': pure functions of one NVML snapshot (slurmguard.sources.nvml).

Every check looks at all GPUs and returns one result whose reason names the first GPU at
fault by index and PCI bus id (``GPU 2 (0000:3A:00.0) fell off the bus``) and counts the
others; ``details["gpus"]`` has one entry per GPU. Shared rules:

* a field the GPU answers NOT_SUPPORTED is ``None`` in the snapshot and is skipped: it never
  makes a check unhealthy; a check with nothing to look at on any GPU says ``unsupported``;
* a field that failed with another NVML error makes the check ``error`` (slurmguard could not
  look), unless another GPU is unhealthy, which wins;
* lost GPUs are gpu-lost's business; the other checks skip them (their fields are None).

Thresholds and their reasons are documented per check below and in docs/checks-gpu.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from slurmguard.checks.base import Check, CheckContext, check
from slurmguard.contract import CheckResult, Health, one_line
from slurmguard.fieldtypes import Choice, Field, Int, StrList
from slurmguard.sources.nvml import GpuInfo, NvmlSnapshot, normalize_bus_id

AREA = "gpu"

# nvmlClocksEventReason* bits (nvml.h), by the names the config uses.
CLOCK_REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
_REASON_TEXT = {k: k.replace("_", " ").replace("hw ", "HW ").replace("sw ", "SW ") for k in CLOCK_REASONS}


def _empty_or_absolute(value: str) -> str | None:
    return None if value == "" or value.startswith("/") else "expected an absolute path or \"\""


def _clock_reason_names(value: list[str]) -> str | None:
    bad = [v for v in value if v not in CLOCK_REASONS]
    return f"unknown clock event reason {bad[0]!r} (known: {', '.join(CLOCK_REASONS)})" if bad else None


PARAMS: dict[str, Field] = {
    "nvml_library": Field("str", "", "absolute path of libnvidia-ml.so.1 to load instead of the "
                          "default search (empty: the driver's, found by the dynamic linker)",
                          validate=_empty_or_absolute),
    "driver_gpus_dir": Field("str", "/proc/driver/nvidia/gpus", "where the driver lists the "
                             "GPUs it bound (names lost GPUs, finds GPUs that fell off the bus); "
                             "empty: not read", validate=_empty_or_absolute),
    "expected_count": Int(-1, "GPUs this node must have; -1: not checked", minimum=-1),
    "expected_bus_ids": StrList([], "PCI bus ids that must be present, e.g. \"0000:18:00.0\""),
    "ecc_volatile_max": Int(0, "unhealthy above this many volatile uncorrectable ECC errors"),
    "ecc_aggregate_max": Int(-1, "unhealthy above this many lifetime uncorrectable ECC errors "
                             "(-1: never)", minimum=-1),
    "ecc_aggregate_warn": Int(0, "degraded above this many lifetime uncorrectable ECC errors "
                              "(-1: never)", minimum=-1),
    "ecc_disabled": Choice("degraded", ("degraded", "unhealthy", "ignore"), "when ECC is off"),
    "temperature_max": Int(0, "unhealthy at or above this GPU temperature in C; 0: the GPU's own "
                           "slowdown threshold"),
    "temperature_margin": Int(5, "degraded within this many C below the limit"),
    "throttle_unhealthy": Field("list[str]", ["hw_slowdown", "hw_thermal_slowdown",
                                              "hw_power_brake_slowdown"],
                                "clock event reasons that make gpu-thermal unhealthy",
                                validate=_clock_reason_names),
    "throttle_degraded": Field("list[str]", ["sw_thermal_slowdown"],
                               "clock event reasons that make gpu-thermal degraded",
                               validate=_clock_reason_names),
    "nvlink_expected": Int(-1, "active NVLinks each GPU must have; -1: every link the GPU "
                           "reports; 0: not checked", minimum=-1),
    "pcie_width_down": Choice("degraded", ("degraded", "unhealthy", "ignore"),
                              "when a GPU's PCIe link runs narrower than its maximum"),
    "pcie_gen_down": Choice("ignore", ("degraded", "unhealthy", "ignore"),
                            "when a GPU's PCIe link runs below its maximum generation "
                            "(GPUs lower the generation when idle: off by default)"),
    "persistence_off": Choice("degraded", ("degraded", "unhealthy", "ignore"),
                              "when persistence mode is off"),
    "remap_rows_grew": Choice("degraded", ("degraded", "unhealthy", "ignore"),
                              "when a GPU's remapped-row counts grew since gpu-remap's last "
                              "reading, no remap pending or failed"),
}

_ORDER = {Health.HEALTHY: 0, Health.UNSUPPORTED: 1, Health.DEGRADED: 2, Health.ERROR: 3,
          Health.UNHEALTHY: 4}


class _Findings:
    """Per-GPU problems of one check, folded into one result."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.items: list[tuple[Health, str]] = []
        self.gpus: list[dict[str, Any]] = []
        self.checked = 0  # GPUs on which the check had something to look at

    def add(self, health: Health | str, gpu: GpuInfo | None, text: str) -> None:
        if health == "ignore":
            return
        self.items.append((Health(health), f"{gpu.label} {text}" if gpu else text))

    def gpu(self, g: GpuInfo, **fields: Any) -> None:
        self.gpus.append({"index": g.index, "pci_bus_id": g.pci_bus_id, **fields})

    def failed(self, g: GpuInfo, *fields: str) -> bool:
        """Record a read error of ``fields`` on g as an ``error`` finding; True if there was one."""
        problem = g.error_of(*fields)
        if problem:
            self.add(Health.ERROR, g, f"NVML read failed: {problem}")
        return problem is not None

    def result(self, nothing: str = "", **details: Any) -> CheckResult:
        details = {**details, "gpus": self.gpus}
        if not self.items:
            if nothing and not self.checked:
                return CheckResult(self.name, Health.UNSUPPORTED, nothing, details)
            return CheckResult(self.name, Health.HEALTHY, "", details)
        worst = max((h for h, _ in self.items), key=_ORDER.__getitem__)
        texts = [t for h, t in self.items if h == worst]
        reason = texts[0] + (f"; {len(texts) - 1} more" if len(texts) > 1 else "")
        details["problems"] = [t for _, t in self.items]
        return CheckResult(self.name, worst, one_line(reason), details)


def _snap(ctx: CheckContext) -> NvmlSnapshot:
    return ctx.sources["nvml"]


def _live(snap: NvmlSnapshot) -> Iterable[GpuInfo]:
    return (g for g in snap.gpus if not g.lost)


def _gpu_check(name: str, summary: str) -> Callable[[Callable[[CheckContext], CheckResult]], Check]:
    return check(name, AREA, ("nvml",), summary)


# gpu-count -- catches GPUs the driver no longer enumerates (fallen off the bus before the
# driver loaded, dead board, missing power). Reads nvmlDeviceGetCount. Threshold: exactly
# checks.gpu.expected_count; fewer is unhealthy (jobs would get a partial node), more is
# degraded (the config is wrong, the node is fine). Unset (-1): the node's GPU Gres in Slurm
# (`Gres=gpu:h100:8`), which the healthcheck hook saves in this check's state whenever it
# asks Slurm anyway (node/hooks.py), so the prolog pays nothing for it; neither known: not
# checked, since guessing a node's count would drain every node of another shape.
@_gpu_check("gpu-count", "the node has as many GPUs as checks.gpu.expected_count (or Slurm's Gres)")
def gpu_count(ctx: CheckContext) -> CheckResult:
    snap, expected = _snap(ctx), int(ctx.params.get("expected_count", -1))
    source = "checks.gpu.expected_count"
    gres = ctx.previous.get("slurm_gres_gpus") if isinstance(ctx.previous, Mapping) else None
    if expected < 0 and isinstance(gres, int) and not isinstance(gres, bool) and gres > 0:
        expected, source = gres, "slurm gres"
    return count_verdict(snap.count, expected, source, snap.driver_version)


def count_verdict(count: int, expected: int, source: str,
                  driver_version: str | None = "") -> CheckResult:
    """gpu-count's rule: ``count`` GPUs found, ``expected`` from ``source`` (-1: unknown)."""
    details = {"count": count, "expected": None if expected < 0 else expected,
               "driver_version": driver_version, "expected_from": source}
    if expected < 0:
        return CheckResult("gpu-count", Health.HEALTHY, "",
                           {**details, "note": "checks.gpu.expected_count unset: not checked"})
    if count < expected:
        return CheckResult("gpu-count", Health.UNHEALTHY,
                           f"found {count} of {expected} GPUs", details)
    if count > expected:
        return CheckResult("gpu-count", Health.DEGRADED,
                           f"found {count} GPUs, expected {expected}", details)
    return CheckResult("gpu-count", Health.HEALTHY, "", details)


# gpu-lost -- catches a GPU that fell off the bus (Xid 79) or is otherwise unreachable:
# NVML answers GPU_IS_LOST (or Unknown Error for the handle) for a GPU it still counts, or a
# GPU is missing altogether. "Missing" means a bus id that should be there and is not: from
# checks.gpu.expected_bus_ids, from the driver's own list (/proc/driver/nvidia/gpus), or
# seen by this check on an earlier run (saved state, kept until removed by hand, so a GPU
# that vanished across a reboot is still named). No threshold: one lost GPU is a node fault.
@_gpu_check("gpu-lost", "no GPU is lost (GPU_IS_LOST) or missing from the bus")
def gpu_lost(ctx: CheckContext) -> CheckResult:
    snap, f = _snap(ctx), _Findings("gpu-lost")
    known: dict[str, int] = {}
    prev = ctx.previous.get("inventory") if isinstance(ctx.previous, Mapping) else None
    if isinstance(prev, Mapping):
        known.update({normalize_bus_id(str(b)): int(i) for b, i in prev.items()
                      if isinstance(i, int) and not isinstance(i, bool)})
    for pos, b in enumerate(sorted(normalize_bus_id(x) for x in ctx.params.get("expected_bus_ids", ()))):
        known.setdefault(b, pos)
    for pos, b in enumerate(snap.driver_bus_ids or ()):
        known.setdefault(b, pos)
    present = {g.pci_bus_id for g in snap.gpus if g.pci_bus_id}
    for g in snap.gpus:
        f.checked += 1
        if g.lost and not g.pci_bus_id:
            # No handle, no PCI info: a bus id known at this index and not enumerated now is it.
            at_index = [b for b, i in known.items() if i == g.index and b not in present]
            if len(at_index) == 1:
                g = g._replace(pci_bus_id=at_index[0])
                present.add(at_index[0])
        f.gpu(g, lost=g.lost, name=g.name, uuid=g.uuid)
        if g.lost:
            f.add(Health.UNHEALTHY, g, f"is lost ({g.lost_reason or 'GPU is lost'})")
        elif not g.pci_bus_id:
            f.failed(g, "handle", "pci_info")
    for b in sorted(set(known) - present, key=lambda b: known[b]):
        f.add(Health.UNHEALTHY, None, f"GPU {known[b]} ({b}) fell off the bus")
        f.gpus.append({"index": known[b], "pci_bus_id": b, "lost": True, "missing": True})
    missing = sorted(set(known) - present)
    ctx.new_state["inventory"] = {**known, **{g.pci_bus_id: g.index for g in snap.gpus if g.pci_bus_id}}
    return f.result(missing=missing)


# gpu-ecc -- catches uncorrectable (double-bit) memory errors: data the GPU handed to a job
# was wrong. Reads nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE|AGGREGATE) and
# nvmlDeviceGetEccMode. Volatile counts reset with the driver/GPU: any (> 0) means the GPU
# has not been reset since the error, and NVIDIA's guidance is to reset it before reuse.
# Aggregate counts are lifetime: a GPU whose rows were remapped is fine again, so they are
# only degraded by default (worth a look), with an opt-in unhealthy limit.
@_gpu_check("gpu-ecc", "no uncorrectable ECC errors since the last GPU reset; ECC enabled")
def gpu_ecc(ctx: CheckContext) -> CheckResult:
    p, f = ctx.params, _Findings("gpu-ecc")
    vmax = int(p.get("ecc_volatile_max", 0))
    amax, awarn = int(p.get("ecc_aggregate_max", -1)), int(p.get("ecc_aggregate_warn", 0))
    for g in _live(_snap(ctx)):
        vol, agg = g.ecc_volatile_uncorrected, g.ecc_aggregate_uncorrected
        f.gpu(g, ecc_enabled=g.ecc_enabled, volatile_uncorrected=vol, aggregate_uncorrected=agg)
        if g.ecc_enabled is None and vol is None and agg is None:
            f.failed(g, "ecc_mode", "ecc")
            continue
        f.checked += 1
        if g.ecc_enabled is False:
            f.add(p.get("ecc_disabled", "degraded"), g, "has ECC disabled")
        f.failed(g, "ecc_mode", "ecc")
        if vol is not None and vol > vmax:
            f.add(Health.UNHEALTHY, g, f"has {vol} volatile uncorrectable ECC errors")
        if agg is not None and amax >= 0 and agg > amax:
            f.add(Health.UNHEALTHY, g, f"has {agg} lifetime uncorrectable ECC errors (max {amax})")
        elif agg is not None and awarn >= 0 and agg > awarn:
            f.add(Health.DEGRADED, g, f"has {agg} lifetime uncorrectable ECC errors")
    return f.result("no GPU reports ECC counters")


# gpu-remap -- catches memory repairs that need action: row remapping pending (Ampere+; the
# spare row is used only after a GPU reset, until then the bad row can be hit again), row
# remapping failure (no spare rows left in the bank: NVIDIA's criterion for replacing the
# GPU), and page retirement pending (pre-Ampere: the page is retired at the next driver
# load). Reads nvmlDeviceGetRemappedRows and nvmlDeviceGetRetiredPagesPendingStatus. Any of
# the three is unhealthy: each means "reset or replace before the next job".
# It also catches memory that is wearing out while each repair still works: remapped-row
# counts (for correctable and for uncorrectable errors) that grew since this check's last
# reading with nothing pending or failed, i.e. rows remapped and already in effect (a reset
# came between two readings). The counts are lifetime (infoROM, up to 512 per GPU), and each
# new row is a step toward NVIDIA's replacement criterion (the failure flag: a ninth
# uncorrectable remap in one bank, a row remapped twice, or 512 in all), so a growth is
# checks.gpu.remap_rows_grew (degraded: worth a look, the node keeps its jobs). Judged by
# change only: a count that has not grown is history and says nothing; the first reading of
# a GPU (by UUID, so a replaced board starts anew) is its baseline, and a count that went
# down (another board, a cleared infoROM) is a new baseline.
@_gpu_check("gpu-remap", "no row remap pending or failed, no page retirement pending, no rows "
                         "newly remapped")
def gpu_remap(ctx: CheckContext) -> CheckResult:
    f = _Findings("gpu-remap")
    before = ctx.previous.get("rows") if isinstance(ctx.previous, Mapping) else None
    seen: dict[str, list[int]] = dict(before) if isinstance(before, Mapping) else {}
    grew_to = ctx.params.get("remap_rows_grew", "degraded")
    new_rows = 0
    for g in _live(_snap(ctx)):
        entry = {"remap_pending": g.remap_pending, "remap_failure": g.remap_failure,
                 "remap_correctable": g.remap_correctable,
                 "remap_uncorrectable": g.remap_uncorrectable,
                 "retired_pages_pending": g.retired_pages_pending}
        grown = _rows_grown(g, seen)
        if grown is not None:
            entry["remap_new"] = grown
        f.gpu(g, **entry)
        f.failed(g, "remapped_rows", "retired_pages")
        if g.remap_pending is None and g.retired_pages_pending is None:
            continue
        f.checked += 1
        if g.remap_failure:
            f.add(Health.UNHEALTHY, g, "row remapping failed (no spare rows): replace the GPU")
        if g.remap_pending:
            f.add(Health.UNHEALTHY, g, "has a row remap pending: reset the GPU")
        if g.retired_pages_pending:
            f.add(Health.UNHEALTHY, g, "has a page retirement pending: reset the GPU")
        if grown and not g.remap_pending and not g.remap_failure:
            new_rows += grown
            rows = "row" if grown == 1 else "rows"
            f.add(grew_to, g, f"had {grown} {rows} remapped since the last run (now "
                              f"{g.remap_correctable} for correctable, {g.remap_uncorrectable} "
                              f"for uncorrectable errors): memory wearing")
    ctx.new_state["rows"] = seen
    return f.result("no GPU reports row remapping or page retirement", new_rows=new_rows)


def _rows_grown(g: GpuInfo, seen: dict[str, list[int]]) -> int | None:
    """Rows remapped on g since the last reading in ``seen`` (updated with this one: the
    counts and whether a remap was pending); None on the first reading (the baseline), when
    NVML gave no counts, or when the last reading had a remap pending (that remap was
    reported unhealthy then; the reset since applied it, whichever reading counted it)."""
    c, u = g.remap_correctable, g.remap_uncorrectable
    key = g.uuid or g.pci_bus_id
    if not key or not isinstance(c, int) or not isinstance(u, int):
        return None
    old = seen.get(key)
    seen[key] = [c, u, 1 if g.remap_pending else 0]
    if (not isinstance(old, list) or len(old) != 3
            or not all(isinstance(x, int) for x in old) or old[2]):
        return None
    if c < old[0] or u < old[1]:  # fewer than before: not the board we read (a new baseline)
        return None
    return (c - old[0]) + (u - old[1])


# gpu-thermal -- catches cooling and power-delivery faults: a GPU at or above its slowdown
# temperature (NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, where the GPU starts cutting clocks;
# checks.gpu.temperature_max overrides), and hardware clock slowdowns reported by
# nvmlDeviceGetCurrentClocksEventReasons: HW slowdown, HW thermal slowdown and HW power
# brake mean the board's protection engaged (fans, heatsink, PSU), which a job cannot fix;
# SW thermal slowdown is the driver's own, earlier reaction: degraded.
@_gpu_check("gpu-thermal", "GPU temperature below the slowdown limit, no HW clock slowdown")
def gpu_thermal(ctx: CheckContext) -> CheckResult:
    p, f = ctx.params, _Findings("gpu-thermal")
    tmax, margin = int(p.get("temperature_max", 0)), int(p.get("temperature_margin", 5))
    bad = [r for r in p.get("throttle_unhealthy", ()) if r in CLOCK_REASONS]
    warn = [r for r in p.get("throttle_degraded", ()) if r in CLOCK_REASONS]
    for g in _live(_snap(ctx)):
        limit = tmax if tmax > 0 else g.temperature_slowdown
        f.gpu(g, temperature=g.temperature, limit=limit, clocks_event_reasons=g.clocks_event_reasons)
        f.failed(g, "temperature", "clocks_event_reasons")
        if g.temperature is not None and limit:
            f.checked += 1
            if g.temperature >= limit:
                f.add(Health.UNHEALTHY, g, f"is at {g.temperature} C (limit {limit} C)")
            elif g.temperature >= limit - margin:
                f.add(Health.DEGRADED, g, f"is at {g.temperature} C, near its limit of {limit} C")
        if g.clocks_event_reasons is not None:
            f.checked += 1
            for names, health in ((bad, Health.UNHEALTHY), (warn, Health.DEGRADED)):
                active = [_REASON_TEXT[r] for r in names if g.clocks_event_reasons & CLOCK_REASONS[r]]
                if active:
                    f.add(health, g, "clocks held down: " + ", ".join(active))
    return f.result("no GPU reports temperature or clock event reasons")


# gpu-nvlink -- catches NVLinks that did not train or went down (bad cable/connector,
# NVSwitch fault): collective traffic then falls back to PCIe or hangs. Reads
# nvmlDeviceGetNvLinkState for every link the GPU has. Threshold: by default (-1) every link
# the GPU reports must be active (an HGX H100 has 18, all cabled), except on a node where no
# GPU has any link active: PCIe boards report their links but have nothing cabled, and
# draining every such node would be wrong (a whole HGX with every link down is caught by
# setting nvlink_expected). nvlink_expected = N asks for N active links per GPU; 0 is off.
@_gpu_check("gpu-nvlink", "every NVLink each GPU reports is active")
def gpu_nvlink(ctx: CheckContext) -> CheckResult:
    f, expected = _Findings("gpu-nvlink"), int(ctx.params.get("nvlink_expected", -1))
    live = list(_live(_snap(ctx)))
    uncabled = expected < 0 and not any(up for g in live for _, up in (g.nvlink or ()))
    for g in live:
        links = g.nvlink
        f.gpu(g, links_active=None if links is None else sum(up for _, up in links),
              links_down=None if links is None else [n for n, up in links if not up])
        f.failed(g, "nvlink")
        if links is None or expected == 0 or uncabled:
            continue
        f.checked += 1
        down = [n for n, up in links if not up]
        active = len(links) - len(down)
        if expected > 0 and active < expected:
            f.add(Health.UNHEALTHY, g, f"has {active} of {expected} NVLinks active"
                  + (f" (down: {_links(down)})" if down else ""))
        elif expected < 0 and down:
            f.add(Health.UNHEALTHY, g, f"has NVLink {_links(down)} down ({active} of {len(links)} active)")
    if expected == 0:
        return f.result(note="checks.gpu.nvlink_expected = 0: not checked")
    if uncabled and any(g.nvlink for g in live):
        return f.result(note="no GPU has an active NVLink (PCIe boards): not checked; "
                        "set checks.gpu.nvlink_expected to require links")
    return f.result("no GPU reports NVLink")


def _links(numbers: list[int]) -> str:
    return ",".join(str(n) for n in numbers[:8]) + (",..." if len(numbers) > 8 else "")


# gpu-pcie -- catches a GPU whose PCIe link trained narrower than it can (x8 instead of x16:
# a badly seated board, riser or retimer fault): host<->GPU bandwidth halves and the job
# slows without failing. Reads nvmlDeviceGetCurr/MaxPcieLinkWidth and -Generation. Width
# below max is degraded by default (worth a ticket; raise to unhealthy once the fleet's
# boards are known to train at full width). Generation below max is ignored by default:
# GPUs drop to a lower generation when idle to save power, which is what a prolog sees.
@_gpu_check("gpu-pcie", "each GPU's PCIe link runs at its full width (and generation)")
def gpu_pcie(ctx: CheckContext) -> CheckResult:
    p, f = ctx.params, _Findings("gpu-pcie")
    for g in _live(_snap(ctx)):
        f.gpu(g, width=g.pcie_width, max_width=g.pcie_max_width, gen=g.pcie_gen, max_gen=g.pcie_max_gen)
        f.failed(g, "pcie")
        if g.pcie_width is not None and g.pcie_max_width is not None:
            f.checked += 1
            if g.pcie_width < g.pcie_max_width:
                f.add(p.get("pcie_width_down", "degraded"), g,
                      f"PCIe link is x{g.pcie_width} (max x{g.pcie_max_width})")
        if g.pcie_gen is not None and g.pcie_max_gen is not None:
            f.checked += 1
            if g.pcie_gen < g.pcie_max_gen:
                f.add(p.get("pcie_gen_down", "ignore"), g,
                      f"PCIe link is gen {g.pcie_gen} (max gen {g.pcie_max_gen})")
    return f.result("no GPU reports its PCIe link")


# gpu-persistence -- catches persistence mode off: the driver then tears each GPU down when
# the last client exits and re-initializes it at the next job (seconds per job, and ECC/
# remap state is re-read each time), and nvidia-persistenced is probably not running. Reads
# nvmlDeviceGetPersistenceMode. A configuration problem, not a broken GPU: degraded.
@_gpu_check("gpu-persistence", "persistence mode is on for every GPU")
def gpu_persistence(ctx: CheckContext) -> CheckResult:
    p, f = ctx.params, _Findings("gpu-persistence")
    for g in _live(_snap(ctx)):
        f.gpu(g, persistence_mode=g.persistence_mode)
        f.failed(g, "persistence_mode")
        if g.persistence_mode is None:
            continue
        f.checked += 1
        if not g.persistence_mode:
            f.add(p.get("persistence_off", "degraded"), g, "has persistence mode off")
    return f.result("no GPU reports persistence mode")


CHECKS: list[Check] = [gpu_count, gpu_lost, gpu_ecc, gpu_remap, gpu_thermal, gpu_nvlink,
                       gpu_pcie, gpu_persistence]
