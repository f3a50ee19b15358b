"""The GPU checks against a real NVIDIA driver: run by hand on a GPU node, never in CI.

    python tests/bench/bench_nvml_real.py --out DIR

What it does, each part on its own (one failing part does not stop the others):

1. **ABI**: every NVML call the hook's gather makes, through our ctypes binding
   (slurmguard.adapters.nvml_lib) and through pynvml, side by side on every GPU: the same
   return code and the same value (temperature and power may move between the two reads).
2. **Record**: the driver's answers written as a stand-in NVML config (DIR/real-nvml.json, the
   format of tests/fakehw/nvml.py) and the gather's snapshot (DIR/real-snapshot.json), so the
   test suite can replay this driver through the stand-in (tests/test_nvml_recorded.py).
3. **Checks**: the eight GPU checks on the real snapshot, with checks.gpu.expected_count set to
   what NVML counts: every verdict should be pass on a healthy node.
4. **Timing**: cold nvmlInit, the gather (median of 30), and the whole healthcheck hook
   process with only the GPU checks (`python -m slurmguard healthcheck --dry-run --json`,
   median of 10).
5. **Breakdown**: nvmlInit/nvmlShutdown, each call with NVML held, and a gather while another
   nvmlInit reference is held (what the resident agent does).
6. **Agent**: the resident agent's NVML holder with Xid event registration, for 2 s.
7. **Burn-in probes**: gpu-inventory, gpu-clocks, gpu-matmul and gpu-membw at the quick level,
   and dcgm-diag (unsupported where dcgmi is absent).

Prints one line per finding and a summary; DIR/report.json holds everything.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

VARYING = {"temperature", "power_usage", "clocks_event_reasons"}  # may move between two reads
LINKS = 18  # NVML_NVLINK_MAX_LINKS


def _calls(nv: Any, h: Any) -> list[tuple[str, str, tuple[Any, ...]]]:
    """(label, function name, extra args) of every per-GPU call the gather makes."""
    out = [("name", "nvmlDeviceGetName", ()), ("uuid", "nvmlDeviceGetUUID", ()),
           ("pci_info", "nvmlDeviceGetPciInfo_v3", ()),
           ("temperature", "nvmlDeviceGetTemperature", (0,)),
           ("temperature_slowdown", "nvmlDeviceGetTemperatureThreshold", (1,)),
           ("temperature_shutdown", "nvmlDeviceGetTemperatureThreshold", (0,)),
           ("ecc_mode", "nvmlDeviceGetEccMode", ()),
           ("ecc_volatile_uncorrected", "nvmlDeviceGetTotalEccErrors", (1, 0)),
           ("ecc_aggregate_uncorrected", "nvmlDeviceGetTotalEccErrors", (1, 1)),
           ("retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus", ()),
           ("remapped_rows", "nvmlDeviceGetRemappedRows", ()),
           ("clocks_event_reasons", "nvmlDeviceGetCurrentClocksEventReasons", ()),
           ("clocks_throttle_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons", ()),
           ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", ()),
           ("pcie_max_width", "nvmlDeviceGetMaxPcieLinkWidth", ()),
           ("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration", ()),
           ("pcie_max_gen", "nvmlDeviceGetMaxPcieLinkGeneration", ()),
           ("persistence_mode", "nvmlDeviceGetPersistenceMode", ()),
           ("power_usage", "nvmlDeviceGetPowerUsage", ()),
           ("power_limit", "nvmlDeviceGetEnforcedPowerLimit", ())]
    out += [(f"nvlink{i}", "nvmlDeviceGetNvLinkState", (i,)) for i in range(LINKS)]
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if hasattr(value, "_fields_"):  # a ctypes struct (pci info)
        return {f[0]: _plain(getattr(value, f[0])) for f in value._fields_}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return repr(value)


def _ask(nv: Any, fn: str, h: Any, args: tuple[Any, ...]) -> dict[str, Any]:
    try:
        return {"ok": _plain(getattr(nv, fn)(h, *args))}
    except nv.NVMLError as exc:
        return {"err": int(exc.value), "text": str(exc)}
    except AttributeError as exc:
        return {"missing": str(exc)}


def part_abi(report: dict[str, Any]) -> None:
    import pynvml

    from slurmguard.adapters import nvml_lib

    ours = nvml_lib.load("")
    ours.nvmlInit()
    pynvml.nvmlInit()
    try:
        report["driver_version"] = _plain(pynvml.nvmlSystemGetDriverVersion())
        report["nvml_version"] = _plain(pynvml.nvmlSystemGetNVMLVersion())
        report["cuda_driver_version"] = int(pynvml.nvmlSystemGetCudaDriverVersion())
        assert _plain(ours.nvmlSystemGetDriverVersion()) == report["driver_version"]
        n = int(pynvml.nvmlDeviceGetCount())
        assert int(ours.nvmlDeviceGetCount()) == n
        report["count"] = n
        gpus, mismatches = [], []
        for i in range(n):
            hp = pynvml.nvmlDeviceGetHandleByIndex(i)
            ho = ours.nvmlDeviceGetHandleByIndex(i)
            rows = {}
            for label, fn, args in _calls(pynvml, hp):
                a, b = _ask(ours, fn, ho, args), _ask(pynvml, fn, hp, args)
                rows[label] = {"ours": a, "pynvml": b}
                same = a == b or (label in VARYING and a.keys() == b.keys() and "ok" in a)
                if label == "pci_info" and "ok" in a and "ok" in b:
                    same = all(a["ok"].get(k) == b["ok"].get(k)
                               for k in ("busId", "domain", "bus", "device", "pciDeviceId"))
                if not same:
                    mismatches.append(f"GPU {i} {label}: ours {a} pynvml {b}")
            extra = {}
            for label, fn in (("serial", "nvmlDeviceGetSerial"),
                              ("max_clock_sm", "nvmlDeviceGetMaxClockInfo"),
                              ("supported_events", "nvmlDeviceGetSupportedEventTypes"),
                              ("temperature_gpu_max", "nvmlDeviceGetTemperatureThreshold")):
                args: tuple[Any, ...] = (1,) if label == "max_clock_sm" else (
                    (3,) if label == "temperature_gpu_max" else ())
                extra[label] = _ask(pynvml, fn, hp, args)
            for label, kind in (("clock_graphics", 0), ("clock_sm", 1), ("clock_mem", 2),
                                ("clock_video", 3)):
                extra[label] = _ask(pynvml, "nvmlDeviceGetClockInfo", hp, (kind,))
                extra["max_" + label] = _ask(pynvml, "nvmlDeviceGetMaxClockInfo", hp, (kind,))
            for label, kind in (("ecc_volatile_corrected", (0, 0)), ("ecc_aggregate_corrected", (0, 1))):
                extra[label] = _ask(pynvml, "nvmlDeviceGetTotalEccErrors", hp, kind)
            gpus.append({"index": i, "calls": rows, "extra": extra})
        report["gpus"] = gpus
        report["abi_mismatches"] = mismatches
        print(f"ABI: {n} GPU(s), {len(_calls(pynvml, None)) * n} calls compared, "
              f"{len(mismatches)} mismatch(es)")
        for m in mismatches:
            print("  MISMATCH", m)
    finally:
        pynvml.nvmlShutdown()
        ours.nvmlShutdown()


def _val(row: dict[str, Any], default: Any = None) -> Any:
    return row["pynvml"].get("ok", default)


def standin_config(report: dict[str, Any]) -> dict[str, Any]:
    """The driver's answers in the stand-in's config format (tests/fakehw/nvml.py)."""
    gpus = []
    for g in report["gpus"]:
        c, x = g["calls"], g["extra"]
        not_supported = sorted({label for label, field in (
            ("retired_pages", "retired_pages_pending"), ("remapped_rows", "remapped_rows"),
            ("ecc_mode", "ecc_mode"), ("persistence_mode", "persistence_mode"),
            ("clocks_event_reasons", "clocks_event_reasons"), ("power", "power_usage"),
            ("temperature_threshold", "temperature_slowdown"))
            if c[field]["pynvml"].get("err") == 3})
        links = []
        for i in range(LINKS):
            row = c[f"nvlink{i}"]["pynvml"]
            if "ok" not in row:
                break
            links.append(bool(row["ok"]))
        if c["nvlink0"]["pynvml"].get("err") == 3:
            not_supported.append("nvlink")
        rows = _val(c["remapped_rows"], [0, 0, 0, 0])
        pci = _val(c["pci_info"], {})
        mode = _val(c["ecc_mode"], [1, 1])

        def clock(name: str, x: dict[str, Any] = x) -> int:
            return int(x[name].get("ok") or 0)

        gpus.append({
            "name": _val(c["name"], ""), "uuid": _val(c["uuid"], ""),
            "serial": x["serial"].get("ok", ""),
            "pci_bus_id": pci.get("busId", ""), "pci_device_id": pci.get("pciDeviceId", 0),
            "temperature": _val(c["temperature"], 30),
            "temperature_slowdown": _val(c["temperature_slowdown"], 0),
            "temperature_shutdown": _val(c["temperature_shutdown"], 0),
            "temperature_gpu_max": x["temperature_gpu_max"].get("ok", 0),
            "ecc_mode": bool(mode[0]),
            "ecc": {"volatile_corrected": x["ecc_volatile_corrected"].get("ok", 0),
                    "volatile_uncorrected": _val(c["ecc_volatile_uncorrected"], 0),
                    "aggregate_corrected": x["ecc_aggregate_corrected"].get("ok", 0),
                    "aggregate_uncorrected": _val(c["ecc_aggregate_uncorrected"], 0)},
            "retired_pages": {"pending": bool(_val(c["retired_pages_pending"], 0)),
                              "single_bit": 0, "double_bit": 0},
            "remapped_rows": {"correctable": rows[0], "uncorrectable": rows[1],
                              "pending": bool(rows[2]), "failure": bool(rows[3])},
            "clocks_event_reasons": _val(c["clocks_event_reasons"], 0),
            "clocks": {"graphics": clock("clock_graphics"), "sm": clock("clock_sm"),
                       "mem": clock("clock_mem"), "video": clock("clock_video")},
            "max_clocks": {"graphics": clock("max_clock_graphics"), "sm": clock("max_clock_sm"),
                           "mem": clock("max_clock_mem"), "video": clock("max_clock_video")},
            "nvlink": links,
            "pcie": {"width": _val(c["pcie_width"], 0), "max_width": _val(c["pcie_max_width"], 0),
                     "gen": _val(c["pcie_gen"], 0), "max_gen": _val(c["pcie_max_gen"], 0)},
            "persistence_mode": bool(_val(c["persistence_mode"], 0)),
            "power_usage_mw": _val(c["power_usage"], 0),
            "power_limit_mw": _val(c["power_limit"], 0),
            "lost": False, "off_bus": False, "not_supported": not_supported, "errors": {},
            "xid_events": [],
        })
    return {"driver_version": report["driver_version"], "nvml_version": report["nvml_version"],
            "cuda_driver_version": report["cuda_driver_version"], "init_error": None,
            "gpus": gpus}


def _cfg(tmp: Path, count: int, extra: str = "") -> Path:
    from slurmguard import checks

    others = sorted(n for n, c in checks.BY_NAME.items() if c.area != "gpu")
    path = tmp / "sg.toml"
    path.write_text(f"[checks]\ndisabled = {json.dumps(others)}\n\n[checks.gpu]\n"
                    f"expected_count = {count}\n{extra}")
    return path


def part_checks_and_timing(report: dict[str, Any], out: Path) -> None:
    from slurmguard import config
    from slurmguard.adapters import nvml
    from slurmguard.checks.base import CheckContext
    from slurmguard.checks.gpu import CHECKS
    from slurmguard.sources import GatherContext

    with tempfile.TemporaryDirectory() as tmp:
        cfg = config.load(str(_cfg(Path(tmp), int(report.get("count", 1)))), env={})
        ctx = GatherContext(node="gpu-node", hook="check", deadline=time.monotonic() + 120)
        t0 = time.perf_counter()
        snap = nvml.gather(cfg, ctx)
        report["first_gather_ms"] = (time.perf_counter() - t0) * 1000
        times = []
        for _ in range(30):
            t0 = time.perf_counter()
            snap = nvml.gather(cfg, ctx)
            times.append(time.perf_counter() - t0)
        report["gather_median_ms"] = statistics.median(times) * 1000
        report["gather_max_ms"] = max(times) * 1000
        report["snapshot"] = _plain_snapshot(snap)
        (out / "real-snapshot.json").write_text(json.dumps(report["snapshot"], indent=1))
        print(f"gather: first {report['first_gather_ms']:.1f} ms, median "
              f"{report['gather_median_ms']:.2f} ms (max {report['gather_max_ms']:.2f}, n=30), "
              f"{snap.count} GPU(s), driver {snap.driver_version}")
        verdicts = {}
        for c in CHECKS:
            r = c.run(CheckContext(params=cfg.section("checks.gpu"), sources={"nvml": snap}))
            verdicts[c.name] = {"health": r.health.value, "reason": r.reason}
            print(f"check {c.name}: {r.health.value} {r.reason}")
        report["checks"] = verdicts

        env = {**os.environ, "SLURMGUARD_CONFIG": str(_cfg(Path(tmp), int(snap.count))),
               "PYTHONPATH": str(ROOT)}
        hook_times, last = [], None
        for _ in range(10):
            t0 = time.perf_counter()
            last = subprocess.run([sys.executable, "-m", "slurmguard", "healthcheck", "--dry-run",
                                   "--json"], env=env, capture_output=True, text=True, timeout=120)
            hook_times.append(time.perf_counter() - t0)
        assert last is not None
        report["hook_median_ms"] = statistics.median(hook_times) * 1000
        report["hook_rc"] = last.returncode
        report["hook_stdout"] = last.stdout[-4000:]
        report["hook_stderr"] = last.stderr[-2000:]
        print(f"healthcheck hook process (GPU checks only, --dry-run): median "
              f"{report['hook_median_ms']:.0f} ms (n=10), rc {last.returncode}")
        print("  stdout:", last.stdout.strip()[-600:])
        if last.stderr.strip():
            print("  stderr:", last.stderr.strip()[-600:])


def _plain_snapshot(snap: Any) -> dict[str, Any]:
    return {"driver_version": snap.driver_version, "count": snap.count,
            "driver_bus_ids": list(snap.driver_bus_ids) if snap.driver_bus_ids is not None else None,
            "gpus": [{k: _plain(v) for k, v in g._asdict().items()} for g in snap.gpus]}


def part_breakdown(report: dict[str, Any]) -> None:
    """Where a gather's time goes: nvmlInit/nvmlShutdown, each call, and a gather while
    another nvmlInit reference is held (the resident agent's case)."""
    from slurmguard import config
    from slurmguard.adapters import nvml, nvml_lib
    from slurmguard.sources import GatherContext

    nv = nvml_lib.load("")
    inits, shuts = [], []
    for _ in range(10):
        t0 = time.perf_counter()
        nv.nvmlInit()
        t1 = time.perf_counter()
        nv.nvmlShutdown()
        inits.append(t1 - t0)
        shuts.append(time.perf_counter() - t1)
    report["init_median_ms"] = statistics.median(inits) * 1000
    report["shutdown_median_ms"] = statistics.median(shuts) * 1000
    print(f"nvmlInit median {report['init_median_ms']:.2f} ms, nvmlShutdown median "
          f"{report['shutdown_median_ms']:.2f} ms (n=10)")
    nv.nvmlInit()  # held from here: what the agent does
    try:
        h = nv.nvmlDeviceGetHandleByIndex(0)
        per_call = {}
        for label, fn, args in _calls(nv, h):
            times = []
            for _ in range(20):
                t0 = time.perf_counter()
                _ask(nv, fn, h, args)
                times.append(time.perf_counter() - t0)
            per_call[label] = statistics.median(times) * 1000
        report["per_call_ms"] = per_call
        top = sorted(per_call.items(), key=lambda kv: -kv[1])[:6]
        print(f"per-call medians, GPU 0 (ms), sum {sum(per_call.values()):.2f}: "
              + ", ".join(f"{k} {v:.3f}" for k, v in top))
        with tempfile.TemporaryDirectory() as tmp:
            cfg = config.load(str(_cfg(Path(tmp), int(report.get("count", 1)))), env={})
            ctx = GatherContext(node="gpu-node", hook="check", deadline=time.monotonic() + 120)
            times = []
            for _ in range(30):
                t0 = time.perf_counter()
                nvml.gather(cfg, ctx)
                times.append(time.perf_counter() - t0)
        report["gather_held_median_ms"] = statistics.median(times) * 1000
        print(f"gather while another nvmlInit is held (the agent): median "
              f"{report['gather_held_median_ms']:.2f} ms (n=30)")
    finally:
        nv.nvmlShutdown()


def part_agent(report: dict[str, Any]) -> None:
    from slurmguard import config
    from slurmguard.node.agent import NvmlHolder

    cfg = config.load(None, env={})
    seen: list[tuple[int, int]] = []
    holder = NvmlHolder(cfg, lambda i, x: seen.append((i, x)))
    holder.start()
    time.sleep(2.0)
    status = holder.status
    holder.stop()
    report["agent_status"] = status
    report["agent_events"] = seen
    print(f"agent NVML holder: {status}; events seen in 2 s: {seen}")


def part_burnin(report: dict[str, Any]) -> None:
    from slurmguard import config
    from slurmguard.burnin import measure

    cfg = config.load(None, env={})
    p = measure.params(cfg, "quick", int(report.get("count", 1)))
    out = {}
    for name in ("gpu-inventory", "gpu-clocks", "gpu-matmul", "gpu-membw", "dcgm-diag"):
        m = measure.Measurement(name, "")
        t0 = time.perf_counter()
        values = measure.run(m, p, timeout=120)
        took = time.perf_counter() - t0
        out[name] = {"seconds": took, "values": [dataclasses.asdict(v) for v in values]}
        for v in values:
            print(f"burn-in {name}: {v.status} {v.metric} {v.value} {v.unit} "
                  f"{v.reason} {json.dumps(v.details)[:300]} ({took:.1f} s)")
    report["burnin"] = out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".", help="directory for report.json and the recordings")
    ap.add_argument("--skip", action="append", default=[], metavar="PART",
                    help="leave out a part (abi, record, checks, breakdown, agent, burnin)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"failed_parts": []}
    for name, part in (("abi", lambda: part_abi(report)),
                       ("record", lambda: (out / "real-nvml.json").write_text(
                           json.dumps(standin_config(report), indent=1))),
                       ("checks", lambda: part_checks_and_timing(report, out)),
                       ("breakdown", lambda: part_breakdown(report)),
                       ("agent", lambda: part_agent(report)),
                       ("burnin", lambda: part_burnin(report))):
        if name in args.skip:
            continue
        try:
            part()
        except Exception:  # noqa: BLE001  (report it and go on with the next part)
            report["failed_parts"].append(name)
            print(f"PART {name} FAILED:\n{traceback.format_exc()}")
    (out / "report.json").write_text(json.dumps(report, indent=1, default=repr))
    print(f"summary: failed parts {report['failed_parts'] or 'none'}; "
          f"ABI mismatches {len(report.get('abi_mismatches', []))}")
    return 1 if report["failed_parts"] or report.get("abi_mismatches") else 0


if __name__ == "__main__":
    sys.exit(main())
