"""The stand-in libnvidia-ml.so.1, seen through the real pynvml in a fresh process.

pynvml loads the library with ``CDLL("libnvidia-ml.so.1")``, which the dynamic linker
resolves through LD_LIBRARY_PATH read at process start, so every test here runs a child
Python: exactly the path a hook takes on a GPU node.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from fakehw.nvml import (
    H100_BUS_IDS,
    HW_SLOWDOWN,
    LIBNAME,
    build_fake_nvml,
    default_config,
    nvml_env,
    with_fault,
    write_config,
)
from support.helpers import require

PRELUDE = """
import json, sys, time
import pynvml as n
out = {}
def err(fn, *a):
    try:
        return fn(*a)
    except n.NVMLError as e:
        return {"error": e.value, "text": str(e)}
def s(v):  # pynvml's structures give str or bytes depending on its version
    return v.decode() if isinstance(v, bytes) else v
"""


@pytest.fixture(scope="session")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(shutil.which("gcc") is not None, "gcc is needed to build the stand-in NVML")
    return build_fake_nvml(tmp_path_factory.mktemp("fakenvml"))


def run_py(libdir: Path, config: Path, body: str, **env: str) -> dict[str, Any]:
    code = PRELUDE + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    proc = subprocess.run([sys.executable, "-c", code], env=nvml_env(libdir, config, None) | env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_builds_without_warnings_and_exports_only_nvml(libdir: Path) -> None:
    assert (libdir / LIBNAME).is_file()
    assert (libdir / "build.log").read_text() == ""
    nm = shutil.which("nm")
    require(nm is not None, "nm (binutils) lists the exported symbols")
    syms = subprocess.run([nm, "-D", "--defined-only", str(libdir / LIBNAME)],
                          capture_output=True, text=True, check=True).stdout.split()
    exported = {s for s in syms if s.startswith("nvml")}
    assert {"nvmlInit_v2", "nvmlInitWithFlags", "nvmlDeviceGetHandleByIndex_v2",
            "nvmlDeviceGetPciInfo_v3", "nvmlEventSetWait_v2", "nvmlErrorString"} <= exported
    assert not any(s.startswith("j_") for s in syms)  # the JSON reader stays private


def test_build_is_cached_by_source_hash(libdir: Path) -> None:
    again = build_fake_nvml(libdir.parent)
    assert again == libdir
    assert (again / LIBNAME).stat().st_mtime == (libdir / LIBNAME).stat().st_mtime


def test_real_pynvml_sees_eight_h100(libdir: Path, tmp_path: Path) -> None:
    cfg = with_fault(default_config(), 3, temperature=61, ecc={"aggregate_uncorrected": 2},
                     remapped_rows={"correctable": 4}, pcie={"gen": 4})
    path = write_config(tmp_path / "n.json", cfg)
    out = run_py(libdir, path, """
        n.nvmlInit()
        out["driver"] = n.nvmlSystemGetDriverVersion()
        out["count"] = n.nvmlDeviceGetCount()
        gpus = []
        for i in range(out["count"]):
            h = n.nvmlDeviceGetHandleByIndex(i)
            pci = n.nvmlDeviceGetPciInfo(h)
            links = []
            for link in range(n.NVML_NVLINK_MAX_LINKS):
                try:
                    links.append(n.nvmlDeviceGetNvLinkState(h, link))
                except n.NVMLError_InvalidArgument:
                    pass
            gpus.append({
                "name": n.nvmlDeviceGetName(h), "uuid": n.nvmlDeviceGetUUID(h),
                "bus": s(pci.busId), "legacy": s(pci.busIdLegacy),
                "bus_no": pci.bus, "devid": pci.pciDeviceId,
                "temp": n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
                "slowdown": n.nvmlDeviceGetTemperatureThreshold(h, n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
                "ecc_mode": n.nvmlDeviceGetEccMode(h),
                "agg": n.nvmlDeviceGetTotalEccErrors(h, 1, n.NVML_AGGREGATE_ECC),
                "rows": n.nvmlDeviceGetRemappedRows(h),
                "reasons": n.nvmlDeviceGetCurrentClocksEventReasons(h),
                "links": links,
                "pcie": [n.nvmlDeviceGetCurrPcieLinkWidth(h), n.nvmlDeviceGetMaxPcieLinkWidth(h),
                         n.nvmlDeviceGetCurrPcieLinkGeneration(h), n.nvmlDeviceGetMaxPcieLinkGeneration(h)],
                "pm": n.nvmlDeviceGetPersistenceMode(h),
                "power": [n.nvmlDeviceGetPowerUsage(h), n.nvmlDeviceGetEnforcedPowerLimit(h)],
                "retired": err(n.nvmlDeviceGetRetiredPagesPendingStatus, h),
                "index": n.nvmlDeviceGetIndex(h),
            })
        out["gpus"] = gpus
        out["by_bus"] = n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByPciBusId("0000:5D:00.0"))
        out["by_uuid"] = n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByUUID(gpus[6]["uuid"]))
        out["bad_index"] = err(n.nvmlDeviceGetHandleByIndex, 8)
        n.nvmlShutdown()
        out["after_shutdown"] = err(n.nvmlDeviceGetCount)
    """)
    assert out["driver"] == "550.90.07" and out["count"] == 8
    g = out["gpus"]
    assert [x["bus"] for x in g] == list(H100_BUS_IDS)
    assert g[2]["legacy"] == "0000:3A:00.0" and g[2]["bus_no"] == 0x3A
    assert all(x["name"] == "NVIDIA H100 80GB HBM3" and x["devid"] == 0x233010DE for x in g)
    assert len({x["uuid"] for x in g}) == 8 and all(x["uuid"].startswith("GPU-") for x in g)
    assert [x["index"] for x in g] == list(range(8))
    assert g[3]["temp"] == 61 and g[0]["temp"] == 34 and g[3]["slowdown"] == 89
    assert g[3]["agg"] == 2 and g[0]["agg"] == 0 and g[0]["ecc_mode"] == [1, 1]
    assert g[3]["rows"] == [4, 0, 0, 0]
    assert g[0]["reasons"] == 1  # GPU idle, as a real idle H100 reports
    assert all(x["links"] == [1] * 18 for x in g)
    assert g[3]["pcie"] == [16, 16, 4, 5] and g[0]["pcie"] == [16, 16, 5, 5]
    assert g[0]["pm"] == 1 and g[0]["power"] == [69000, 700000]
    assert g[0]["retired"]["error"] == 3  # Hopper: page retirement is NOT_SUPPORTED
    assert out["by_bus"] == 3 and out["by_uuid"] == 6
    assert out["bad_index"]["error"] == 2
    assert out["after_shutdown"]["error"] == 1  # NVML_ERROR_UNINITIALIZED


def test_faults_lost_off_bus_not_supported_and_errors(libdir: Path, tmp_path: Path) -> None:
    cfg = default_config()
    cfg = with_fault(cfg, 1, lost=True)
    cfg = with_fault(cfg, 2, off_bus=True)
    cfg = with_fault(cfg, 4, not_supported=["nvlink", "temperature"],
                     errors={"remapped_rows": "UNKNOWN", "pcie": 4},
                     clocks_event_reasons=HW_SLOWDOWN, nvlink=[True, False, True])
    path = write_config(tmp_path / "n.json", cfg)
    out = run_py(libdir, path, """
        n.nvmlInit()
        out["count"] = n.nvmlDeviceGetCount()
        out["lost"] = err(n.nvmlDeviceGetHandleByIndex, 1)
        out["lost_by_bus"] = err(n.nvmlDeviceGetHandleByPciBusId, "00000000:2A:00.0")
        out["gone_by_bus"] = err(n.nvmlDeviceGetHandleByPciBusId, "00000000:3A:00.0")
        out["buses"] = [s(n.nvmlDeviceGetPciInfo(n.nvmlDeviceGetHandleByIndex(i)).busId)
                        for i in (0, 2, 3, 4, 5, 6)]
        h = n.nvmlDeviceGetHandleByPciBusId("00000000:9A:00.0")  # config entry 4
        out["index"] = n.nvmlDeviceGetIndex(h)
        out["temp"] = err(n.nvmlDeviceGetTemperature, h, 0)
        out["link"] = err(n.nvmlDeviceGetNvLinkState, h, 0)
        out["rows"] = err(n.nvmlDeviceGetRemappedRows, h)
        out["width"] = err(n.nvmlDeviceGetCurrPcieLinkWidth, h)
        out["name"] = n.nvmlDeviceGetName(h)
        out["strings"] = [n.nvmlErrorString(c) for c in (0, 3, 9, 15, 999)]
        n.nvmlShutdown()
    """)
    assert out["count"] == 7  # fallen off the bus: not enumerated
    assert out["lost"]["error"] == 15 and out["lost"]["text"] == "GPU is lost"
    assert out["lost_by_bus"]["error"] == 15 and out["gone_by_bus"]["error"] == 6
    # the driver numbers what it found in PCI order: GPU 2 is now 0000:5D:00.0
    assert out["buses"] == ["00000000:18:00.0", "00000000:5D:00.0", "00000000:9A:00.0",
                            "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"]
    assert out["index"] == 3  # config entry 4, one GPU before it gone
    assert out["temp"]["error"] == 3 and out["link"]["error"] == 3
    assert out["rows"]["error"] == 999 and out["width"]["error"] == 4
    assert out["name"] == "NVIDIA H100 80GB HBM3"
    assert out["strings"] == ["Success", "Not Supported", "Driver Not Loaded", "GPU is lost",
                              "Unknown Error"]


@pytest.mark.parametrize(("setup", "code"), [
    ("init_error", 9), ("init_error_prefixed", 9), ("no_env", 9), ("missing_file", 9),
    ("bad_json", 999), ("not_object", 999),
])
def test_init_failures(libdir: Path, tmp_path: Path, setup: str, code: int) -> None:
    path = tmp_path / "n.json"
    env: dict[str, str] = {}
    if setup == "init_error":
        write_config(path, {**default_config(), "init_error": "DRIVER_NOT_LOADED"})
    elif setup == "init_error_prefixed":
        write_config(path, {**default_config(), "init_error": "NVML_ERROR_DRIVER_NOT_LOADED"})
    elif setup == "no_env":
        env["FAKE_NVML_CONFIG"] = ""
    elif setup == "bad_json":
        path.write_text('{"gpus": [')
    elif setup == "not_object":
        path.write_text("[]")
    out = run_py(libdir, path, 'out["init"] = err(n.nvmlInit)', **env)
    assert out["init"]["error"] == code


def test_directory_per_node_and_reread_at_every_init(libdir: Path, tmp_path: Path) -> None:
    d = tmp_path / "cluster"
    write_config(d / "default.json", default_config(8))
    write_config(d / "n2.json", default_config(4))
    body = """
        n.nvmlInit(); out["count"] = n.nvmlDeviceGetCount(); n.nvmlShutdown()
    """
    assert run_py(libdir, d, body, SLURMD_NODENAME="n1")["count"] == 8
    assert run_py(libdir, d, body, SLURMD_NODENAME="n2")["count"] == 4
    assert run_py(libdir, d, body, SLURMD_NODENAME="../n2")["count"] == 8

    path = write_config(tmp_path / "n.json", default_config())
    out = run_py(libdir, path, f"""
        import fakehw_nvml_rewrite as rw
        n.nvmlInit(); out["before"] = n.nvmlDeviceGetCount(); n.nvmlShutdown()
        rw.rewrite({str(path)!r})
        n.nvmlInit(); out["after"] = n.nvmlDeviceGetCount()
        out["lost"] = err(n.nvmlDeviceGetHandleByIndex, 0); n.nvmlShutdown()
    """, PYTHONPATH=str(_rewriter(tmp_path)))
    assert out == {"before": 8, "after": 6, "lost": {"error": 15, "text": "GPU is lost"}}


def _rewriter(tmp_path: Path) -> Path:
    """A module the child imports to rewrite its config mid-run (injecting faults)."""
    d = tmp_path / "mods"
    d.mkdir()
    tests_dir = Path(__file__).resolve().parent
    (d / "fakehw_nvml_rewrite.py").write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tests_dir)!r})
        from fakehw.nvml import default_config, with_fault, write_config
        def rewrite(path):
            cfg = with_fault(default_config(6), 0, lost=True)
            write_config(path, cfg)
    """))
    return d


