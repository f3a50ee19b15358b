"""GPU checks, in one place at two levels:

- the NVML adapter over the stand-in library (tests/fakehw/libnvml.c), fault by fault, through
  gather and the checks (and the prolog that drains);
- each check alone on hand-built NVML snapshots: a table per check, and Hypothesis for the
  invariants every check keeps (never raises, one-line reason, NOT_SUPPORTED never unhealthy).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fakehw.nvml import (
    H100_BUS_IDS,
    HW_POWER_BRAKE_SLOWDOWN,
    HW_SLOWDOWN,
    HW_THERMAL_SLOWDOWN,
    SW_THERMAL_SLOWDOWN,
    build_fake_nvml,
    default_config,
    nvml_env,
    with_fault,
    write_config,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.helpers import require, sg_argv, sg_env, standin_slurm

from slurmguard import config
from slurmguard.adapters import nvml
from slurmguard.checks.base import CheckContext
from slurmguard.checks.gpu import CHECKS, PARAMS
from slurmguard.contract import Health
from slurmguard.errors import ConfigError, SlurmguardError, Unsupported
from slurmguard.sources import GatherContext
from slurmguard.sources.nvml import GpuInfo, NvmlSnapshot, normalize_bus_id

BY_NAME = {c.name: c for c in CHECKS}
BUS = [normalize_bus_id(b) for b in H100_BUS_IDS]
DEFAULTS = {k: f.default for k, f in PARAMS.items()}


def replace(gpu, **changes):
    """GpuInfo/NvmlSnapshot are NamedTuples (cheap on the hook path): a copy with changes."""
    return gpu._replace(**changes)


@pytest.fixture(scope="session")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(shutil.which("gcc") is not None, "gcc is needed to build the stand-in NVML")
    return build_fake_nvml(tmp_path_factory.mktemp("fakenvml"))


@pytest.fixture
def driver_dir(tmp_path: Path) -> Path:
    """A /proc/driver/nvidia/gpus look-alike: one directory per bound GPU (lower case, as there)."""
    d = tmp_path / "proc-gpus"
    for b in BUS:
        (d / b.lower()).mkdir(parents=True)
    return d


def load_cfg(tmp_path: Path, **gpu: Any) -> config.Config:
    lines = ["[checks.gpu]"] + [f"{k} = {json.dumps(v)}" for k, v in gpu.items()]
    path = tmp_path / "slurmguard.toml"
    path.write_text("\n".join(lines) + "\n")
    return config.load(str(path), env={})


def gather(cfg: config.Config) -> NvmlSnapshot:
    return nvml.gather(cfg, GatherContext(node="n1", hook="check", deadline=time.monotonic() + 10))


def run_all(snap: NvmlSnapshot, params: dict[str, Any], previous: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    out = {}
    for c in CHECKS:
        ctx = CheckContext(params=params, sources={"nvml": snap},
                           previous=(previous or {}).get(c.name, {}))
        out[c.name] = c.run(ctx)
    return out


# ---- the adapter over the stand-in library ----------------------------------------------------

STRICT = {"expected_count": 8, "pcie_width_down": "unhealthy", "persistence_off": "unhealthy"}


def fake_cfg(tmp_path: Path, libdir: Path, monkeypatch: pytest.MonkeyPatch, nvml_cfg: dict[str, Any],
             **params: Any) -> config.Config:
    path = write_config(tmp_path / "fake-nvml.json", nvml_cfg)
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(path))
    return load_cfg(tmp_path, nvml_library=str(libdir / "libnvidia-ml.so.1"), **params)


def test_gather_reads_every_field_of_eight_gpus(tmp_path: Path, libdir: Path,
                                                monkeypatch: pytest.MonkeyPatch, driver_dir: Path) -> None:
    nv = with_fault(default_config(), 5, temperature=70, ecc={"aggregate_uncorrected": 3},
                    remapped_rows={"correctable": 2, "uncorrectable": 1}, pcie={"gen": 1},
                    power_usage_mw=250500)
    snap = gather(fake_cfg(tmp_path, libdir, monkeypatch, nv, driver_gpus_dir=str(driver_dir)))
    assert snap.count == 8 and snap.driver_version == "550.90.07"
    assert [g.pci_bus_id for g in snap.gpus] == BUS and [g.index for g in snap.gpus] == list(range(8))
    assert snap.driver_bus_ids == tuple(BUS)
    g = snap.gpus[5]
    assert (g.name, g.lost, g.errors) == ("NVIDIA H100 80GB HBM3", False, ())
    assert g.uuid.startswith("GPU-") and g.label == "GPU 5 (0000:AB:00.0)"
    assert (g.temperature, g.temperature_slowdown, g.temperature_shutdown) == (70, 89, 92)
    assert (g.ecc_enabled, g.ecc_volatile_uncorrected, g.ecc_aggregate_uncorrected) == (True, 0, 3)
    assert g.retired_pages_pending is None  # Hopper: NOT_SUPPORTED
    assert (g.remap_correctable, g.remap_uncorrectable, g.remap_pending, g.remap_failure) == (2, 1, False, False)
    assert g.clocks_event_reasons == 1
    assert g.nvlink == tuple((i, True) for i in range(18))
    assert (g.pcie_width, g.pcie_max_width, g.pcie_gen, g.pcie_max_gen) == (16, 16, 1, 5)
    assert g.persistence_mode is True and g.power_usage_w == 250.5 and g.power_limit_w == 700.0
    results = run_all(snap, {**DEFAULTS, **STRICT})
    # lifetime uncorrectable errors are worth a look, not a drain; the rest is healthy
    assert results.pop("gpu-ecc").reason == "GPU 5 (0000:AB:00.0) has 3 lifetime uncorrectable ECC errors"
    assert {n: r.health for n, r in results.items()} == {n: Health.HEALTHY for n in results}
    assert snap.duration > 0


RECORDED = Path(__file__).parent / "data" / "nvml" / "h200-driver-580.159.04.json"
# Read twice on the real GPU (config, then snapshot): these may move between the two reads.
MOVING = {"temperature", "power_usage_w", "clocks_event_reasons"}


def test_recorded_h200_driver_replays_through_the_standin(
        tmp_path: Path, libdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real driver's answers (tests/bench/bench_nvml_real.py on an H200, driver 580) fed to
    the stand-in give the snapshot and the verdicts the real driver gave: the stand-in is
    faithful where it matters (NOT_SUPPORTED retired pages and NVLink, the 0000:00:06.0 bus
    id form, thresholds, remap rows)."""
    rec = json.loads(RECORDED.read_text())
    real = rec["snapshot"]
    proc_gpus = tmp_path / "proc-gpus"
    for bus in real["driver_bus_ids"]:
        (proc_gpus / bus.lower()).mkdir(parents=True)
    expected = real["count"]
    snap = gather(fake_cfg(tmp_path, libdir, monkeypatch, rec["standin_config"],
                           driver_gpus_dir=str(proc_gpus), expected_count=expected))
    assert (snap.count, snap.driver_version) == (real["count"], real["driver_version"])
    assert list(snap.driver_bus_ids or ()) == real["driver_bus_ids"]
    for got, want in zip(snap.gpus, real["gpus"], strict=True):
        mine = {k: (list(map(list, v)) if k == "nvlink" and v else list(v) if k == "errors" else v)
                for k, v in got._asdict().items()}
        differ = {k: (mine[k], want[k]) for k in want if k not in MOVING and mine[k] != want[k]}
        assert differ == {}
        assert abs(mine["power_usage_w"] - want["power_usage_w"]) < 5
    results = run_all(snap, {**DEFAULTS, "expected_count": expected})
    assert {n: r.health.value for n, r in results.items()} == rec["verdicts"]
    assert results["gpu-nvlink"].reason == "no GPU reports NVLink"


