"""The NVML C calls of the GPU gather, through ctypes: the hook path does not import pynvml.

pynvml (nvidia-ml-py) binds all of NVML: importing it costs a hook process 25-50 ms on every
job start, more than the whole NVML pass over 8 GPUs. This module binds exactly the calls
:func:`slurmguard.adapters.nvml.gather` makes, with NVML's symbol names, argument types and
struct layout (nvml.h: ``nvmlPciInfo_t``), and pynvml's calling convention (same function
names, outputs returned, a non-SUCCESS return raised as :class:`NVMLError` whose ``value`` is
the nvmlReturn_t and whose text is ``nvmlErrorString``), so the gather reads the same as
with pynvml. A symbol the library lacks (an older driver) raises FUNCTION_NOT_FOUND, as
pynvml does. The resident agent still uses pynvml for its event set (not on the hook path).
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import POINTER, byref, c_char, c_char_p, c_int, c_uint, c_ulonglong, c_void_p

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
_STR_LEN = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE, NVML_DEVICE_UUID_V2_BUFFER_SIZE
_DRIVER_LEN = 80  # NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE


class NVMLError(Exception):
    def __init__(self, value: int, text: str = "") -> None:
        super().__init__(value)
        self.value = value
        self.text = text

    def __str__(self) -> str:
        return self.text or f"NVML error {self.value}"


class PciInfo(ctypes.Structure):
    """nvmlPciInfo_t (nvml.h; the layout of nvmlDeviceGetPciInfo_v3)."""

    _fields_ = [("busIdLegacy", c_char * 16), ("domain", c_uint), ("bus", c_uint),
                ("device", c_uint), ("pciDeviceId", c_uint), ("pciSubSystemId", c_uint),
                ("busId", c_char * 32)]


_libs: dict[str, Lib] = {}
_lock = threading.Lock()


def load(path: str = "") -> Lib:
    """The library at ``path`` (default: ``libnvidia-ml.so.1`` through the dynamic linker),
    opened once per process. OSError when it cannot be loaded."""
    name = path or "libnvidia-ml.so.1"
    with _lock:
        lib = _libs.get(name)
        if lib is None:
            lib = _libs[name] = Lib(ctypes.CDLL(name))
        return lib


class Lib:
    """One loaded libnvidia-ml; methods named and behaving as pynvml's."""

    NVMLError = NVMLError
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = NVML_TEMPERATURE_THRESHOLD_SHUTDOWN
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = NVML_VOLATILE_ECC
    NVML_AGGREGATE_ECC = NVML_AGGREGATE_ECC

    def __init__(self, cdll: ctypes.CDLL) -> None:
        self._cdll = cdll
        self._fns: dict[str, object] = {}

    def _fn(self, name: str, *argtypes: object) -> object:
        fn = self._fns.get(name)
        if fn is None:
            try:
                fn = getattr(self._cdll, name)
            except AttributeError:
                raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND, "Function Not Found") from None
            fn.restype = c_int  # type: ignore[attr-defined]
            fn.argtypes = list(argtypes)  # type: ignore[attr-defined]
            self._fns[name] = fn
        return fn

    def _call(self, name: str, argtypes: tuple[object, ...], *args: object) -> None:
        rc = self._fn(name, *argtypes)(*args)  # type: ignore[operator]
        if rc != NVML_SUCCESS:
            raise NVMLError(rc, self._error_string(rc))

    def _error_string(self, rc: int) -> str:
        try:
            fn = self._fns.get("nvmlErrorString") or self._cdll.nvmlErrorString
            fn.restype, fn.argtypes = c_char_p, [c_int]
            self._fns["nvmlErrorString"] = fn
            text = fn(rc)
            return text.decode(errors="replace") if text else f"NVML error {rc}"
        except AttributeError:
            return f"NVML error {rc}"

    # -- library ------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self._call("nvmlInit_v2", ())

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown", ())

    def nvmlSystemGetDriverVersion(self) -> str:
        buf = ctypes.create_string_buffer(_DRIVER_LEN)
        self._call("nvmlSystemGetDriverVersion", (c_char_p, c_uint), buf, _DRIVER_LEN)
        return buf.value.decode(errors="replace")

    def nvmlDeviceGetCount(self) -> int:
        n = c_uint()
        self._call("nvmlDeviceGetCount_v2", (POINTER(c_uint),), byref(n))
        return n.value

    def nvmlDeviceGetHandleByIndex(self, index: int) -> c_void_p:
        h = c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", (c_uint, POINTER(c_void_p)), index, byref(h))
        return h

    # -- one device ---------------------------------------------------------------------------
    def _text(self, name: str, handle: c_void_p) -> str:
        buf = ctypes.create_string_buffer(_STR_LEN)
        self._call(name, (c_void_p, c_char_p, c_uint), handle, buf, _STR_LEN)
        return buf.value.decode(errors="replace")

    def _uint(self, name: str, handle: c_void_p, *ins: int, ctype: type = c_uint) -> int:
        out = ctype()
        self._call(name, (c_void_p, *([c_int] * len(ins)), POINTER(ctype)), handle, *ins, byref(out))
        return int(out.value)

    def nvmlDeviceGetName(self, handle: c_void_p) -> str:
        return self._text("nvmlDeviceGetName", handle)

    def nvmlDeviceGetUUID(self, handle: c_void_p) -> str:
        return self._text("nvmlDeviceGetUUID", handle)

    def nvmlDeviceGetPciInfo_v3(self, handle: c_void_p) -> PciInfo:
        info = PciInfo()
        self._call("nvmlDeviceGetPciInfo_v3", (c_void_p, POINTER(PciInfo)), handle, byref(info))
        return info

    def nvmlDeviceGetTemperature(self, handle: c_void_p, sensor: int) -> int:
        return self._uint("nvmlDeviceGetTemperature", handle, sensor)

    def nvmlDeviceGetTemperatureThreshold(self, handle: c_void_p, which: int) -> int:
        return self._uint("nvmlDeviceGetTemperatureThreshold", handle, which)

    def nvmlDeviceGetEccMode(self, handle: c_void_p) -> tuple[int, int]:
        cur, pend = c_int(), c_int()
        self._call("nvmlDeviceGetEccMode", (c_void_p, POINTER(c_int), POINTER(c_int)), handle,
                   byref(cur), byref(pend))
        return cur.value, pend.value

    def nvmlDeviceGetTotalEccErrors(self, handle: c_void_p, error_type: int, counter: int) -> int:
        return self._uint("nvmlDeviceGetTotalEccErrors", handle, error_type, counter,
                          ctype=c_ulonglong)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: c_void_p) -> int:
        return self._uint("nvmlDeviceGetRetiredPagesPendingStatus", handle, ctype=c_int)

    def nvmlDeviceGetRemappedRows(self, handle: c_void_p) -> tuple[int, int, int, int]:
        v = [c_uint() for _ in range(4)]
        self._call("nvmlDeviceGetRemappedRows", (c_void_p, *([POINTER(c_uint)] * 4)), handle,
                   *(byref(x) for x in v))
        return v[0].value, v[1].value, v[2].value, v[3].value

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: c_void_p) -> int:
        return self._uint("nvmlDeviceGetCurrentClocksEventReasons", handle, ctype=c_ulonglong)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: c_void_p) -> int:
        return self._uint("nvmlDeviceGetCurrentClocksThrottleReasons", handle, ctype=c_ulonglong)

    def nvmlDeviceGetNvLinkState(self, handle: c_void_p, link: int) -> int:
        out = c_int()
        self._call("nvmlDeviceGetNvLinkState", (c_void_p, c_uint, POINTER(c_int)), handle, link,
                   byref(out))
        return out.value

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: c_void_p) -> int:
        return self._uint("nvmlDeviceGetCurrPcieLinkWidth", handle)

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: c_void_p) -> int:
        return self._uint("nvmlDeviceGetMaxPcieLinkWidth", handle)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: c_void_p) -> int:
        return self._uint("nvmlDeviceGetCurrPcieLinkGeneration", handle)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: c_void_p) -> int:
        return self._uint("nvmlDeviceGetMaxPcieLinkGeneration", handle)

    def nvmlDeviceGetPersistenceMode(self, handle: c_void_p) -> int:
        return self._uint("nvmlDeviceGetPersistenceMode", handle, ctype=c_int)

    def nvmlDeviceGetPowerUsage(self, handle: c_void_p) -> int:
        return self._uint("nvmlDeviceGetPowerUsage", handle)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: c_void_p) -> int:
        return self._uint("nvmlDeviceGetEnforcedPowerLimit", handle)
