"""Build and configure the stand-in libnvidia-ml.so.1 (tests/fakehw/libnvml.c).

    libdir = build_fake_nvml(tmp_dir)            # dir holding libnvidia-ml.so.1
    cfg = default_config()                       # 8 x H100 HGX, all healthy
    cfg["gpus"][2]["off_bus"] = True             # inject a fault
    write_config(path, cfg)
    env = nvml_env(libdir, path)                 # LD_LIBRARY_PATH + FAKE_NVML_CONFIG

The JSON format is documented in docs/testing.md ("Stand-in NVML").
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCES = (HERE / "libnvml.c", HERE / "nvml_state.h", HERE / "minijson.h")
LIBNAME = "libnvidia-ml.so.1"

# The H100 HGX baseboard's GPU bus ids, in NVML index order (PCI order). The kmsg/XID fixture
# of the host checks uses the same ones, so a fault can be named consistently across sources.
H100_BUS_IDS = (
    "00000000:18:00.0",
    "00000000:2A:00.0",
    "00000000:3A:00.0",
    "00000000:5D:00.0",
    "00000000:9A:00.0",
    "00000000:AB:00.0",
    "00000000:BA:00.0",
    "00000000:DB:00.0",
)

# nvmlClocksEventReason* bits, for tests that inject throttling.
GPU_IDLE = 0x1
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE_SLOWDOWN = 0x80


def source_hash() -> str:
    h = hashlib.sha256()
    for src in SOURCES:
        h.update(src.read_bytes())
    return h.hexdigest()[:16]


def build_fake_nvml(dest_dir: str | os.PathLike[str] | None = None) -> Path:
    """Compile the stand-in library (once per source hash) and return the dir holding it.

    The result lives in ``dest_dir/<hash>/libnvidia-ml.so.1``, so a rebuilt source never
    reuses a stale library, and concurrent builders never see a half-written file (the
    library is compiled under a temporary name and renamed into place).
    """
    base = Path(dest_dir) if dest_dir else Path(tempfile.gettempdir()) / f"slurmguard-fakenvml-{os.getuid()}"
    out_dir = base / source_hash()
    lib = out_dir / LIBNAME
    if lib.exists():
        return out_dir
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise RuntimeError("no C compiler (gcc) to build the stand-in libnvidia-ml.so.1")
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{LIBNAME}.{os.getpid()}"
    argv = [gcc, "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-fvisibility=hidden",
            f"-Wl,-soname,{LIBNAME}", "-o", str(tmp), str(HERE / "libnvml.c"), "-lpthread"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"building {LIBNAME} failed:\n{proc.stderr}")
    os.replace(tmp, lib)
    (out_dir / "build.log").write_text(proc.stderr)  # warnings, checked by a test
    return out_dir


def default_gpu(index: int, bus_id: str) -> dict[str, Any]:
    """One healthy, idle H100 SXM5 as the real driver reports it (values from nvidia-smi -q)."""
    return {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": f"GPU-{0x5A6E0000 + index:08x}-1c2b-4e3d-9f80-{index:012x}",
        "serial": f"16509230{index:05d}",
        "pci_bus_id": bus_id,
        "pci_device_id": 0x233010DE,
        "temperature": 34 + index % 3,
        "temperature_slowdown": 89,
        "temperature_shutdown": 92,
        "temperature_gpu_max": 87,
        "ecc_mode": True,
        "ecc": {"volatile_corrected": 0, "volatile_uncorrected": 0,
                "aggregate_corrected": 0, "aggregate_uncorrected": 0},
        # Hopper replaced page retirement with row remapping: the driver answers NOT_SUPPORTED.
        "retired_pages": {"pending": False, "single_bit": 0, "double_bit": 0},
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
        "clocks_event_reasons": GPU_IDLE,
        # MHz; the stand-in models no load, so the current clocks default to the maxima.
        "clocks": {"graphics": 1980, "sm": 1980, "mem": 2619, "video": 1545},
        "max_clocks": {"graphics": 1980, "sm": 1980, "mem": 2619, "video": 1545},
        "nvlink": [True] * 18,
        "pcie": {"width": 16, "max_width": 16, "gen": 5, "max_gen": 5},
        "persistence_mode": True,
        "power_usage_mw": 69000 + 500 * index,
        "power_limit_mw": 700000,
        "lost": False,
        "off_bus": False,
        "not_supported": ["retired_pages"],
        "errors": {},
        "xid_events": [],
    }


def default_config(n_gpus: int = 8) -> dict[str, Any]:
    """An HGX H100 node with ``n_gpus`` healthy GPUs (bus ids beyond 8 are made up)."""
    bus_ids = list(H100_BUS_IDS) + [f"00000000:{0xE0 + i:02X}:00.0" for i in range(max(0, n_gpus - 8))]
    return {
        "driver_version": "550.90.07",
        "nvml_version": "12.550.90.07",
        "cuda_driver_version": 12040,
        "init_error": None,
        "gpus": [default_gpu(i, bus_ids[i]) for i in range(n_gpus)],
    }


def write_config(path: str | os.PathLike[str], cfg: dict[str, Any]) -> Path:
    """Write a config atomically (the library re-reads it at every nvmlInit)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cfg, indent=1))
    os.replace(tmp, path)
    return path


def with_fault(cfg: dict[str, Any], gpu: int, **changes: Any) -> dict[str, Any]:
    """A copy of cfg with GPU ``gpu``'s keys changed (nested dicts merged one level deep)."""
    new = copy.deepcopy(cfg)
    entry = new["gpus"][gpu]
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(entry.get(key), dict):
            entry[key].update(value)
        else:
            entry[key] = value
    return new


def nvml_env(libdir: str | os.PathLike[str], config: str | os.PathLike[str],
             base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment in which pynvml (``CDLL("libnvidia-ml.so.1")``) loads the stand-in."""
    env = dict(os.environ if base is None else base)
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = str(libdir) + (os.pathsep + old if old else "")
    env["FAKE_NVML_CONFIG"] = str(config)
    return env
