"""One NVML pass over every GPU: everything the GPU checks read (slurmguard.sources.nvml).

``gather(cfg, ctx)`` is the ``nvml`` source of :data:`slurmguard.checks.base.SOURCES`. It
calls NVML through slurmguard.adapters.nvml_lib (ctypes, imported lazily, so hooks without
GPU checks never load it; pynvml's import alone cost the hook more than the whole pass),
which loads ``libnvidia-ml.so.1``: the NVIDIA driver's library on a GPU node, the stand-in
from tests/fakehw in the test suite.

What becomes what:

* library missing or driver not loaded -> :class:`~slurmguard.errors.Unsupported` (every
  GPU check says ``unsupported``; a CPU node is not faulty for having no GPU);
* any other failure of the whole library (nvmlInit, device count) -> SlurmguardError (the
  runner reports ``error``: slurmguard could not look, which is never a node fault);
* one GPU whose handle or a query answers GPU_IS_LOST (or, for the handle, Unknown Error /
  Reset Required, which is how a GPU that fell off the bus often shows up) -> that GPU's
  entry has ``lost=True``: that IS a node fault;
* a field answering NOT_SUPPORTED (or a symbol missing from an old driver) -> ``None``, and
  the checks skip it; any other error of one field -> ``None`` plus an entry in ``errors``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from slurmguard.errors import SlurmguardError, Unsupported
from slurmguard.sources.nvml import GpuInfo, NvmlSnapshot, normalize_bus_id

if TYPE_CHECKING:
    from slurmguard.config import Config

# NVML return codes (nvml.h); pynvml exposes the same numbers, but this module must be
# importable without pynvml (the hook path binds NVML itself, adapters/nvml_lib.py).
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_UNKNOWN = 999
NVML_NVLINK_MAX_LINKS = 36

_SKIP = (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND)
_LOST_ON_HANDLE = (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_UNKNOWN, NVML_ERROR_RESET_REQUIRED)
_LOST_ON_FIELD = (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED)


# ---------------------------------------------------------------------------------------------

_lib_lock = threading.Lock()
_injected: str | None = None  # path we put into pynvml.nvmlLib, if any


def _load_library(nv: Any, path: str) -> None:
    """Make pynvml use ``path`` (checks.gpu.nvml_library) instead of its default dlopen.

    pynvml has no public way to name the library file, so this sets its module-level handle
    (``nvmlLib``) and empties its symbol cache; both exist in every nvidia-ml-py since 11.
    With an empty path, a handle injected earlier is dropped so pynvml loads its default.
    """
    global _injected
    with _lib_lock:
        if not path:
            if _injected is not None:
                nv.nvmlLib = None
                nv._nvmlGetFunctionPointer_cache.clear()
                _injected = None
            return
        if _injected == path and nv.nvmlLib is not None:
            return
        if not os.path.exists(path):
            raise Unsupported(f"NVML library not found: {path}")
        import ctypes

        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            raise Unsupported(f"NVML library cannot be loaded: {path}: {exc}") from None
        nv.nvmlLib = lib
        nv._nvmlGetFunctionPointer_cache.clear()
        _injected = path


def _driver_bus_ids(path: str) -> tuple[str, ...] | None:
    """Bus ids the driver bound (one directory each under /proc/driver/nvidia/gpus)."""
    if not path:
        return None
    try:
        return tuple(sorted(normalize_bus_id(e) for e in os.listdir(path)))
    except OSError:
        return None


class _Lost(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


def _open(path: str) -> Any:
    """The NVML binding of the hook path (slurmguard.adapters.nvml_lib: ctypes, no pynvml)."""
    from slurmguard.adapters import nvml_lib

    if path and not os.path.exists(path):
        raise Unsupported(f"NVML library not found: {path}")
    try:
        return nvml_lib.load(path)
    except OSError as exc:
        if path:
            raise Unsupported(f"NVML library cannot be loaded: {path}: {exc}") from None
        raise Unsupported("NVML library not found") from None


def gather(cfg: Config, ctx: Any) -> NvmlSnapshot:
    """Read every GPU once through NVML (see the module docstring for error handling)."""
    t0 = time.monotonic()
    nv = _open(str(cfg["checks.gpu.nvml_library"] or ""))
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        if exc.value == NVML_ERROR_LIBRARY_NOT_FOUND:
            raise Unsupported("NVML library not found") from None
        if exc.value == NVML_ERROR_DRIVER_NOT_LOADED:
            raise Unsupported("NVIDIA driver not loaded") from None
        raise SlurmguardError(f"nvmlInit failed: {exc}") from None
    try:
        try:
            driver = nv.nvmlSystemGetDriverVersion()
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as exc:
            raise SlurmguardError(f"NVML: {exc}") from None
        gpus = [_one_gpu(nv, i) for i in range(count)]
    finally:
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass  # nothing to undo; the next nvmlInit starts afresh
    driver_ids = _driver_bus_ids(str(cfg["checks.gpu.driver_gpus_dir"] or ""))
    gpus = _name_lost_gpus(gpus, driver_ids, count)
    return NvmlSnapshot(driver_version=_text(driver), count=count, gpus=tuple(gpus),
                        driver_bus_ids=driver_ids, duration=time.monotonic() - t0)


def _name_lost_gpus(gpus: list[GpuInfo], driver_ids: tuple[str, ...] | None,
                    count: int) -> list[GpuInfo]:
    """Give lost GPUs (no handle, so no PCI info) their bus id from the driver's list.

    NVML numbers GPUs in PCI bus order, so when the driver lists exactly ``count`` GPUs the
    i-th entry is GPU i; otherwise the ids nobody else claimed are handed out in order when
    they match the lost GPUs one for one, and left unknown when they do not.
    """
    unknown = [g for g in gpus if not g.pci_bus_id]
    if not unknown or not driver_ids:
        return gpus
    if len(driver_ids) == count:
        return [g._replace(pci_bus_id=driver_ids[g.index]) if not g.pci_bus_id else g for g in gpus]
    claimed = {g.pci_bus_id for g in gpus if g.pci_bus_id}
    free = [b for b in driver_ids if b not in claimed]
    if len(free) != len(unknown):
        return gpus
    names = dict(zip((g.index for g in unknown), free, strict=True))
    return [g._replace(pci_bus_id=names[g.index]) if g.index in names else g for g in gpus]


def _one_gpu(nv: Any, index: int) -> GpuInfo:
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(index)
    except nv.NVMLError as exc:
        if exc.value in _LOST_ON_HANDLE:
            return GpuInfo(index=index, pci_bus_id="", lost=True, lost_reason=str(exc))
        return GpuInfo(index=index, pci_bus_id="", errors=(("handle", str(exc)),))

    values: dict[str, Any] = {}
    errors: list[tuple[str, str]] = []

    def read(name: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(handle, *args)
        except nv.NVMLError as exc:
            if exc.value in _SKIP:
                return None
            if exc.value in _LOST_ON_FIELD:
                raise _Lost(str(exc)) from None
            errors.append((name, str(exc)))
            return None

    try:
        values["name"] = _text(read("name", nv.nvmlDeviceGetName) or "")
        values["uuid"] = _text(read("uuid", nv.nvmlDeviceGetUUID) or "")
        pci = read("pci_info", nv.nvmlDeviceGetPciInfo_v3)
        values["pci_bus_id"] = normalize_bus_id(_text(pci.busId)) if pci is not None else ""
        values["temperature"] = read("temperature", nv.nvmlDeviceGetTemperature, nv.NVML_TEMPERATURE_GPU)
        values["temperature_slowdown"] = read("temperature_threshold", nv.nvmlDeviceGetTemperatureThreshold,
                                              nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
        values["temperature_shutdown"] = read("temperature_threshold", nv.nvmlDeviceGetTemperatureThreshold,
                                              nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)
        mode = read("ecc_mode", nv.nvmlDeviceGetEccMode)
        values["ecc_enabled"] = bool(mode[0]) if mode is not None else None
        for counter, key in ((nv.NVML_VOLATILE_ECC, "ecc_volatile_uncorrected"),
                             (nv.NVML_AGGREGATE_ECC, "ecc_aggregate_uncorrected")):
            values[key] = read("ecc", nv.nvmlDeviceGetTotalEccErrors,
                               nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counter)
        pending = read("retired_pages", nv.nvmlDeviceGetRetiredPagesPendingStatus)
        values["retired_pages_pending"] = bool(pending) if pending is not None else None
        rows = read("remapped_rows", nv.nvmlDeviceGetRemappedRows)
        if rows is not None:
            values["remap_correctable"], values["remap_uncorrectable"] = int(rows[0]), int(rows[1])
            values["remap_pending"], values["remap_failure"] = bool(rows[2]), bool(rows[3])
        values["clocks_event_reasons"] = _clock_reasons(nv, read)
        values["nvlink"] = _nvlink(nv, handle, read)
        values["pcie_width"] = read("pcie", nv.nvmlDeviceGetCurrPcieLinkWidth)
        values["pcie_max_width"] = read("pcie", nv.nvmlDeviceGetMaxPcieLinkWidth)
        values["pcie_gen"] = read("pcie", nv.nvmlDeviceGetCurrPcieLinkGeneration)
        values["pcie_max_gen"] = read("pcie", nv.nvmlDeviceGetMaxPcieLinkGeneration)
        pm = read("persistence_mode", nv.nvmlDeviceGetPersistenceMode)
        values["persistence_mode"] = bool(pm) if pm is not None else None
        usage = read("power", nv.nvmlDeviceGetPowerUsage)
        limit = read("power", nv.nvmlDeviceGetEnforcedPowerLimit)
        values["power_usage_w"] = usage / 1000.0 if usage is not None else None
        values["power_limit_w"] = limit / 1000.0 if limit is not None else None
    except _Lost as lost:
        values["lost"], values["lost_reason"] = True, lost.reason
    values.setdefault("pci_bus_id", "")
    return GpuInfo(index=index, errors=tuple(errors), **values)


def _clock_reasons(nv: Any, read: Callable[..., Any]) -> int | None:
    # The "event reasons" call replaced "throttle reasons" in driver 535 (same bits); an
    # older driver lacks the symbol (FUNCTION_NOT_FOUND -> None), so ask the old name then.
    reasons = None
    if hasattr(nv, "nvmlDeviceGetCurrentClocksEventReasons"):
        reasons = read("clocks_event_reasons", nv.nvmlDeviceGetCurrentClocksEventReasons)
    if reasons is None:
        reasons = read("clocks_event_reasons", nv.nvmlDeviceGetCurrentClocksThrottleReasons)
    return reasons


def _nvlink(nv: Any, handle: Any, read: Callable[..., Any]) -> tuple[tuple[int, bool], ...] | None:
    """(link, active) for every link that exists; None when the GPU has no NVLink at all.

    Links a GPU does not have answer INVALID_ARGUMENT (or NOT_SUPPORTED); an existing link
    that did not train answers success with state disabled.
    """
    links: list[tuple[int, bool]] = []
    for link in range(NVML_NVLINK_MAX_LINKS):
        try:
            state = nv.nvmlDeviceGetNvLinkState(handle, link)
        except nv.NVMLError as exc:
            if exc.value in (NVML_ERROR_INVALID_ARGUMENT, *_SKIP):
                continue
            if exc.value in _LOST_ON_FIELD:
                raise _Lost(str(exc)) from None
            read("nvlink", _raise, exc)  # records the error once, like any other field
            return None
        links.append((link, bool(state)))
    return tuple(links) or None


def _raise(_handle: Any, exc: Exception) -> None:
    raise exc


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
