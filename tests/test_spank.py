"""The SPANK plugin with the real sbatch/srun/slurmstepd of the test cluster."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from support.helpers import REPO, require

pytestmark = pytest.mark.slurm

SPANK_DIR = REPO / "spank"


def build_plugin(dest: Path) -> Path:
    """Build with the Makefile (gcc against Debian's spank.h) into ``dest``; returns the .so."""
    require(shutil.which("gcc") is not None, "gcc is needed to build the SPANK plugin")
    require(Path("/usr/include/slurm/spank.h").exists(), "libslurm-dev (spank.h) is not installed")
    build = dest / "spank-build"
    shutil.copytree(SPANK_DIR, build, ignore=shutil.ignore_patterns("*.so", "*.o"))
    r = subprocess.run(["make", "-C", str(build)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    so = build / "slurmguard_spank.so"
    syms = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True,
                          timeout=30).stdout
    assert "slurm_spank_init" in syms and "slurm_spank_user_init" in syms
    return so


def spank_cluster(factory, tmp: Path, nodes: int = 2, extra: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    so = build_plugin(tmp)
    plug = tmp / "plugstack.conf"
    plug.write_text(f"required {so}\n")
    return factory(nodes=nodes, extra_conf=[f"PlugStackConfig={plug}", *extra])


@pytest.fixture
def cluster(slurm_cluster_factory, tmp_path: Path):  # type: ignore[no-untyped-def]
    return spank_cluster(slurm_cluster_factory, tmp_path)


def test_options_in_help(cluster) -> None:  # type: ignore[no-untyped-def]
    for tool in ("srun", "sbatch"):
        out = cluster.run(tool, "--help", check=False).stdout
        for opt in ("--guard-checkpoint-dir=DIR", "--guard-resume=auto|off", "--guard-max-requeues=N",
                    "--guard-notice-signal=none|USR1|USR2|INT|TERM"):
            assert opt in out, (tool, opt)


@pytest.mark.parametrize("arg,message", [
    ("--guard-checkpoint-dir=relative/dir", 'expected an absolute path, got "relative/dir"'),
    ("--guard-checkpoint-dir=/nonexistent/ckpt", "/nonexistent/ckpt: No such file or directory"),
    ("--guard-checkpoint-dir=/etc/hostname", "/etc/hostname: not a directory"),
    ("--guard-max-requeues=-1", "must not be negative, got -1"),
    ("--guard-max-requeues=three", 'expected a count, got "three"'),
    ("--guard-max-requeues=99999999999999999999", "expected a count"),
    ("--guard-resume=maybe", 'expected auto or off, got "maybe"'),
    ("--guard-notice-signal=KILL", 'expected none, USR1, USR2, INT or TERM, got "KILL"'),
])
def test_bad_values_refused_at_submit(cluster, arg: str, message: str) -> None:  # type: ignore[no-untyped-def]
    for tool, args in (("sbatch", ["--wrap", "true"]), ("srun", ["true"])):
        r = cluster.run(tool, arg, *args, check=False)
        assert r.returncode != 0, (tool, r.stdout)
        assert "slurmguard: --guard-" in r.stderr and message in r.stderr, (tool, r.stderr)
        assert "Submitted batch job" not in r.stdout
    assert cluster.run("squeue", "-h").stdout.strip() == ""  # nothing was queued


def test_values_reach_batch_job_and_tasks(cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ck = tmp_path / "ckpt"
    ck.mkdir()
    script = ("#!/bin/sh\n"
              "echo batch $SLURMGUARD_CHECKPOINT_DIR $SLURMGUARD_RESUME $SLURMGUARD_MAX_REQUEUES\n"
              "srun -N2 sh -c 'echo task $SLURM_PROCID $SLURMD_NODENAME $SLURMGUARD_CHECKPOINT_DIR "
              "$SLURMGUARD_MAX_REQUEUES'\n")
    jid = cluster.sbatch(script, "-N2", f"--guard-checkpoint-dir={ck}", "--guard-resume=off",
                         "--guard-max-requeues=2")
    cluster.wait_job(jid, timeout=60)
    out = (cluster.root / "log" / f"job-{jid}.out").read_text().splitlines()
    assert f"batch {ck} off 2" in out
    tasks = sorted(line for line in out if line.startswith("task"))
    assert tasks == [f"task 0 n1 {ck} 2", f"task 1 n2 {ck} 2"]
    # srun alone (local context -> slurmstepd) exports them too.
    r = cluster.run("srun", "-N2", f"--guard-checkpoint-dir={ck}", "--guard-max-requeues=0",
                    "--guard-notice-signal=USR1", "sh", "-c", "echo $SLURMD_NODENAME "
                    "$SLURMGUARD_CHECKPOINT_DIR $SLURMGUARD_MAX_REQUEUES $SLURMGUARD_NOTICE_SIGNAL")
    assert sorted(r.stdout.split("\n")[:2]) == [f"n1 {ck} 0 USR1", f"n2 {ck} 0 USR1"]
    # Without the options the job sees none of the plugin's variables (srun passes the
    # caller's own environment on, and a caller may have SLURMGUARD_* of its own: CI does).
    r = cluster.run("srun", "-N1", "sh", "-c", "env | grep -c -E '^SLURMGUARD_(CHECKPOINT_DIR|"
                    "RESUME|MAX_REQUEUES|NOTICE_SIGNAL)=' || true")
    assert r.stdout.strip() == "0"
