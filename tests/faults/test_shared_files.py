"""Local-attacker cases: every file slurmguard writes where someone else might have planted a
symlink (progress files, run records, the spool, triage bundles, metrics textfiles) is made
safely: O_NOFOLLOW/O_EXCL, a private mkdtemp directory, or write-to-temp-and-rename. Each
case plants a symlink to a victim file and checks the victim is untouched.
"""

from __future__ import annotations

import inspect
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support.helpers import sg_argv, sg_env
from support.reliability import record

from slurmguard.adapters import spool
from slurmguard.errors import InputError
from slurmguard.node import delivery
from slurmguard.node.record import make_record

CHILD = ("import os; from slurmguard import progress; "
         "print(os.environ['SLURMGUARD_PROGRESS']); progress.step(1); progress.step(2)")
# The case each test showed, by test name, set as its last act (so only a case that passed is
# here): test_zz_record_row runs the ones this session has not (run alone, or in another
# order) before it writes the row.
CASES: dict[str, str] = {}


def _case(what: str) -> None:
    CASES[sys._getframe(1).f_code.co_name] = what


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim"
    v.write_text("precious\n")
    return v


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = sg_env(**{"SLURMGUARD_PROGRESS_INTERVAL": "0", "SLURM_JOB_ID": "777", **(env or {})})
    e.pop("SLURMGUARD_PROGRESS", None)
    return subprocess.run(sg_argv("run", *args, "--", sys.executable, "-c", CHILD), env=e,
                          capture_output=True, text=True, timeout=60)


def test_progress_without_checkpoint_dir_is_private(tmp_path: Path, victim: Path) -> None:
    # The old name was predictable: $TMPDIR/slurmguard-progress-<job>-<pid>.jsonl.
    tmpdir = tmp_path / "shared-tmp"
    tmpdir.mkdir(mode=0o1777)
    for pid in range(os.getpid(), os.getpid() + 200):  # plant at the names it would pick
        os.symlink(victim, tmpdir / f"slurmguard-progress-777-{pid}.jsonl")
    r = _run(env={"TMPDIR": str(tmpdir)})
    assert r.returncode == 0, r.stderr
    path = Path(r.stdout.strip())
    assert path.parent.parent == tmpdir and path.parent.name.startswith("slurmguard-run-")
    assert not path.parent.exists(), "the private directory is removed at the end"
    assert victim.read_text() == "precious\n"
    _case("progress file without --checkpoint-dir (200 planted names)")


def test_progress_symlink_in_checkpoint_dir_is_refused(tmp_path: Path, victim: Path) -> None:
    ckpt = tmp_path / "ckpt"
    (ckpt / ".slurmguard").mkdir(parents=True)
    os.symlink(victim, ckpt / ".slurmguard" / "progress-777.jsonl")
    os.symlink(victim, ckpt / ".slurmguard" / "runs.jsonl")
    r = _run("--checkpoint-dir", str(ckpt))
    assert r.returncode == 0, r.stderr
    assert "cannot use" in r.stderr and "private one" in r.stderr
    assert "could not record the run" in r.stderr
    assert Path(r.stdout.strip()).parent.name.startswith("slurmguard-run-")
    assert victim.read_text() == "precious\n"
    _case("progress-JOB.jsonl and runs.jsonl symlinks in .slurmguard/")


def test_state_dir_symlink_is_not_used(tmp_path: Path, victim: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, ckpt / ".slurmguard")
    r = _run("--checkpoint-dir", str(ckpt))
    assert r.returncode == 0, r.stderr
    assert not any(elsewhere.iterdir())
    _case(".slurmguard/ itself a symlink")


