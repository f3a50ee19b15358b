#!/usr/bin/env python3
"""A stand-in ``nvidia-smi`` (no real one exists on a host without NVIDIA GPUs): what LBNL NHC's
``check_nvsmi_healthmon`` runs (NVIDIA_SMI_HEALTHMON names this file).

It asks the stand-in libnvidia-ml (tests/fakehw/libnvml.c, loaded from LD_LIBRARY_PATH with
the node's FAKE_NVML_CONFIG: the same state slurmguard's checks read and the fleet day injects
into) what the real tool asks at start, and exits with nvidia-smi's documented return value
(nvidia-smi(1), "RETURN VALUE"): 0 success; 9 the NVIDIA driver is not loaded; 12 the NVML
shared library could not be found; 15 a GPU has fallen off the bus or is otherwise
inaccessible; 255 another error. Like the real tool without arguments it prints one line per
GPU and exits 0 for a GPU that answers, whatever its ECC counters, NVLinks or clocks say: the
default table shows them, its return value does not.
"""

from __future__ import annotations

import ctypes
import sys

NVML_SUCCESS = 0
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
# NVML's return -> nvidia-smi's exit status (the codes it documents).
EXIT = {NVML_ERROR_DRIVER_NOT_LOADED: 9, NVML_ERROR_LIBRARY_NOT_FOUND: 12,
        NVML_ERROR_GPU_IS_LOST: 15}


def main() -> int:
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        print("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.")
        return 12
    rc = lib.nvmlInit_v2()
    if rc != NVML_SUCCESS:
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
        return EXIT.get(rc, 255)
    try:
        count = ctypes.c_uint(0)
        rc = lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
        if rc != NVML_SUCCESS:
            return EXIT.get(rc, 255)
        for i in range(count.value):
            dev = ctypes.c_void_p()
            rc = lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(dev))
            if rc == NVML_SUCCESS:
                name = ctypes.create_string_buffer(96)
                rc = lib.nvmlDeviceGetName(dev, name, 96)
            if rc != NVML_SUCCESS:
                print(f"Unable to determine the device handle for GPU{i}: "
                      + ("GPU is lost. Reboot the system to recover this GPU"
                         if rc == NVML_ERROR_GPU_IS_LOST else f"NVML error {rc}"))
                return EXIT.get(rc, 255)
            print(f"| {i}  {name.value.decode()} |")
        return 0
    finally:
        lib.nvmlShutdown()


if __name__ == "__main__":
    sys.exit(main())
