"""The measurement registry and the runner (each measurement a killable child process).

A site benchmark is added the way site checks are: ``burnin.site_modules = ["mysite.bench"]``
where the module exports ``MEASUREMENTS = {"my-bench": "mysite.bench:run"}``; ``run(params)``
returns a list of value dicts (``metric``, ``value``, ``unit``, ``status``, ``reason``,
``higher_is_better``, ``details``) and raises ``slurmguard.errors.Unsupported`` where it
cannot run. It runs in a child process with the same time limit as the built-in ones.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slurmguard import sitemod
from slurmguard.errors import CommandError, ConfigError
from slurmguard.sources.burnin import BurninValue

if TYPE_CHECKING:
    from slurmguard.config import Config


@dataclass(frozen=True)
class Measurement:
    name: str
    doc: str
    target: str = ""  # "module:function" for site measurements ("" = built in)


BUILTIN: tuple[Measurement, ...] = (
    Measurement("gpu-clocks", "SM clock (MHz) and throttle reasons through NVML, under load"),
    Measurement("gpu-matmul", "fp16 matmul TFLOP/s per GPU (torch), the slowest GPU's"),
    Measurement("gpu-membw", "GPU memory copy GB/s per GPU (torch), the slowest GPU's"),
    Measurement("dcgm-diag", "dcgmi diag -r N -j: any failed test on any GPU is a failure"),
    Measurement("nccl-allreduce", "nccl-tests all_reduce_perf: peak bus bandwidth GB/s"),
    Measurement("host-cpu", "float64 matmul GFLOP/s (numpy), best of burnin.trials"),
    Measurement("host-membw", "memory copy GB/s (numpy), best of burnin.trials"),
    Measurement("disk-io", "write+fsync and uncached read MB/s on burnin.scratch"),
)


def registry(cfg: Config) -> dict[str, Measurement]:
    key = "burnin.site_modules"
    out = {m.name: m for m in BUILTIN}
    for mod_name, mod in sitemod.load(key, cfg[key]):
        for name, target in getattr(mod, "MEASUREMENTS", {}).items():
            sitemod.add(key, mod_name, "measurement", out, name,
                        Measurement(name, f"site measurement ({target})", target))
    return out


def select(cfg: Config) -> list[Measurement]:
    reg = registry(cfg)
    names = list(cfg["burnin.measurements"])
    if "all" in names:
        return list(reg.values())
    out = []
    for n in names:
        if n not in reg:
            raise ConfigError(f"burnin.measurements: unknown measurement {n!r} "
                              f"(known: {', '.join(reg)})")
        out.append(reg[n])
    return out


def params(cfg: Config, level: str, gpus: int) -> dict[str, Any]:
    b = cfg.section("burnin")
    seconds = float(b["full_seconds"] if level == "full" else b["quick_seconds"])
    return {"seconds": seconds, "timeout": float(b["measurement_timeout"]),
            "trials": b["trials"], "scratch": b["scratch"], "disk_mb": b["disk_mb"],
            "host_matrix": b["host_matrix"], "host_membw_mb": b["host_membw_mb"],
            "gpu_matrix": b["gpu_matrix"], "dcgmi": b["dcgmi"],
            "dcgm_level": b["dcgm_full_level"] if level == "full" else b["dcgm_quick_level"],
            "all_reduce_perf": b["all_reduce_perf"], "nccl_args": list(b["nccl_args"]),
            "gpus": gpus, "level": level}


def run(m: Measurement, p: Mapping[str, Any], *, env: Mapping[str, str] | None = None,
        timeout: float | None = None) -> list[BurninValue]:
    """Run one measurement in a child process with its time limit; never raises for the
    measurement's own faults (they are ``error`` values)."""
    from slurmguard.proc import run_command

    limit = float(timeout if timeout is not None else p["timeout"])
    body = json.dumps({**p, "target": m.target})
    try:
        res = run_command([sys.executable, "-m", "slurmguard.burnin.probe", m.name],
                          timeout=limit, input=body, check=False, env=env)
    except CommandError as exc:
        if exc.timed_out:
            return [BurninValue(m.name, "error", reason=f"timed out after {limit:g}s")]
        return [BurninValue(m.name, "error", reason=exc.message)]
    try:
        values = json.loads(res.stdout.strip().splitlines()[-1])["values"]
    except (ValueError, IndexError, KeyError, TypeError):
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no output"]
        return [BurninValue(m.name, "error", reason=f"probe exited {res.rc}: {tail[0][:200]}")]
    return [to_value(m.name, v) for v in values]


def to_value(measurement: str, v: Mapping[str, Any]) -> BurninValue:
    status = str(v.get("status", "error"))
    if status not in ("ok", "unsupported", "error", "failed"):
        status, v = "error", {**v, "reason": f"probe answered status {status!r}"}
    value = v.get("value")
    if value is not None:
        try:
            value = float(value)
        except (TypeError, ValueError):
            status, value = "error", None
    return BurninValue(measurement, status, str(v.get("metric") or ""), value,
                       str(v.get("unit") or ""), str(v.get("reason") or ""),
                       bool(v.get("higher_is_better", True)), dict(v.get("details") or {}))


def summarize(values: Sequence[BurninValue]) -> str:
    return ", ".join(f"{v.measurement}={v.status}" for v in values)
