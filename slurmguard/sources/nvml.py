"""What one NVML pass delivers: the GPU checks read it, ``slurmguard.adapters.nvml`` fills it.

Plain NamedTuples (cheap on the hook path), below both the adapter and the pure checks so
that neither imports the other (tests/test_import_graph.py).
"""

from typing import NamedTuple


class GpuInfo(NamedTuple):
    """One GPU as NVML reports it. ``None``: the field is not supported (or failed, see errors)."""

    index: int
    pci_bus_id: str  # "0000:3A:00.0" (4-digit domain, as in lspci); "" when unknown
    name: str = ""
    uuid: str = ""
    lost: bool = False
    lost_reason: str = ""  # NVML's error string for the lost GPU
    temperature: int | None = None  # degrees C, NVML_TEMPERATURE_GPU
    temperature_slowdown: int | None = None  # NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
    temperature_shutdown: int | None = None  # NVML_TEMPERATURE_THRESHOLD_SHUTDOWN
    ecc_enabled: bool | None = None  # current ECC mode
    ecc_volatile_uncorrected: int | None = None  # since the last driver load / GPU reset
    ecc_aggregate_uncorrected: int | None = None  # lifetime (infoROM)
    retired_pages_pending: bool | None = None  # pre-Ampere dynamic page retirement
    remap_correctable: int | None = None  # rows remapped for correctable errors (Ampere+)
    remap_uncorrectable: int | None = None
    remap_pending: bool | None = None  # a remap waits for a GPU reset
    remap_failure: bool | None = None  # a remap failed: no spare rows left
    clocks_event_reasons: int | None = None  # nvmlClocksEventReason* bitmask
    nvlink: tuple[tuple[int, bool], ...] | None = None  # (link, active) for links that exist
    pcie_width: int | None = None
    pcie_max_width: int | None = None
    pcie_gen: int | None = None
    pcie_max_gen: int | None = None
    persistence_mode: bool | None = None
    power_usage_w: float | None = None
    power_limit_w: float | None = None
    errors: tuple[tuple[str, str], ...] = ()  # (field, NVML error) other than NOT_SUPPORTED

    @property
    def label(self) -> str:
        """``GPU 2 (0000:3A:00.0)``: how reasons name a GPU."""
        return f"GPU {self.index} ({self.pci_bus_id or 'bus id unknown'})"

    def error_of(self, *fields: str) -> str | None:
        """The recorded error of the first of ``fields`` that failed, or None."""
        for f, msg in self.errors:
            if f in fields:
                return f"{f}: {msg}"
        return None


class NvmlSnapshot(NamedTuple):
    """All GPUs of the node at one instant, plus what the driver lists on the PCI side."""

    driver_version: str
    count: int  # nvmlDeviceGetCount: GPUs the driver enumerated
    gpus: tuple[GpuInfo, ...]
    driver_bus_ids: tuple[str, ...] | None = None  # /proc/driver/nvidia/gpus; None: unreadable
    duration: float = 0.0


def normalize_bus_id(bus_id: str) -> str:
    """``00000000:3a:00.0`` -> ``0000:3A:00.0`` (NVML's 8-digit domain to lspci's 4 digits)."""
    bus_id = bus_id.strip()
    dom, sep, rest = bus_id.partition(":")
    if not sep:
        return bus_id.upper()
    try:
        return f"{int(dom, 16) & 0xFFFF:04X}:{rest.upper()}"
    except ValueError:
        return bus_id.upper()