def test_xid_events(libdir: Path, tmp_path: Path) -> None:
    cfg = with_fault(default_config(), 2, xid_events=[79, 48])
    path = write_config(tmp_path / "n.json", cfg)
    out = run_py(libdir, path, """
        n.nvmlInit()
        es = n.nvmlEventSetCreate()
        events = []
        for i in range(n.nvmlDeviceGetCount()):
            h = n.nvmlDeviceGetHandleByIndex(i)
            assert n.nvmlDeviceGetSupportedEventTypes(h) & n.nvmlEventTypeXidCriticalError
            n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, es)
        for _ in range(2):
            d = n.nvmlEventSetWait_v2(es, 100)
            events.append([d.eventType, d.eventData, n.nvmlDeviceGetIndex(d.device),
                           d.gpuInstanceId])
        t0 = time.monotonic()
        out["then"] = err(n.nvmlEventSetWait_v2, es, 50)
        out["waited"] = time.monotonic() - t0
        out["events"] = events
        out["bad_type"] = err(n.nvmlDeviceRegisterEvents, n.nvmlDeviceGetHandleByIndex(0),
                              n.nvmlEventTypePState, es)
        n.nvmlEventSetFree(es)
        n.nvmlShutdown()
    """)
    assert out["events"] == [[8, 79, 2, 0xFFFFFFFF], [8, 48, 2, 0xFFFFFFFF]]
    assert out["then"]["error"] == 10  # NVML_ERROR_TIMEOUT after blocking for the timeout
    assert out["waited"] >= 0.045
    assert out["bad_type"]["error"] == 3
