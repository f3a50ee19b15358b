"""The node-side textfile: real hook subprocesses write `slurmguard_hook_<hook>.prom`.

The files are parsed with prometheus_client's own text parser (the format node_exporter
reads); tests/test_metrics_prometheus.py has node_exporter itself read them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from support.helpers import REPO, run_sg, sg_env, standin_slurm

from slurmguard.metrics import textfile


def write_cfg(tmp_path: Path, textfile_dir: Path | str) -> str:
    p = tmp_path / "sg.toml"
    p.write_text(f"""
[slurm]
{standin_slurm(tmp_path, "n7")}
[hooks]
state_dir = "{tmp_path}/state"
check_timeout = 1.0
budget = 4.0
log_file = "{tmp_path}/hooks.log"
prolog = ["fault-value", "fault-unsupported"]
healthcheck = ["fault-value"]
[checks]
site_modules = ["support.faultsite"]
[metrics]
textfile_dir = "{textfile_dir}"
""")
    return str(p)


def env_for(cfg: str, **extra: str) -> dict[str, str]:
    env = sg_env(SLURMGUARD_CONFIG=cfg, SLURMD_NODENAME="n7", **extra)
    env["PYTHONPATH"] = env["PYTHONPATH"] + os.pathsep + str(REPO / "tests")
    return env


def samples(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(path.read_text()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(smp: dict, name: str, **labels: str) -> float | None:
    return smp.get((name, tuple(sorted(labels.items()))))


def test_prolog_writes_health_verdict_reason_and_keeps_the_scripts_file(tmp_path):
    tdir = tmp_path / "textfile"
    tdir.mkdir()
    theirs = tdir / textfile.UNRUNNABLE_FILE
    theirs.write_text('slurmguard_hook_unrunnable_total{hook="prolog"} 3\n')
    before = theirs.stat()
    cfg = write_cfg(tmp_path, tdir)

    p = run_sg("prolog", "--json", env=env_for(cfg, FAULT_VALUE="bad"))
    assert p.returncode == 1, p.stderr
    rec = json.loads(p.stdout)
    smp = samples(tdir / "slurmguard_hook_prolog.prom")
    assert value(smp, "slurmguard_check_health", hook="prolog", check="fault-value", health="unhealthy") == 1
    assert value(smp, "slurmguard_check_health", hook="prolog", check="fault-value", health="healthy") == 0
    assert value(smp, "slurmguard_check_health", hook="prolog", check="fault-unsupported",
                 health="unsupported") == 1
    assert value(smp, "slurmguard_hook_verdict", hook="prolog", verdict="drain") == 1
    assert value(smp, "slurmguard_hook_verdict", hook="prolog", verdict="pass") == 0
    assert value(smp, "slurmguard_hook_drain_reason", hook="prolog", check="fault-value",
                 reason=rec["decision"]["reason"]) == 1
    assert value(smp, "slurmguard_hook_runs_total", hook="prolog", verdict="drain") == 1
    dur = value(smp, "slurmguard_hook_duration_seconds", hook="prolog")
    assert dur is not None and 0 < dur < 4.5
    assert value(smp, "slurmguard_hook_last_run_timestamp_seconds", hook="prolog") > 1.7e9

    # the node is fine again: verdict pass, the drain reason gone, the counter goes on
    p = run_sg("prolog", env=env_for(cfg))
    assert p.returncode == 0, p.stderr
    smp = samples(tdir / "slurmguard_hook_prolog.prom")
    assert value(smp, "slurmguard_hook_verdict", hook="prolog", verdict="pass") == 1
    assert not [k for k in smp if k[0] == "slurmguard_hook_drain_reason"]
    assert value(smp, "slurmguard_hook_runs_total", hook="prolog", verdict="drain") == 1
    assert value(smp, "slurmguard_hook_runs_total", hook="prolog", verdict="pass") == 1

    # one file per hook; the entry scripts' file untouched; no temporary file left behind
    p = run_sg("healthcheck", env=env_for(cfg))
    assert p.returncode == 0, p.stderr
    assert sorted(f for f in os.listdir(tdir) if not f.endswith(".lock")) == [
        "slurmguard_hook_healthcheck.prom", "slurmguard_hook_prolog.prom", textfile.UNRUNNABLE_FILE]
    assert not [f for f in os.listdir(tdir) if f.endswith(".tmp")]
    assert theirs.read_text() == 'slurmguard_hook_unrunnable_total{hook="prolog"} 3\n'
    assert theirs.stat().st_mtime_ns == before.st_mtime_ns
    assert oct((tdir / "slurmguard_hook_prolog.prom").stat().st_mode & 0o777) == "0o644"


def test_unwritable_textfile_dir_is_a_warning_not_a_fault(tmp_path):
    cfg = write_cfg(tmp_path, tmp_path / "no-such-dir")
    p = run_sg("prolog", env=env_for(cfg))
    assert p.returncode == 0, p.stderr
    p = run_sg("prolog", env=env_for(cfg, FAULT_VALUE="bad"))
    assert p.returncode == 1, p.stderr  # the verdict does not depend on the metrics file
    log = (tmp_path / "hooks.log").read_text()
    assert "warning: metrics textfile" in log and "No such file or directory" in log


def test_internal_error_is_a_verdict_in_the_textfile(tmp_path):
    tdir = tmp_path / "textfile"
    tdir.mkdir()
    cfg = write_cfg(tmp_path, tdir)
    # a site module that cannot be imported: slurmguard's fault, the job runs (exit 0)
    Path(cfg).write_text(Path(cfg).read_text().replace('["support.faultsite"]', '["no_such_site_module"]'))
    p = run_sg("prolog", env=env_for(cfg))
    assert p.returncode == 0, p.stderr
    smp = samples(tdir / "slurmguard_hook_prolog.prom")
    assert value(smp, "slurmguard_hook_verdict", hook="prolog", verdict="internal-error") == 1
    assert value(smp, "slurmguard_hook_runs_total", hook="prolog", verdict="internal-error") == 1


def test_textfile_off_by_default_and_no_prometheus_client_on_the_hook_path(tmp_path):
    tdir = tmp_path / "textfile"
    tdir.mkdir()
    cfg = write_cfg(tmp_path, tdir)
    p = run_sg("prolog", env=env_for(cfg, PYTHONPROFILEIMPORTTIME="1"))
    assert p.returncode == 0
    imported = {line.split("|")[-1].strip() for line in p.stderr.splitlines()
                if line.startswith("import time:")}
    assert "slurmguard.metrics.textfile" in imported
    assert not [m for m in imported if m.startswith("prometheus_client")]
    off = tmp_path / "off.toml"
    off.write_text(Path(cfg).read_text().replace(f'textfile_dir = "{tdir}"', ""))
    for f in os.listdir(tdir):
        os.unlink(tdir / f)
    assert run_sg("prolog", env=env_for(str(off))).returncode == 0
    assert os.listdir(tdir) == []


label_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@given(reason=label_text, check=label_text, health=st.sampled_from(textfile.HEALTHS),
       verdict=st.sampled_from(textfile.VERDICTS))
def test_render_is_valid_exposition_for_any_label_text(reason, check, health, verdict):
    text = textfile.render("prolog", [(check, health)], verdict, reason, 0.25, now=1.8e9,
                           runs={verdict: 2}, check=check)
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert value(got, "slurmguard_check_health", hook="prolog", check=check, health=health) == 1
    assert sum(v for (n, _), v in got.items() if n == "slurmguard_check_health") == 1
    assert value(got, "slurmguard_hook_verdict", hook="prolog", verdict=verdict) == 1
    if verdict == "drain":
        assert value(got, "slurmguard_hook_drain_reason", hook="prolog", check=check, reason=reason) == 1
    assert value(got, "slurmguard_hook_runs_total", hook="prolog", verdict=verdict) == 2


@given(runs=st.dictionaries(st.sampled_from(textfile.VERDICTS), st.integers(0, 2**53), min_size=1))
def test_the_runs_counter_reads_back_what_was_written(runs, tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    (d / "slurmguard_hook_epilog.prom").write_text(
        textfile.render("epilog", [], "pass", "", 0.1, now=1.8e9, runs=runs))
    assert textfile.previous_runs(str(d / "slurmguard_hook_epilog.prom")) == runs


def test_concurrent_runs_of_one_hook_lose_no_count(tmp_path):
    """Eight processes writing at once, five times each (jobs starting together): no count lost."""
    import subprocess
    import sys

    tdir = tmp_path / "textfile"
    tdir.mkdir()
    code = ("import sys; from slurmguard.metrics import textfile\n"
            "for _ in range(5):\n"
            "    assert textfile.write_hook(sys.argv[1], 'prolog', results=[('gpu-xid', 'healthy')],"
            " verdict='pass', duration=0.1) is None\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tdir)], env=sg_env()) for _ in range(8)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 8
    assert textfile.previous_runs(str(tdir / "slurmguard_hook_prolog.prom")) == {"pass": 40}


def test_bump_counters_adds_and_keeps_every_series(tmp_path):
    helps = {"slurmguard_gate_jobs_total": "Jobs.", "slurmguard_drains_total": "Drains."}
    k = ("slurmguard_drains_total", textfile.labels(cause='we"ird\\', source="gate"))
    assert textfile.bump_counters(str(tmp_path), "g.prom", helps, {k: 2}) is None
    assert textfile.bump_counters(str(tmp_path), "g.prom", helps, {
        ("slurmguard_gate_jobs_total", textfile.labels(result="allowed")): 1}) is None
    text = (tmp_path / "g.prom").read_text()
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert got == {("slurmguard_drains_total", (("cause", 'we"ird\\'), ("source", "gate"))): 2,
                   ("slurmguard_gate_jobs_total", (("result", "allowed"),)): 1}
    assert textfile.bump_counters(str(tmp_path / "missing"), "g.prom", helps, {k: 1}).startswith(
        "metrics textfile")
