"""Burn-in measurements: the dcgmi/nccl-tests parsers (fixtures written from the documented
formats: tests/data/burnin/README.md), the child-process runner and its time limit, site
measurements, and the worker end to end outside Slurm (stand-in NVML, real subprocesses)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from fakehw.nvml import (
    HW_SLOWDOWN,
    build_fake_nvml,
    default_config,
    nvml_env,
    with_fault,
    write_config,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from support.helpers import REPO, sg_argv, sg_env
from support.wait import wait_for

from slurmguard import config
from slurmguard.burnin import measure
from slurmguard.burnin.parse import parse_dcgm_diag, parse_nccl_tests
from slurmguard.burnin.probe import dcgm_values, nccl_values
from slurmguard.errors import ConfigError, ParseError
from slurmguard.store import Store

DATA = Path(__file__).parent / "data" / "burnin"
TESTS = str(Path(__file__).parent)


# ------------------------------------------------------------------------- dcgmi diag -j

def test_dcgm_pass_dcgm2_format() -> None:
    d = parse_dcgm_diag((DATA / "dcgm-diag-pass.json").read_text())
    assert d.version == "2.4.8" and len(d.results) == 9 and not d.failed
    assert d.results[0].gpus == tuple(range(8)) and d.results[-1].status == "skip"
    (v,) = dcgm_values(d, 1, 0)
    assert v["status"] == "ok" and "none failed" in v["reason"]


def test_dcgm_fail_names_test_and_gpu_dcgm3_format() -> None:
    d = parse_dcgm_diag((DATA / "dcgm-diag-fail.json").read_text())
    assert d.version == "3.3.5"
    (bad,) = d.failed
    assert (bad.category, bad.test, bad.gpus) == ("Hardware", "Memory", (3,))
    (v,) = dcgm_values(d, 3, 226)
    assert v["status"] == "failed"
    assert v["reason"] == ("dcgm-diag: Memory failed on GPU 3: GPU 3 had uncorrectable memory "
                           "errors and row remapping failed.")
    assert v["details"]["level"] == 3 and len(v["details"]["results"]) == 12


@pytest.mark.parametrize("text, match", [
    ("", "no JSON object"),
    ("Error: unable to connect to host engine", "no JSON object"),
    ("{not json}", "not valid JSON"),
    ('{"something": {}}', "DCGM GPU Diagnostic"),
    ('{"DCGM GPU Diagnostic": {"test_categories": 3}}', "test_categories"),
    ('{"DCGM GPU Diagnostic": {"test_categories": [{"tests": [{"name": "x", "results": '
     '[{"gpu_ids": "0", "status": "MAYBE"}]}]}]}}', "unknown status"),
    ('{"DCGM GPU Diagnostic": {"test_categories": [{"tests": [{"name": "x", "results": '
     '[{"gpu_ids": "zero", "status": "Pass"}]}]}]}}', "gpu_ids"),
])
def test_dcgm_garbage_is_one_line(text: str, match: str) -> None:
    with pytest.raises(ParseError, match=match) as e:
        parse_dcgm_diag(text)
    assert "\n" not in str(e.value)


def test_dcgm_runtime_error_and_empty_are_errors_not_failures() -> None:
    d = parse_dcgm_diag('{"DCGM GPU Diagnostic": {"version": "3.3.5", "runtime_error": '
                        '"Unable to run diagnostic on unsupported GPU 0"}}')
    assert dcgm_values(d, 1, 1)[0]["status"] == "error"
    d = parse_dcgm_diag('{"DCGM GPU Diagnostic": {"version": "3.3.5"}}')
    assert dcgm_values(d, 1, 1)[0]["status"] == "error"


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=300),
                 st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                              lambda c: st.lists(c, max_size=4) | st.dictionaries(
                                  st.sampled_from(["DCGM GPU Diagnostic", "test_categories",
                                                   "tests", "results", "status", "gpu_ids",
                                                   "name", "warnings"]), c, max_size=4),
                              max_leaves=20).map(json.dumps)))
def test_property_dcgm_parser_answers_or_raises_parseerror(text: str) -> None:
    try:
        d = parse_dcgm_diag(text)
    except ParseError as exc:
        assert "\n" not in str(exc)
    else:
        assert all(r.status in ("pass", "fail", "warn", "skip") for r in d.results)


# ------------------------------------------------------------------------- all_reduce_perf

def test_nccl_8gpu_table() -> None:
    r = parse_nccl_tests((DATA / "all-reduce-perf-8gpu.txt").read_text())
    assert len(r.rows) == 8 and r.rows[0].size == 8388608 and r.rows[-1].busbw == 332.87
    assert r.peak_busbw == 332.97 and r.avg_busbw == 285.924 and r.out_of_bounds == 0
    (v,) = nccl_values(r, 0)
    assert (v["metric"], v["value"], v["unit"], v["status"]) == ("nccl_busbw_gbs", 332.97, "GB/s", "ok")


def test_nccl_wrong_values_are_a_failure() -> None:
    r = parse_nccl_tests((DATA / "all-reduce-perf-wrong.txt").read_text())
    assert r.wrong == 5 and r.out_of_bounds == 5
    (v,) = nccl_values(r, 1)
    assert v["status"] == "failed" and v["reason"] == "nccl-allreduce: 5 wrong values, 5 out of bounds"


def test_nccl_srun_labels_and_na() -> None:
    r = parse_nccl_tests((DATA / "all-reduce-perf-srun-label.txt").read_text())
    assert [x.busbw for x in r.rows] == [122.03, 145.57] and r.rows[0].wrong is None
    assert r.peak_busbw == 146.14 and r.avg_busbw == 134.07


@pytest.mark.parametrize("text", ["", "# Avg bus bandwidth : 3.0\n",
                                  "NCCL WARN Cuda failure 'out of memory'\n"])
def test_nccl_no_rows_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError, match="no result rows"):
        parse_nccl_tests(text)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=80), st.builds(
    lambda *xs: " ".join(map(str, xs)), st.integers(0, 2**40), st.integers(0, 2**38),
    st.sampled_from(["float", "half"]), st.sampled_from(["sum", "none"]), st.integers(-1, 7),
    st.floats(0, 1e6), st.floats(0, 1e4), st.floats(0, 1e4),
    st.sampled_from(["0", "3", "N/A", "x"]))), max_size=8).map("\n".join))
def test_property_nccl_parser_answers_or_raises_parseerror(text: str) -> None:
    try:
        r = parse_nccl_tests(text)
    except ParseError as exc:
        assert "\n" not in str(exc)
    else:
        assert r.rows and r.peak_busbw >= 0


# ------------------------------------------------------------------------- the runner

def _cfg(tmp_path: Path, body: str = "") -> config.Config:
    f = tmp_path / "sg.toml"
    f.write_text(f'[store]\npath = "{tmp_path}/s.db"\n[hooks]\nstate_dir = "{tmp_path}/state"\n'
                 f'[burnin]\nsite_modules = ["support.burninsite"]\nquick_seconds = 0.2\ndisk_mb = 4\n'
                 f'scratch = "{tmp_path}"\nmeasurement_timeout = 20\n{body}')
    return config.load(str(f))


@pytest.fixture
def site_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(TESTS)
    monkeypatch.setenv("PYTHONPATH", TESTS + os.pathsep + str(REPO))


def test_hang_is_error_timed_out_and_the_child_is_gone(tmp_path: Path, site_path: None) -> None:
    cfg = _cfg(tmp_path)
    m = measure.registry(cfg)["site-hang"]
    t0 = time.monotonic()
    (v,) = measure.run(m, measure.params(cfg, "quick", 0), timeout=2)
    assert (v.status, v.reason) == ("error", "timed out after 2s")
    assert time.monotonic() - t0 < 15
    out = subprocess.run(["pgrep", "-f", "slurmguard.burnin.probe site-hang"], capture_output=True)
    assert out.stdout.strip() == b""  # the process group was killed


def test_site_measurements_value_crash_unsupported(tmp_path: Path, site_path: None) -> None:
    cfg = _cfg(tmp_path)
    reg = measure.registry(cfg)
    p = measure.params(cfg, "quick", 0)
    (v,) = measure.run(reg["site-value"], p)
    assert (v.status, v.metric, v.value, v.unit, v.higher_is_better) == ("ok", "site_seconds", 10.0, "s", False)
    (v,) = measure.run(reg["site-raise"], p)
    assert v.status == "error" and "RuntimeError: the benchmark crashed" in v.reason
    (v,) = measure.run(reg["site-unsupported"], p)
    assert (v.status, v.reason) == ("unsupported", "needs an InfiniBand HCA")


def test_host_and_disk_measurements_and_no_gpu_is_unsupported(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, 'measurements = ["host-cpu", "host-membw", "disk-io", "gpu-matmul", '
                         '"dcgm-diag", "nccl-allreduce"]\ndcgmi = "/nonexistent/dcgmi"\n')
    p = measure.params(cfg, "quick", 0)
    got = {}
    for m in measure.select(cfg):
        for v in measure.run(m, p):
            got[v.metric or v.measurement] = v
    assert got["host_cpu_gflops"].value > 0 and got["host_membw_gbs"].unit == "GB/s"
    assert got["disk_write_mbs"].value > 0 and got["disk_read_mbs"].value > 0
    assert not list(tmp_path.glob(".slurmguard-burnin-*"))  # the scratch file is removed
    assert got["gpu-matmul"].status == "unsupported"
    assert got["dcgm-diag"].status == "unsupported" and "dcgmi" in got["dcgm-diag"].reason
    assert got["nccl-allreduce"].status == "unsupported"


def test_dcgmi_and_all_reduce_perf_run_through_the_helper(tmp_path: Path) -> None:
    """Executables that print the fixtures stand in for the tools (their output format is
    what matters here; the tools themselves are not installable on these machines)."""
    for name, fixture in (("dcgmi", "dcgm-diag-fail.json"), ("all_reduce_perf", "all-reduce-perf-8gpu.txt")):
        exe = tmp_path / name
        exe.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/{name}.args\ncat {DATA / fixture}\nexit 0\n")
        exe.chmod(0o755)
    cfg = _cfg(tmp_path, f'measurements = ["dcgm-diag", "nccl-allreduce"]\ndcgmi = "{tmp_path}/dcgmi"\n'
                         f'all_reduce_perf = "{tmp_path}/all_reduce_perf"\n')
    p = measure.params(cfg, "full", 8)
    dcgm, nccl = (measure.run(m, p)[0] for m in measure.select(cfg))
    assert dcgm.status == "failed" and "Memory failed on GPU 3" in dcgm.reason
    assert (tmp_path / "dcgmi.args").read_text().split() == ["diag", "-r", "3", "-j"]
    assert nccl.status == "ok" and nccl.value == 332.97
    assert (tmp_path / "all_reduce_perf.args").read_text().split()[-2:] == ["-g", "8"]


def test_unknown_measurement_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="burnin.measurements: unknown measurement 'gpu-magic'"):
        measure.select(_cfg(tmp_path, 'measurements = ["gpu-magic"]\n'))


# ------------------------------------------------------------------------- the worker

@pytest.fixture(scope="module")
def nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fake_nvml(tmp_path_factory.mktemp("nvml"))


def _worker(tmp_path: Path, nvml_lib: Path, nvml: dict, measurements: str, **env: str
            ) -> subprocess.Popen:
    write_config(tmp_path / "nvml.json", nvml)
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path}/s.db"\n[hooks]\nstate_dir = "{tmp_path}/state"\n'
                   f'[burnin]\nsite_modules = ["support.burninsite"]\nquick_seconds = 0.5\n'
                   f'checks = ["gpu-count", "gpu-ecc"]\nmeasurements = {measurements}\n'
                   f'[checks.gpu]\nexpected_count = 8\n')
    subprocess.run(sg_argv("-c", str(cfg), "db", "upgrade"), env=sg_env(), check=True,
                   capture_output=True)
    e = nvml_env(nvml_lib, tmp_path / "nvml.json", sg_env(**env))
    e["PYTHONPATH"] = TESTS + os.pathsep + e["PYTHONPATH"]
    e["SLURM_JOB_ID"] = "4242"
    return subprocess.Popen(sg_argv("-c", str(cfg), "burnin", "worker", "--node", "n1"), env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_worker_complete_run_with_nvml_clocks(tmp_path: Path, nvml_lib: Path) -> None:
    nv = with_fault(default_config(), 5, clocks={"sm": 1410}, clocks_event_reasons=HW_SLOWDOWN)
    p = _worker(tmp_path, nvml_lib, nv, '["gpu-clocks", "site-value"]')
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    store = Store.open(url=f"sqlite:///{tmp_path}/s.db")
    (run,) = store.burnin.latest_runs(0)
    assert (run.status, run.job_id, run.group_key) == ("complete", "4242", "8x NVIDIA H100 80GB HBM3")
    vals = {r.metric: r for r in store.burnin.results([run.id]) if r.metric}
    clk = vals["gpu_sm_clock_mhz"]
    assert (clk.value, clk.unit) == (1410.0, "MHz") and clk.details["slowest_gpu"] == 5
    assert clk.details["throttle"] == {"5": ["hw_slowdown"]} and "GPU 5: hw_slowdown" in clk.reason
    assert {s.metric for s in store.burnin.series()} == {"gpu_sm_clock_mhz", "site_seconds"}


def test_worker_health_failure_during_the_run_fails_the_run(tmp_path: Path, nvml_lib: Path) -> None:
    marker = tmp_path / "started"
    p = _worker(tmp_path, nvml_lib, default_config(), '["site-slow"]',
                FAKE_BENCH_MARKER=str(marker), FAKE_BENCH_SLEEP="3")
    wait_for(marker.exists, 60, what="the site load to start")
    # an uncorrectable ECC error appears while the load runs
    write_config(tmp_path / "nvml.json",
                 with_fault(default_config(), 2, ecc={"volatile_uncorrected": 1}))
    out, err = p.communicate(timeout=120)
    assert p.returncode == 1, err
    (run,) = Store.open(url=f"sqlite:///{tmp_path}/s.db").burnin.latest_runs(0)
    assert run.status == "failed" and run.reason.startswith("gpu-ecc: ")
    assert "(during the burn-in)" in run.reason


def test_worker_sigterm_leaves_a_partial_record(tmp_path: Path, nvml_lib: Path) -> None:
    marker = tmp_path / "started"
    p = _worker(tmp_path, nvml_lib, default_config(), '["site-value", "site-slow"]',
                FAKE_BENCH_MARKER=str(marker))
    wait_for(marker.exists, 60, what="the site load to start")
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    assert "recorded as partial" in out
    store = Store.open(url=f"sqlite:///{tmp_path}/s.db")
    (run,) = store.burnin.latest_runs(0)
    assert run.status == "partial" and "SIGTERM" in run.reason
    # what it measured before the signal is kept; a partial run is no one's latest value
    assert [r.metric for r in store.burnin.results([run.id])] == ["site_seconds"]
    assert store.burnin.series() == []


def _cupy_only(tmp_path: Path) -> str:
    """A PYTHONPATH on which ``cupy`` is importable and torch is not. cupy cannot be installed
    or run without a GPU; the worker only asks whether it is importable (find_spec), so an
    empty package of that name is the whole of what it sees on a cupy-only node."""
    pkg = tmp_path / "site-cupy" / "cupy"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    return str(tmp_path / "site-cupy") + os.pathsep + str(REPO)


def test_worker_with_cupy_and_no_torch_refuses_to_start(tmp_path: Path, nvml_lib: Path) -> None:
    # A site with cupy and no torch: before, gpu-matmul was quietly "unsupported" and the
    # node got no GPU burn-in; now the worker refuses, says why in one line, exits 3.
    p = _worker(tmp_path, nvml_lib, default_config(), '["gpu-matmul", "site-value"]',
                PYTHONPATH=_cupy_only(tmp_path))
    out, err = p.communicate(timeout=120)
    assert p.returncode == 3, (out, err)
    assert err.count("\n") == 1 and err.startswith("slurmguard: error: burnin worker: "), err
    assert "gpu-matmul need torch" in err and "cupy but no torch" in err
    store = Store.open(url=f"sqlite:///{tmp_path}/s.db")
    (run,) = store.burnin.latest_runs(0)
    assert run.status == "partial" and "cupy but no torch" in run.reason
    assert store.burnin.results([run.id]) == []  # nothing measured, not even site-value


def test_worker_without_any_gpu_library_measures_the_rest(tmp_path: Path, nvml_lib: Path) -> None:
    # Neither torch nor cupy (a CPU node): the GPU load is unsupported, the rest runs.
    p = _worker(tmp_path, nvml_lib, default_config(), '["gpu-matmul", "site-value"]')
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    store = Store.open(url=f"sqlite:///{tmp_path}/s.db")
    (run,) = store.burnin.latest_runs(0)
    got = {r.measurement: r for r in store.burnin.results([run.id])}
    assert run.status == "complete" and got["site-value"].status == "ok"
    assert got["gpu-matmul"].status == "unsupported" and "neither torch nor cupy" in got["gpu-matmul"].reason
