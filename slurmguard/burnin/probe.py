"""The measurements, each run in its own child process (``python -m slurmguard.burnin.probe``).

The worker starts one child per measurement through :func:`slurmguard.proc.run_command`
with the measurement's time limit: a hang (a wedged GPU, a dead scratch disk) is killed with
its process group and reported ``error: timed out``, and the job still ends. The child reads
its parameters as JSON on stdin and prints one JSON object ``{"values": [...]}``.

A probe returns a list of dicts with the keys of :class:`slurmguard.store.burnin.BurninValue`
(``measurement`` is filled in by the worker). Raise :class:`slurmguard.errors.Unsupported` when the measurement
cannot run here (no numpy, no torch, no GPU, no dcgmi): that is never a failure. The GPU
loads run on torch only; a node with cupy and no torch never gets here: `burnin worker`
refuses to start (slurmguard.burnin.worker.torch_missing).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from slurmguard.errors import Unsupported  # one class, whether this runs as __main__ or not


def _best_of(fn: Any, trials: int, seconds: float) -> float:
    """Run ``fn()`` (one unit of work, returns its size) repeatedly for ``seconds`` split into
    ``trials`` trials; the best trial's rate (size per second). The best trial is robust to
    a neighbour stealing the CPU for a moment; a throttled or capped node is slow in all."""
    per = max(0.05, seconds / max(1, trials))
    best = 0.0
    for _ in range(max(1, trials)):
        done, t0 = 0.0, time.perf_counter()
        while True:
            done += fn()
            dt = time.perf_counter() - t0
            if dt >= per:
                break
        best = max(best, done / dt)
    return best


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        raise Unsupported("numpy is not installed (pip install 'slurmguard[burnin]')") from None
    return numpy


def host_cpu(p: dict[str, Any]) -> list[dict[str, Any]]:
    np = _numpy()
    n = int(p.get("host_matrix", 512))
    a = np.random.default_rng(1).random((n, n))
    b = np.random.default_rng(2).random((n, n))

    def unit() -> float:
        np.matmul(a, b)
        return 2.0 * n ** 3

    rate = _best_of(unit, int(p.get("trials", 5)), float(p["seconds"]))
    return [{"metric": "host_cpu_gflops", "value": rate / 1e9, "unit": "GFLOP/s", "status": "ok",
             "details": {"n": n, "dtype": "float64"}}]


def host_membw(p: dict[str, Any]) -> list[dict[str, Any]]:
    np = _numpy()
    size = int(p.get("host_membw_mb", 64)) * 2 ** 20
    src = np.ones(size // 8)
    dst = np.empty_like(src)

    def unit() -> float:
        np.copyto(dst, src)
        return 2.0 * size  # read + write

    rate = _best_of(unit, int(p.get("trials", 5)), float(p["seconds"]))
    return [{"metric": "host_membw_gbs", "value": rate / 1e9, "unit": "GB/s", "status": "ok",
             "details": {"bytes": size}}]


def disk_io(p: dict[str, Any]) -> list[dict[str, Any]]:
    scratch = str(p.get("scratch", "/tmp"))
    if not os.path.isdir(scratch):
        raise Unsupported(f"scratch {scratch} is not a directory")
    size = int(p.get("disk_mb", 256)) * 2 ** 20
    path = os.path.join(scratch, f".slurmguard-burnin-{os.getpid()}")
    block = os.urandom(2 ** 20)
    try:
        t0 = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            for _ in range(size // len(block)):
                os.write(fd, block)
            os.fsync(fd)
        finally:
            os.close(fd)
        write = size / (time.perf_counter() - t0)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            if hasattr(os, "posix_fadvise"):  # read from the disk, not the page cache
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            t0 = time.perf_counter()
            while os.read(fd, 2 ** 20):
                pass
            read = size / (time.perf_counter() - t0)
        finally:
            os.close(fd)
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return [{"metric": "disk_write_mbs", "value": write / 1e6, "unit": "MB/s", "status": "ok",
             "details": {"path": scratch, "bytes": size}},
            {"metric": "disk_read_mbs", "value": read / 1e6, "unit": "MB/s", "status": "ok",
             "details": {"path": scratch, "bytes": size}}]


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
            raise Unsupported("torch is installed but sees no CUDA GPU")
        return torch
    try:
        import cupy  # noqa: F401
    except ImportError:
        raise Unsupported("neither torch nor cupy is importable") from None
    # `burnin worker` refuses to start here (worker.torch_missing); a probe run by hand says so
    raise Unsupported("cupy alone cannot run the GPU loads (torch only); install torch")


def gpu_matmul(p: dict[str, Any]) -> list[dict[str, Any]]:
    torch = _torch()
    n = int(p.get("gpu_matrix", 8192))
    per_gpu = {}
    for i in range(torch.cuda.device_count()):
        dev = torch.device("cuda", i)
        a = torch.randn(n, n, device=dev, dtype=torch.float16)
        b = torch.randn(n, n, device=dev, dtype=torch.float16)

        def unit(a: Any = a, b: Any = b, dev: Any = dev) -> float:
            torch.matmul(a, b)
            torch.cuda.synchronize(dev)
            return 2.0 * n ** 3

        per_gpu[i] = _best_of(unit, int(p.get("trials", 5)), float(p["seconds"])) / 1e12
    worst = min(per_gpu, key=per_gpu.get)  # type: ignore[arg-type]
    return [{"metric": "gpu_matmul_tflops", "value": per_gpu[worst], "unit": "TFLOP/s",
             "status": "ok", "details": {"per_gpu": per_gpu, "slowest_gpu": worst, "n": n,
                                         "dtype": "float16"}}]


def gpu_membw(p: dict[str, Any]) -> list[dict[str, Any]]:
    torch = _torch()
    size = 2 ** 30
    per_gpu = {}
    for i in range(torch.cuda.device_count()):
        dev = torch.device("cuda", i)
        src = torch.empty(size, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)

        def unit(src: Any = src, dst: Any = dst, dev: Any = dev) -> float:
            dst.copy_(src)
            torch.cuda.synchronize(dev)
            return 2.0 * size

        per_gpu[i] = _best_of(unit, int(p.get("trials", 5)), float(p["seconds"])) / 1e9
    worst = min(per_gpu, key=per_gpu.get)  # type: ignore[arg-type]
    return [{"metric": "gpu_membw_gbs", "value": per_gpu[worst], "unit": "GB/s", "status": "ok",
             "details": {"per_gpu": per_gpu, "slowest_gpu": worst}}]


# nvmlClocksEventReason bits that mean the GPU is held back (not idle, not app clocks).
THROTTLE_BITS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal",
                 0x40: "hw_thermal", 0x80: "hw_power_brake"}


def _nvml() -> Any:
    try:
        import pynvml
    except ImportError:
        raise Unsupported("pynvml (nvidia-ml-py) is not installed") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise Unsupported(f"NVML: {exc}") from None
    return pynvml


def gpu_inventory(p: dict[str, Any]) -> list[dict[str, Any]]:
    nv = _nvml()
    try:
        n = nv.nvmlDeviceGetCount()
        names = sorted({_text(nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(i)))
                        for i in range(n)})
    finally:
        nv.nvmlShutdown()
    return [{"metric": "", "status": "ok", "details": {"count": n, "names": names}}]


def gpu_clocks(p: dict[str, Any]) -> list[dict[str, Any]]:
    """SM clocks and clock-event (throttle) reasons sampled through NVML for ``seconds``,
    under a matmul load on every GPU when torch sees them (idle clocks say nothing)."""
    nv = _nvml()
    load = None
    try:
        load = _start_gpu_load(float(p["seconds"]) + 1.0)
    except Unsupported:
        pass
    try:
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        if not handles:
            raise Unsupported("NVML sees no GPU")
        samples: dict[int, list[int]] = {i: [] for i in range(len(handles))}
        reasons: dict[int, int] = {i: 0 for i in range(len(handles))}
        max_sm = {}
        for i, h in enumerate(handles):
            try:
                max_sm[i] = nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)
            except nv.NVMLError:
                max_sm[i] = None
        deadline = time.monotonic() + float(p["seconds"])
        while True:
            for i, h in enumerate(handles):
                samples[i].append(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
                try:
                    reasons[i] |= nv.nvmlDeviceGetCurrentClocksEventReasons(h)
                except (nv.NVMLError, AttributeError):
                    pass
            if time.monotonic() >= deadline:
                break
            time.sleep(0.2)
    finally:
        nv.nvmlShutdown()
    med = {i: sorted(v)[len(v) // 2] for i, v in samples.items()}
    worst = min(med, key=med.get)  # type: ignore[arg-type]
    held = {i: [name for bit, name in THROTTLE_BITS.items() if r & bit] for i, r in reasons.items()}
    return [{"metric": "gpu_sm_clock_mhz", "value": float(med[worst]), "unit": "MHz",
             "status": "ok",
             "reason": "; ".join(f"GPU {i}: {', '.join(v)}" for i, v in held.items() if v),
             "details": {"per_gpu": med, "max_sm": max_sm, "slowest_gpu": worst,
                         "throttle": {i: v for i, v in held.items() if v},
                         "under_load": load is not None}}]


def _start_gpu_load(seconds: float) -> threading.Thread:
    torch = _torch()

    def spin() -> None:
        end = time.monotonic() + seconds
        mats = [torch.randn(4096, 4096, device=torch.device("cuda", i), dtype=torch.float16)
                for i in range(torch.cuda.device_count())]
        while time.monotonic() < end:
            for m in mats:
                torch.matmul(m, m)

    t = threading.Thread(target=spin, daemon=True)
    t.start()
    return t


def dcgm_diag(p: dict[str, Any]) -> list[dict[str, Any]]:
    from slurmguard.burnin.parse import parse_dcgm_diag
    from slurmguard.proc import run_command

    dcgmi = str(p.get("dcgmi", "/usr/bin/dcgmi"))
    if not os.access(dcgmi, os.X_OK):
        raise Unsupported(f"{dcgmi} not found (NVIDIA DCGM)")
    level = int(p.get("dcgm_level", 1))
    res = run_command([dcgmi, "diag", "-r", str(level), "-j"], timeout=float(p["timeout"]) - 5,
                      check=False)
    diag = parse_dcgm_diag(res.stdout)
    return dcgm_values(diag, level, res.rc)


def dcgm_values(diag: Any, level: int, rc: int) -> list[dict[str, Any]]:
    """One value per run: failed (with every failing test and GPU) or ok. Pure."""
    details = {"level": level, "version": diag.version, "rc": rc,
               "results": [{"category": r.category, "test": r.test, "gpus": list(r.gpus),
                            "status": r.status, "warnings": list(r.warnings)}
                           for r in diag.results]}
    if diag.runtime_error:
        return [{"status": "error", "reason": f"dcgmi diag: {diag.runtime_error}",
                 "details": details}]
    failed = diag.failed
    if failed:
        parts = []
        for r in failed:
            where = f" on GPU {','.join(map(str, r.gpus))}" if r.gpus else ""
            parts.append(f"{r.test} failed{where}" + (f": {r.warnings[0]}" if r.warnings else ""))
        return [{"status": "failed", "reason": "dcgm-diag: " + "; ".join(parts),
                 "details": details}]
    if not diag.results:
        return [{"status": "error", "reason": "dcgmi diag ran no test", "details": details}]
    return [{"status": "ok", "reason": f"dcgmi diag -r {level}: {len(diag.results)} results, "
             "none failed", "details": details}]


def nccl_allreduce(p: dict[str, Any]) -> list[dict[str, Any]]:
    from slurmguard.burnin.parse import parse_nccl_tests
    from slurmguard.proc import run_command

    exe = str(p.get("all_reduce_perf", "/usr/local/bin/all_reduce_perf"))
    if not os.access(exe, os.X_OK):
        raise Unsupported(f"{exe} not found (nccl-tests)")
    ngpu = int(p.get("gpus") or 0)
    if ngpu <= 0:
        raise Unsupported("no GPU on this node")
    res = run_command([exe, *map(str, p.get("nccl_args", [])), "-g", str(ngpu)],
                      timeout=float(p["timeout"]) - 5, check=False)
    return nccl_values(parse_nccl_tests(res.stdout), res.rc)


def nccl_values(r: Any, rc: int) -> list[dict[str, Any]]:
    """The peak bus bandwidth; failed when data came back wrong. Pure."""
    details = {"avg_busbw": r.avg_busbw, "out_of_bounds": r.out_of_bounds, "rc": rc,
               "rows": [[x.size, x.busbw, x.busbw_inplace] for x in r.rows]}
    if r.wrong or (r.out_of_bounds or 0) > 0:
        return [{"metric": "nccl_busbw_gbs", "value": r.peak_busbw, "unit": "GB/s",
                 "status": "failed", "details": details,
                 "reason": f"nccl-allreduce: {r.wrong} wrong values, "
                           f"{r.out_of_bounds or 0} out of bounds"}]
    return [{"metric": "nccl_busbw_gbs", "value": r.peak_busbw, "unit": "GB/s", "status": "ok",
             "details": details}]


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


BUILTIN = {
    "host-cpu": host_cpu, "host-membw": host_membw, "disk-io": disk_io,
    "gpu-matmul": gpu_matmul, "gpu-membw": gpu_membw, "gpu-clocks": gpu_clocks,
    "dcgm-diag": dcgm_diag, "nccl-allreduce": nccl_allreduce, "gpu-inventory": gpu_inventory,
}


def main(argv: list[str]) -> int:
    from slurmguard import sitemod

    name = argv[0] if argv else ""
    params = json.loads(sys.stdin.read() or "{}")
    target = params.get("target")
    try:
        if target:
            func = sitemod.resolve(target)
        else:
            func = BUILTIN[name]
        values = list(func(params))
    except Unsupported as exc:
        values = [{"status": "unsupported", "reason": exc.message}]
    except Exception as exc:  # a fault of the measurement itself: error, never a node fault
        values = [{"status": "error", "reason": f"{type(exc).__name__}: {exc}"}]
    sys.stdout.write(json.dumps({"values": values}, default=str) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