def test_progress_library_refuses_a_symlink(tmp_path: Path, victim: Path) -> None:
    link = tmp_path / "progress.jsonl"
    os.symlink(victim, link)
    code = ("from slurmguard import progress; progress.step(1); progress.step(2); "
            "progress.checkpoint_saved('/x', 2)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                       env=sg_env(SLURMGUARD_PROGRESS=str(link), SLURMGUARD_PROGRESS_INTERVAL="0"))
    assert r.returncode == 0
    assert r.stderr.count("cannot report") == 1  # said once, training goes on
    assert victim.read_text() == "precious\n"
    _case("SLURMGUARD_PROGRESS pointing at a symlink")


def test_hostile_job_id_never_becomes_a_path(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for job in ("../../escape", "a/b", "$(touch x)", "..", "x\ny"):
        r = _run("--checkpoint-dir", str(ckpt), env={"SLURM_JOB_ID": job})
        assert r.returncode == 0, r.stderr
        path = Path(r.stdout.strip())
        assert path.parent == ckpt / ".slurmguard" and path.name.startswith("progress-pid")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    _case("hostile SLURM_JOB_ID in the progress file name (5)")


def _spool_cfg(spool_dir: Path) -> dict:
    class Cfg:
        def __getitem__(self, key: str) -> str:
            return {"serve.auth": "token", "hooks.token_file": "/nonexistent"}[key]

        def section(self, name: str) -> dict:
            return {"report_url": "http://127.0.0.1:9/ingest", "token_file": "/nonexistent",
                    "spool_dir": str(spool_dir), "spool_max": 100, "report_timeout": 0.2}
    return Cfg()


def _rec() -> dict:
    return make_record("n1", "prolog", [], "pass", "")


def test_spool_dir_symlink_or_shared_is_refused(tmp_path: Path, victim: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "spool-link"
    os.symlink(target, link)
    out = delivery.deliver(_rec(), _spool_cfg(link))
    assert out.startswith("lost: spool") and "is a symlink" in out
    assert not any(target.iterdir())
    shared = tmp_path / "spool-shared"
    shared.mkdir()
    shared.chmod(0o1777)
    out = delivery.deliver(_rec(), _spool_cfg(shared))
    assert out.startswith("lost: spool") and "writable by others" in out
    assert not any(shared.iterdir())
    _case("spool dir a symlink / world-writable")


def test_spool_lock_and_record_symlinks_are_not_followed(tmp_path: Path, victim: Path) -> None:
    sdir = tmp_path / "sdir"
    spool.write(_rec(), str(sdir), 100)
    os.symlink(victim, sdir / ".lock")
    with pytest.raises(OSError):
        delivery.replay_spool("http://127.0.0.1:9/ingest", "t", str(sdir), deadline=1e18)
    os.unlink(sdir / ".lock")
    os.symlink(victim, sdir / "00000000000000000000-planted.json")
    # A planted record file is not read (so never sent to serve), only removed; serve is
    # unreachable here, so the real record stays spooled.
    import time

    n = delivery.replay_spool("http://127.0.0.1:9/ingest", "t", str(sdir),
                            deadline=time.monotonic() + 2)
    assert n == 0 and victim.read_text() == "precious\n"
    assert not os.path.lexists(sdir / "00000000000000000000-planted.json")
    assert len(spool.pending(str(sdir))) == 1
    os.symlink(victim, sdir / ".dropped")
    assert spool.dropped_count(str(sdir)) == 0
    _case("spool .lock, record and .dropped symlinks")


def test_bundle_output_is_never_written_through_a_link(tmp_path: Path, victim: Path) -> None:
    from slurmguard.triage.bundle import Bundle, NodeEvidence

    link = tmp_path / "out-link"
    empty = tmp_path / "empty"
    empty.mkdir()
    os.symlink(empty, link)
    with pytest.raises(InputError, match="symlink"):
        Bundle(out_dir=str(link))
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    os.chown(foreign, 65534, 65534)
    with pytest.raises(InputError, match="owned by uid 65534"):
        Bundle(out_dir=str(foreign))
    # --tar: the old ".part" name was predictable; a symlink planted there is left alone.
    tar = tmp_path / "t.tar.gz"
    os.symlink(victim, tmp_path / "t.tar.gz.part")
    b = Bundle(tar_file=str(tar))
    ev = NodeEvidence("n1", "127.0.0.1", 22)
    ev.add_text("xid.log", "x\n")
    b.add(ev)
    b.finish()
    assert tar.is_file() and not tar.is_symlink() and victim.read_text() == "precious\n"
    assert stat.S_IMODE(tar.stat().st_mode) == 0o644
    with pytest.raises(InputError):
        b2 = Bundle(out_dir=str(tmp_path / "b2"))
        b2.add(NodeEvidence("../x", "h", 22))
    _case("bundle --out symlink / foreign dir, --tar .part symlink, node '../x'")


def test_textfile_replaces_a_planted_symlink(tmp_path: Path, victim: Path) -> None:
    from slurmguard.reconcile.metrics import Metrics

    path = tmp_path / "reconcile.prom"
    os.symlink(victim, path)
    m = Metrics(str(path))
    m.round("ok")
    m.write()
    assert not path.is_symlink() and victim.read_text() == "precious\n"
    _case("metrics textfile name a symlink (replaced, target untouched)")


def test_node_textfiles_are_not_written_through_planted_links(tmp_path: Path, victim: Path) -> None:
    from slurmguard.metrics import textfile

    d = tmp_path / "textfiles"
    d.mkdir(mode=0o1777)  # a shared directory, as some textfile collectors use
    pid = os.getpid()
    os.symlink(victim, d / f".slurmguard_hook_prolog.{pid}.tmp")  # the exact temp name
    os.symlink(victim, d / ".slurmguard_hook_prolog.lock")
    os.symlink(victim, d / f".slurmguard_gate.prom.{pid}.tmp")
    problem = textfile.write_hook(str(d), "prolog", results=[("gpu-xid", "healthy")],
                                  verdict="pass", reason="", duration=0.1)
    assert problem is None or "lock" not in problem
    assert textfile.bump_counters(str(d), "slurmguard_gate.prom", {"slurmguard_x_total": "x"},
                                  {("slurmguard_x_total", 'a="b"'): 1}) is None
    assert victim.read_text() == "precious\n"
    assert (d / "slurmguard_hook_prolog.prom").is_file()
    assert not (d / "slurmguard_hook_prolog.prom").is_symlink()
    _case("node textfile temp names and lock file symlinks (hook and gate files)")


def test_entry_script_textfile_is_not_written_through_planted_links(tmp_path: Path,
                                                                    victim: Path) -> None:
    from support.helpers import REPO

    textdir = tmp_path / "textfile"
    textdir.mkdir(mode=0o1777)
    state = tmp_path / "state"
    state.mkdir()
    defaults = tmp_path / "default"
    defaults.write_text(f"SLURMGUARD={tmp_path}/gone\nSLURMGUARD_STATE_DIR={state}\n"
                        f"SLURMGUARD_TEXTFILE_DIR={textdir}\n")
    script = tmp_path / "slurmguard-prolog"
    script.write_text((REPO / "prolog" / "slurmguard-prolog").read_text().replace(
        "SLURMGUARD_DEFAULTS=/etc/default/slurmguard", f"SLURMGUARD_DEFAULTS={defaults}"))
    script.chmod(0o755)
    # The old temp name was "$prom.$$": plant links at the next few hundred pids.
    last = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    prom = textdir / "slurmguard_hook_unrunnable.prom"
    for pid in range(last + 1, last + 400):
        os.symlink(victim, f"{prom}.{pid}")
    p = subprocess.run([str(script)], env={}, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert victim.read_text() == "precious\n"
    assert 'slurmguard_hook_unrunnable_total{hook="prolog"} 1' in prom.read_text()
    assert stat.S_IMODE(prom.stat().st_mode) == 0o644 and not prom.is_symlink()
    _case("entry script's textfile temp name (400 planted pids)")


def test_zz_record_row(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The row names the cases that passed in this session: a case that has not run yet
    (this test alone, or first in a shuffled order) runs here, with its own directory."""
    tests = {name: fn for name, fn in globals().items()
             if name.startswith("test_") and name != "test_zz_record_row" and callable(fn)}
    for name, fn in tests.items():
        if name in CASES:
            continue
        tmp = tmp_path_factory.mktemp(name[:40])
        args = {"tmp_path": tmp}
        if "victim" in inspect.signature(fn).parameters:
            v = tmp / "victim"
            v.write_text("precious\n")
            args["victim"] = v
        fn(**{k: a for k, a in args.items() if k in inspect.signature(fn).parameters})
    assert sorted(CASES) == sorted(tests), sorted(set(tests) - set(CASES))
    record("planted-symlinks", faults="local user plants symlinks / shared dirs",
           bad_inputs=f"{len(CASES)} cases: " + "; ".join(CASES[n] for n in tests),
           figures="every victim file unchanged")