FAULTS = [
    ("lost", {"lost": True}, {"gpu-lost"}, "GPU 2 (0000:3A:00.0) is lost (GPU is lost)"),
    ("handle-unknown", {"errors": {"handle": "UNKNOWN"}}, {"gpu-lost"},
     "GPU 2 (0000:3A:00.0) is lost (Unknown Error)"),
    ("off-bus", {"off_bus": True}, {"gpu-count", "gpu-lost"}, "GPU 2 (0000:3A:00.0) fell off the bus"),
    ("ecc-volatile", {"ecc": {"volatile_uncorrected": 2}}, {"gpu-ecc"},
     "GPU 2 (0000:3A:00.0) has 2 volatile uncorrectable ECC errors"),
    ("remap-pending", {"remapped_rows": {"pending": True, "uncorrectable": 1}}, {"gpu-remap"},
     "GPU 2 (0000:3A:00.0) has a row remap pending: reset the GPU"),
    ("remap-failure", {"remapped_rows": {"failure": True}}, {"gpu-remap"},
     "GPU 2 (0000:3A:00.0) row remapping failed (no spare rows): replace the GPU"),
    ("retired-pending", {"not_supported": [], "retired_pages": {"pending": True, "double_bit": 2}},
     {"gpu-remap"}, "GPU 2 (0000:3A:00.0) has a page retirement pending: reset the GPU"),
    ("hot", {"temperature": 90}, {"gpu-thermal"}, "GPU 2 (0000:3A:00.0) is at 90 C (limit 89 C)"),
    ("hw-slowdown", {"clocks_event_reasons": HW_SLOWDOWN | HW_THERMAL_SLOWDOWN}, {"gpu-thermal"},
     "GPU 2 (0000:3A:00.0) clocks held down: HW slowdown, HW thermal slowdown"),
    ("power-brake", {"clocks_event_reasons": HW_POWER_BRAKE_SLOWDOWN}, {"gpu-thermal"},
     "GPU 2 (0000:3A:00.0) clocks held down: HW power brake slowdown"),
    ("nvlink-down", {"nvlink": [True] * 5 + [False] + [True] * 12}, {"gpu-nvlink"},
     "GPU 2 (0000:3A:00.0) has NVLink 5 down (17 of 18 active)"),
    ("pcie-x8", {"pcie": {"width": 8}}, {"gpu-pcie"}, "GPU 2 (0000:3A:00.0) PCIe link is x8 (max x16)"),
    ("persistence-off", {"persistence_mode": False}, {"gpu-persistence"},
     "GPU 2 (0000:3A:00.0) has persistence mode off"),
]


@pytest.mark.parametrize(("fault", "changes", "bad", "reason"), FAULTS, ids=[f[0] for f in FAULTS])
def test_each_fault_makes_exactly_its_check_unhealthy(
        tmp_path: Path, libdir: Path, monkeypatch: pytest.MonkeyPatch, driver_dir: Path,
        fault: str, changes: dict[str, Any], bad: set[str], reason: str) -> None:
    cfg = fake_cfg(tmp_path, libdir, monkeypatch, with_fault(default_config(), 2, **changes),
                   driver_gpus_dir=str(driver_dir), **STRICT)
    results = run_all(gather(cfg), cfg.section("checks.gpu"))
    assert {n for n, r in results.items() if r.health == Health.UNHEALTHY} == bad
    assert all(r.health == Health.HEALTHY for n, r in results.items() if n not in bad), results
    first = sorted(bad)[-1]  # gpu-lost / the single check: the one naming the GPU
    assert results[first].reason == reason
    if fault == "off-bus":
        assert results["gpu-count"].reason == "found 7 of 8 GPUs"


def test_off_bus_across_reboot_named_from_saved_inventory(tmp_path: Path, libdir: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """No expected_bus_ids, no driver list: the first run's inventory names the missing GPU."""
    cfg = fake_cfg(tmp_path, libdir, monkeypatch, default_config(), driver_gpus_dir="")
    ctx = CheckContext(params=cfg.section("checks.gpu"), sources={"nvml": gather(cfg)})
    assert BY_NAME["gpu-lost"].run(ctx).health == Health.HEALTHY
    saved = json.loads(json.dumps(ctx.new_state))  # what the runner writes to state.json
    assert saved["inventory"]["0000:3A:00.0"] == 2
    write_config(tmp_path / "fake-nvml.json", with_fault(default_config(), 2, off_bus=True))
    for _ in range(2):  # stays unhealthy: the inventory is kept, not replaced
        ctx = CheckContext(params=cfg.section("checks.gpu"), sources={"nvml": gather(cfg)},
                           previous=saved)
        r = BY_NAME["gpu-lost"].run(ctx)
        assert (r.health, r.reason) == (Health.UNHEALTHY, "GPU 2 (0000:3A:00.0) fell off the bus")
        saved = json.loads(json.dumps(ctx.new_state))


NOT_SUPPORTED = [
    ("gpu-ecc", ["ecc", "ecc_mode"], {"ecc": {"volatile_uncorrected": 5}}),
    ("gpu-remap", ["remapped_rows", "retired_pages"], {"remapped_rows": {"pending": True}}),
    ("gpu-thermal", ["temperature", "temperature_threshold", "clocks_event_reasons"],
     {"temperature": 99, "clocks_event_reasons": HW_SLOWDOWN}),
    ("gpu-nvlink", ["nvlink"], {"nvlink": [False] * 18}),
    ("gpu-pcie", ["pcie"], {"pcie": {"width": 4, "gen": 1}}),
    ("gpu-persistence", ["persistence_mode"], {"persistence_mode": False}),
]


@pytest.mark.parametrize(("name", "fields", "fault"), NOT_SUPPORTED, ids=[n[0] for n in NOT_SUPPORTED])
def test_not_supported_fields_are_skipped_never_unhealthy(
        tmp_path: Path, libdir: Path, monkeypatch: pytest.MonkeyPatch,
        name: str, fields: list[str], fault: dict[str, Any]) -> None:
    nv = default_config()
    for i in range(8):  # the fault is there, but NVML cannot see it on any GPU
        nv = with_fault(nv, i, not_supported=fields, **fault)
    cfg = fake_cfg(tmp_path, libdir, monkeypatch, nv, **STRICT)
    results = run_all(gather(cfg), cfg.section("checks.gpu"))
    assert results[name].health == Health.UNSUPPORTED and results[name].reason.startswith("no GPU reports")
    assert all(r.health == Health.HEALTHY for n, r in results.items() if n != name)
    # on one GPU only: that GPU is skipped, the others are still checked
    nv = with_fault(default_config(), 4, not_supported=fields, **fault)
    results = run_all(gather(fake_cfg(tmp_path, libdir, monkeypatch, nv, **STRICT)), cfg.section("checks.gpu"))
    assert results[name].health == Health.HEALTHY


def test_field_error_is_a_checker_error_unless_another_gpu_is_unhealthy(
        tmp_path: Path, libdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nv = with_fault(default_config(), 3, errors={"remapped_rows": "UNKNOWN"})
    cfg = fake_cfg(tmp_path, libdir, monkeypatch, nv)
    results = run_all(gather(cfg), cfg.section("checks.gpu"))
    r = results["gpu-remap"]
    assert (r.health, r.reason) == (Health.ERROR, "GPU 3 (0000:5D:00.0) NVML read failed: remapped_rows: Unknown Error")
    assert all(x.health == Health.HEALTHY for n, x in results.items() if n != "gpu-remap")
    nv = with_fault(nv, 6, remapped_rows={"failure": True})
    results = run_all(gather(fake_cfg(tmp_path, libdir, monkeypatch, nv)), cfg.section("checks.gpu"))
    assert results["gpu-remap"].health == Health.UNHEALTHY
    assert results["gpu-remap"].reason.startswith("GPU 6 (0000:BA:00.0) row remapping failed")


def test_config_is_reread_at_every_gather(tmp_path: Path, libdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = fake_cfg(tmp_path, libdir, monkeypatch, default_config())
    assert gather(cfg).gpus[7].temperature == 35
    write_config(tmp_path / "fake-nvml.json", with_fault(default_config(), 7, temperature=88))
    assert gather(cfg).gpus[7].temperature == 88


def test_per_node_config_dir(tmp_path: Path, libdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "cluster"
    write_config(d / "default.json", default_config())
    write_config(d / "n2.json", with_fault(default_config(4), 1, lost=True))
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(d))
    cfg = load_cfg(tmp_path, nvml_library=str(libdir / "libnvidia-ml.so.1"))
    monkeypatch.setenv("SLURMD_NODENAME", "n2")
    snap = gather(cfg)
    assert snap.count == 4 and [g.lost for g in snap.gpus] == [False, True, False, False]
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    assert gather(cfg).count == 8


@pytest.mark.parametrize(("init_error", "expected"), [
    ("DRIVER_NOT_LOADED", Unsupported), ("LIBRARY_NOT_FOUND", Unsupported),
    ("UNKNOWN", SlurmguardError), ("NO_PERMISSION", SlurmguardError),
])
def test_init_failures(tmp_path: Path, libdir: Path, monkeypatch: pytest.MonkeyPatch,
                       init_error: str, expected: type[Exception]) -> None:
    cfg = fake_cfg(tmp_path, libdir, monkeypatch, {**default_config(), "init_error": init_error})
    with pytest.raises(expected) as exc:
        gather(cfg)
    assert type(exc.value) is expected  # Unsupported is a SlurmguardError: never mix them up


def test_library_missing_is_unsupported(tmp_path: Path) -> None:
    cfg = load_cfg(tmp_path, nvml_library=str(tmp_path / "nope" / "libnvidia-ml.so.1"))
    with pytest.raises(Unsupported, match="NVML library not found"):
        gather(cfg)


def test_library_absent_every_gpu_check_unsupported(tmp_path: Path) -> None:
    """A node without the NVIDIA driver: pynvml's own dlopen fails; every GPU check says so."""
    code = f"""
import json
from slurmguard import config
from slurmguard.checks.gpu import CHECKS
from slurmguard.node.runner import run_checks
cfg = config.load({str(tmp_path / "none.toml")!r}, env={{}})
rep = run_checks(cfg, CHECKS, hook="check", node="n1")
print(json.dumps({{r.name: [r.health.value, r.reason] for r in rep.results}}))
"""
    (tmp_path / "none.toml").write_text(f'[hooks]\nstate_dir = "{tmp_path}"\n')
    env = sg_env()
    env.pop("LD_LIBRARY_PATH", None)
    env.pop("FAKE_NVML_CONFIG", None)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert set(out) == set(BY_NAME)
    assert all(v == ["unsupported", "nvml: NVML library not found"] for v in out.values()), out


def test_config_validation() -> None:
    for key, value, msg in [
        ("nvml_library", "libnvidia-ml.so.1", "expected an absolute path"),
        ("expected_count", "eight", 'expected an integer, got "eight"'),
        ("throttle_unhealthy", ["hw_slowdwn"], "unknown clock event reason 'hw_slowdwn'"),
        ("pcie_width_down", "drain", "expected one of degraded, unhealthy, ignore"),
    ]:
        with pytest.raises(ConfigError, match=f"checks.gpu.{key}: {msg}"):
            config._validate({"checks": {"gpu": {key: value}}}, config.SCHEMA, "", Path("t.toml"))


# ---- through the hook, as slurmd runs it ------------------------------------------------------


def test_prolog_drains_only_the_node_with_the_faulty_gpu(tmp_path: Path, libdir: Path) -> None:
    """`slurmguard prolog` in a child process: pynvml finds the stand-in via LD_LIBRARY_PATH,
    one config dir serves two nodes, only n2's GPU is lost. No Slurm here (scontrol points
    nowhere): the verdict and the exit code are what is checked; draining is the lead's test."""
    d = tmp_path / "nvml"
    write_config(d / "default.json", default_config())
    write_config(d / "n2.json", with_fault(default_config(), 2, lost=True))
    drv = tmp_path / "proc-gpus"
    for b in BUS:
        (drv / b.lower()).mkdir(parents=True)
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f"""
[slurm]
{standin_slurm(tmp_path, "n2")}
[hooks]
state_dir = "{tmp_path}/state"
prolog = ["gpu-count", "gpu-lost", "gpu-ecc", "gpu-remap", "gpu-thermal", "gpu-nvlink"]
[checks.gpu]
expected_count = 8
driver_gpus_dir = "{drv}"
""")
    out = {}
    for node in ("n1", "n2"):
        env = nvml_env(libdir, d, sg_env(SLURMGUARD_CONFIG=str(cfg), SLURMD_NODENAME=node))
        p = subprocess.run(sg_argv("prolog", "--json"), env=env, capture_output=True, text=True, timeout=60)
        out[node] = (p.returncode, json.loads(p.stdout))
    rc1, rec1 = out["n1"]
    assert rc1 == 0 and rec1["decision"]["action"] == "pass"
    assert [r["health"] for r in rec1["results"]] == ["healthy"] * 6
    rc2, rec2 = out["n2"]
    assert rc2 == 1 and "state=drain" in (tmp_path / "scontrol.log").read_text()
    assert rec2["decision"]["reason"] == "slurmguard: gpu-lost: GPU 2 (0000:3A:00.0) is lost (GPU is lost)"
    assert {r["name"]: r["health"] for r in rec2["results"]}["gpu-ecc"] == "healthy"


def test_check_modules_do_not_load_pynvml_or_ctypes() -> None:
    code = ("import sys, slurmguard.checks, slurmguard.config as c; c.load('/dev/null', env={}); "
            "print(sorted(m for m in ('pynvml', 'ctypes') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], env=sg_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def test_gpu_lost_inventory_survives_until_forgotten(tmp_path: Path, libdir: Path) -> None:
    """The documented recovery after removing a GPU on purpose: `check --forget gpu-lost`."""
    nv = write_config(tmp_path / "n.json", default_config())
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f'[slurm]\nscontrol = "{tmp_path}/no-scontrol"\n'
                   f'[hooks]\nstate_dir = "{tmp_path}/state"\n[checks.gpu]\ndriver_gpus_dir = ""\n')
    env = nvml_env(libdir, nv, sg_env(SLURMGUARD_CONFIG=str(cfg), SLURMD_NODENAME="n1"))

    def check(*extra: str) -> tuple[int, str]:
        p = subprocess.run(sg_argv("check", "--only", "gpu-lost", "--json", *extra), env=env,
                           capture_output=True, text=True, timeout=60)
        return p.returncode, json.loads(p.stdout)["results"][0]["reason"]

    assert check() == (0, "")
    write_config(nv, with_fault(default_config(), 2, off_bus=True))
    assert check() == (1, "GPU 2 (0000:3A:00.0) fell off the bus")
    assert check() == (1, "GPU 2 (0000:3A:00.0) fell off the bus")
    assert check("--forget", "gpu-lost") == (0, "")
    assert check() == (0, "")


def test_gpu_remap_warns_of_newly_remapped_rows_through_the_stand_in(tmp_path: Path,
                                                                      libdir: Path) -> None:
    """The real path: NVML's remapped-row counts (libnvidia-ml stand-in), the check's state
    in hooks.state_dir between runs: an old count is the baseline, a growth is degraded with
    the counts, and the next run, the count steady, is healthy again."""
    nv = write_config(tmp_path / "n.json", with_fault(default_config(), 5, remapped_rows={
        "correctable": 3, "uncorrectable": 1}))
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f'[slurm]\nscontrol = "{tmp_path}/no-scontrol"\n'
                   f'[hooks]\nstate_dir = "{tmp_path}/state"\n[checks.gpu]\ndriver_gpus_dir = ""\n')
    env = nvml_env(libdir, nv, sg_env(SLURMGUARD_CONFIG=str(cfg), SLURMD_NODENAME="n1"))

    def check() -> tuple[str, str, int]:
        p = subprocess.run(sg_argv("check", "--only", "gpu-remap", "--json"), env=env,
                           capture_output=True, text=True, timeout=60)
        r = json.loads(p.stdout)["results"][0]
        return r["health"], r["reason"], r["details"]["new_rows"]

    assert check() == ("healthy", "", 0)
    write_config(nv, with_fault(default_config(), 5, remapped_rows={"correctable": 5,
                                                                     "uncorrectable": 1}))
    assert check() == ("degraded", "GPU 5 (0000:AB:00.0) had 2 rows remapped since the last run "
                                   "(now 5 for correctable, 1 for uncorrectable errors): memory "
                                   "wearing", 2)
    assert check() == ("healthy", "", 0)


# ---- table tests on hand-built snapshots ------------------------------------------------------


def healthy_gpu(i: int, **kw: Any) -> GpuInfo:
    base = GpuInfo(index=i, pci_bus_id=BUS[i], name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{i}",
                   temperature=35, temperature_slowdown=89, temperature_shutdown=92,
                   ecc_enabled=True, ecc_volatile_uncorrected=0, ecc_aggregate_uncorrected=0,
                   remap_correctable=0, remap_uncorrectable=0, remap_pending=False,
                   remap_failure=False, clocks_event_reasons=1,
                   nvlink=tuple((n, True) for n in range(18)), pcie_width=16, pcie_max_width=16,
                   pcie_gen=5, pcie_max_gen=5, persistence_mode=True)
    return replace(base, **kw)


def snap_of(*gpus: GpuInfo, count: int | None = None, driver: tuple[str, ...] | None = None) -> NvmlSnapshot:
    return NvmlSnapshot("550.90.07", len(gpus) if count is None else count, tuple(gpus), driver)


def one(name: str, snap: NvmlSnapshot, previous: dict[str, Any] | None = None, **params: Any) -> tuple[str, str]:
    r = BY_NAME[name].run(CheckContext(params={**DEFAULTS, **params}, sources={"nvml": snap},
                                       previous=previous or {}))
    return r.health.value, r.reason


EIGHT = [healthy_gpu(i) for i in range(8)]

TABLE: list[tuple[str, NvmlSnapshot, dict[str, Any], tuple[str, str]]] = [
    ("gpu-count", snap_of(*EIGHT), {}, ("healthy", "")),
    ("gpu-count", snap_of(*EIGHT[:7]), {"expected_count": 8}, ("unhealthy", "found 7 of 8 GPUs")),
    ("gpu-count", snap_of(*EIGHT), {"expected_count": 4}, ("degraded", "found 8 GPUs, expected 4")),
    ("gpu-count", snap_of(), {"expected_count": 0}, ("healthy", "")),
    ("gpu-lost", snap_of(*EIGHT[:2], replace(EIGHT[2], lost=True, lost_reason="GPU is lost", pci_bus_id="")),
     {}, ("unhealthy", "GPU 2 (bus id unknown) is lost (GPU is lost)")),
    ("gpu-lost", snap_of(*EIGHT[:2], replace(EIGHT[2], lost=True, lost_reason="Unknown Error", pci_bus_id=""),
                         *EIGHT[3:]), {"expected_bus_ids": BUS},
     ("unhealthy", "GPU 2 (0000:3A:00.0) is lost (Unknown Error)")),
    ("gpu-lost", snap_of(*EIGHT[:2], *EIGHT[3:]), {"expected_bus_ids": ["00000000:3a:00.0"]},
     ("unhealthy", "GPU 0 (0000:3A:00.0) fell off the bus")),
    ("gpu-lost", snap_of(*EIGHT[:6], driver=tuple(BUS)), {},
     ("unhealthy", "GPU 6 (0000:BA:00.0) fell off the bus; 1 more")),
    ("gpu-ecc", snap_of(replace(EIGHT[0], ecc_aggregate_uncorrected=3)), {}, ("degraded", "GPU 0 (0000:18:00.0) has 3 lifetime uncorrectable ECC errors")),
    ("gpu-ecc", snap_of(replace(EIGHT[0], ecc_aggregate_uncorrected=3)), {"ecc_aggregate_max": 2},
     ("unhealthy", "GPU 0 (0000:18:00.0) has 3 lifetime uncorrectable ECC errors (max 2)")),
    ("gpu-ecc", snap_of(replace(EIGHT[0], ecc_volatile_uncorrected=1)), {"ecc_volatile_max": 1}, ("healthy", "")),
    ("gpu-ecc", snap_of(replace(EIGHT[1], ecc_enabled=False, ecc_volatile_uncorrected=None,
                                ecc_aggregate_uncorrected=None)), {}, ("degraded", "GPU 1 (0000:2A:00.0) has ECC disabled")),
    ("gpu-ecc", snap_of(replace(EIGHT[1], ecc_enabled=False)), {"ecc_disabled": "ignore"}, ("healthy", "")),
    ("gpu-remap", snap_of(replace(EIGHT[0], remap_pending=None, remap_failure=None, retired_pages_pending=True)),
     {}, ("unhealthy", "GPU 0 (0000:18:00.0) has a page retirement pending: reset the GPU")),
    ("gpu-remap", snap_of(replace(EIGHT[0], remap_uncorrectable=5)), {}, ("healthy", "")),
    ("gpu-thermal", snap_of(replace(EIGHT[0], temperature=85)), {}, ("degraded", "GPU 0 (0000:18:00.0) is at 85 C, near its limit of 89 C")),
    ("gpu-thermal", snap_of(replace(EIGHT[0], temperature=85)), {"temperature_max": 80}, ("unhealthy", "GPU 0 (0000:18:00.0) is at 85 C (limit 80 C)")),
    ("gpu-thermal", snap_of(replace(EIGHT[0], temperature=95, temperature_slowdown=None)), {}, ("healthy", "")),
    ("gpu-thermal", snap_of(replace(EIGHT[0], clocks_event_reasons=SW_THERMAL_SLOWDOWN | 0x4)), {},
     ("degraded", "GPU 0 (0000:18:00.0) clocks held down: SW thermal slowdown")),
    ("gpu-thermal", snap_of(replace(EIGHT[0], clocks_event_reasons=HW_SLOWDOWN)), {"throttle_unhealthy": []}, ("healthy", "")),
    ("gpu-nvlink", snap_of(replace(EIGHT[0], nvlink=((0, True), (1, False), (2, True)))), {"nvlink_expected": 2}, ("healthy", "")),
    ("gpu-nvlink", snap_of(replace(EIGHT[0], nvlink=((0, True), (1, False), (2, False)))), {"nvlink_expected": 2},
     ("unhealthy", "GPU 0 (0000:18:00.0) has 1 of 2 NVLinks active (down: 1,2)")),
    ("gpu-nvlink", snap_of(replace(EIGHT[0], nvlink=((0, False),))), {"nvlink_expected": 0}, ("healthy", "")),
    # PCIe boards: links reported, none cabled on any GPU -> not judged by default ...
    ("gpu-nvlink", snap_of(*(replace(g, nvlink=tuple((n, False) for n in range(18))) for g in EIGHT[:2])), {},
     ("healthy", "")),
    # ... but required when asked for, and one GPU dark among cabled ones is a fault
    ("gpu-nvlink", snap_of(*(replace(g, nvlink=tuple((n, False) for n in range(18))) for g in EIGHT[:2])),
     {"nvlink_expected": 18}, ("unhealthy", "GPU 0 (0000:18:00.0) has 0 of 18 NVLinks active (down: 0,1,2,3,4,5,6,7,...); 1 more")),
    ("gpu-nvlink", snap_of(EIGHT[0], replace(EIGHT[1], nvlink=tuple((n, False) for n in range(18)))), {},
     ("unhealthy", "GPU 1 (0000:2A:00.0) has NVLink 0,1,2,3,4,5,6,7,... down (0 of 18 active)")),
    ("gpu-nvlink", snap_of(replace(EIGHT[0], nvlink=None)), {"nvlink_expected": 18}, ("unsupported", "no GPU reports NVLink")),
    ("gpu-pcie", snap_of(replace(EIGHT[3], pcie_width=8)), {}, ("degraded", "GPU 3 (0000:5D:00.0) PCIe link is x8 (max x16)")),
    ("gpu-pcie", snap_of(replace(EIGHT[3], pcie_gen=1)), {}, ("healthy", "")),
    ("gpu-pcie", snap_of(replace(EIGHT[3], pcie_gen=3)), {"pcie_gen_down": "degraded"},
     ("degraded", "GPU 3 (0000:5D:00.0) PCIe link is gen 3 (max gen 5)")),
    ("gpu-persistence", snap_of(*EIGHT[:2], replace(EIGHT[2], persistence_mode=False)), {},
     ("degraded", "GPU 2 (0000:3A:00.0) has persistence mode off")),
    ("gpu-persistence", snap_of(), {}, ("unsupported", "no GPU reports persistence mode")),
]


@pytest.mark.parametrize(("name", "snap", "params", "expected"), TABLE)
def test_table(name: str, snap: NvmlSnapshot, params: dict[str, Any], expected: tuple[str, str]) -> None:
    assert one(name, snap, **params) == expected


def test_gpu_remap_warns_when_rows_were_newly_remapped_and_only_then() -> None:
    """Remapped-row counts are lifetime: gpu-remap warns (degraded, with the counts) when they
    grew since its last reading with nothing pending or failed; the first reading of a GPU
    is its baseline, a count that has not grown is history, a pending remap stays unhealthy
    (and its rows are not warned again after the reset), a count that went down is a new
    board's baseline."""
    state: dict[str, Any] = {}

    def reading(corr: int, unc: int = 0, pending: bool = False) -> tuple[str, str, int]:
        gpu = replace(EIGHT[3], remap_correctable=corr, remap_uncorrectable=unc,
                      remap_pending=pending)
        ctx = CheckContext(params=DEFAULTS, sources={"nvml": snap_of(EIGHT[0], gpu)},
                           previous=state)
        r = BY_NAME["gpu-remap"].run(ctx)
        state.update(ctx.new_state)
        json.dumps(ctx.new_state)
        return r.health.value, r.reason, r.details["new_rows"]

    assert reading(4) == ("healthy", "", 0)  # an old count, first seen: the baseline
    assert reading(4) == ("healthy", "", 0)  # not grown: history
    assert reading(6) == ("degraded", "GPU 3 (0000:5D:00.0) had 2 rows remapped since the last "
                                      "run (now 6 for correctable, 0 for uncorrectable errors): "
                                      "memory wearing", 2)
    assert reading(6) == ("healthy", "", 0)
    assert reading(6, 1, pending=True)[:2] == (
        "unhealthy", "GPU 3 (0000:5D:00.0) has a row remap pending: reset the GPU")
    assert reading(6, 2) == ("healthy", "", 0)  # the reset applied the remap already told of
    assert reading(6, 2) == ("healthy", "", 0)
    assert reading(0) == ("healthy", "", 0)  # another board: a new baseline
    assert reading(1)[0] == "degraded"
    assert one("gpu-remap", snap_of(replace(EIGHT[3], remap_correctable=2)),
               previous={"rows": {"GPU-3": [1, 0, 0]}}, remap_rows_grew="ignore") == ("healthy", "")


def test_unhealthy_beats_error_beats_degraded() -> None:
    errored = replace(EIGHT[1], persistence_mode=None, errors=(("persistence_mode", "Unknown Error"),))
    off = replace(EIGHT[2], persistence_mode=False)
    assert one("gpu-persistence", snap_of(EIGHT[0], errored, off))[0] == "error"
    assert one("gpu-persistence", snap_of(EIGHT[0], errored, off), persistence_off="unhealthy")[0] == "unhealthy"


# ---- invariants ---------------------------------------------------------------------------------

opt_int = st.none() | st.integers(min_value=0, max_value=2**40)
opt_bool = st.none() | st.booleans()
gpu_st = st.builds(
    GpuInfo,
    index=st.integers(0, 63),
    pci_bus_id=st.sampled_from(BUS + ["", "garbage\nline"]),
    name=st.text(max_size=20),
    lost=st.booleans(),
    lost_reason=st.text(max_size=30),
    temperature=opt_int, temperature_slowdown=opt_int,
    ecc_enabled=opt_bool, ecc_volatile_uncorrected=opt_int, ecc_aggregate_uncorrected=opt_int,
    retired_pages_pending=opt_bool, remap_pending=opt_bool, remap_failure=opt_bool,
    remap_correctable=opt_int, remap_uncorrectable=opt_int,
    clocks_event_reasons=st.none() | st.integers(0, 2**64 - 1),
    nvlink=st.none() | st.lists(st.tuples(st.integers(0, 35), st.booleans()), max_size=36).map(tuple),
    pcie_width=opt_int, pcie_max_width=opt_int, pcie_gen=opt_int, pcie_max_gen=opt_int,
    persistence_mode=opt_bool,
    errors=st.lists(st.tuples(st.sampled_from(["ecc", "pcie", "nvlink", "handle", "temperature"]),
                              st.text(max_size=20)), max_size=2).map(tuple),
)
snap_st = st.builds(NvmlSnapshot, driver_version=st.text(max_size=10), count=st.integers(0, 64),
                    gpus=st.lists(gpu_st, max_size=9).map(tuple),
                    driver_bus_ids=st.none() | st.lists(st.sampled_from(BUS), max_size=8).map(tuple))
params_st = st.fixed_dictionaries({
    "expected_count": st.integers(-1, 16), "ecc_volatile_max": st.integers(0, 3),
    "ecc_aggregate_max": st.integers(-1, 3), "ecc_aggregate_warn": st.integers(-1, 3),
    "temperature_max": st.integers(0, 120), "temperature_margin": st.integers(0, 20),
    "nvlink_expected": st.integers(-1, 18),
    "pcie_width_down": st.sampled_from(["degraded", "unhealthy", "ignore"]),
    "persistence_off": st.sampled_from(["degraded", "unhealthy", "ignore"]),
    "expected_bus_ids": st.lists(st.sampled_from(BUS), max_size=3),
})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snap=snap_st, params=params_st, prev=st.none() | st.dictionaries(st.sampled_from(BUS), st.integers(0, 7)))
def test_checks_never_raise_and_keep_their_contract(snap: NvmlSnapshot, params: dict[str, Any],
                                                     prev: dict[str, int] | None) -> None:
    assert CHECKS
    for c in CHECKS:
        ctx = CheckContext(params={**DEFAULTS, **params}, sources={"nvml": snap},
                           previous={"inventory": prev} if prev is not None else {})
        r = c.run(ctx)
        assert r.name == c.name and isinstance(r.health, Health)
        assert "\n" not in r.reason and len(r.reason) <= 200
        assert (r.reason == "") == (r.health == Health.HEALTHY)
        json.dumps(r.to_dict())
        json.dumps(ctx.new_state)


@settings(max_examples=100, deadline=None)
@given(snap=snap_st)
def test_nothing_supported_is_never_unhealthy(snap: NvmlSnapshot) -> None:
    """A GPU whose every field is NOT_SUPPORTED (None) never makes a field check unhealthy."""
    blank = tuple(GpuInfo(index=g.index, pci_bus_id=g.pci_bus_id) for g in snap.gpus)
    snap = replace(snap, gpus=blank)
    field_checks = [c for c in CHECKS if c.name not in ("gpu-count", "gpu-lost")]
    got = {c.name: c.run(CheckContext(params=DEFAULTS, sources={"nvml": snap})).health
           for c in field_checks}
    assert len(got) == len(field_checks) > 0
    assert {n: h for n, h in got.items() if h not in (Health.UNSUPPORTED, Health.HEALTHY)} == {}
