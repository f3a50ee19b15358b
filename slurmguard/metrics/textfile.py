"""The node side: a node_exporter textfile per hook, written with the standard library only.

Each `slurmguard prolog|epilog|healthcheck` run rewrites ``<metrics.textfile_dir>/
slurmguard_hook_<hook>.prom`` (one file per hook, so a prolog and a healthcheck running at
the same time never write the same file)::

    slurmguard_check_health{hook="prolog",check="gpu-xid",health="unhealthy"} 1
    slurmguard_check_health{hook="prolog",check="gpu-xid",health="healthy"} 0
    ...
    slurmguard_hook_duration_seconds{hook="prolog"} 0.412
    slurmguard_hook_last_run_timestamp_seconds{hook="prolog"} 1796220000.5
    slurmguard_hook_verdict{hook="prolog",verdict="drain"} 1
    slurmguard_hook_drain_reason{hook="prolog",check="gpu-xid",reason="slurmguard: gpu-xid: Xid 79 on GPU 3"} 1
    slurmguard_hook_runs_total{hook="prolog",verdict="drain"} 17

The file is written under a temporary name that node_exporter ignores (``.``-prefixed, not
ending in ``.prom``; random and ``O_EXCL|O_NOFOLLOW``, as the directory may be shared) and
renamed over the old one (slurmguard.atomic), so a scrape sees the old file or the new one,
never half of one. No fsync: after a power loss the next run rewrites it. The
``_total`` counter continues from the file the previous run left; two runs of the same hook
at once take turns on ``.slurmguard_hook_<hook>.lock`` (waiting at most ~200 ms).

``slurmguard_hook_unrunnable.prom`` belongs to the entry scripts (prolog/, epilog/: they write
it when they cannot run slurmguard at all); nothing here writes or removes it, and no
family here has its metric's name.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping

from slurmguard.atomic import write_atomic
from slurmguard.contract import HEALTHS

# decide.Action values, plus the outcome of a run that slurmguard itself could not finish.
VERDICTS = ("pass", "drain", "undrain", "checker-error", "leave", "internal-error")
UNRUNNABLE_FILE = "slurmguard_hook_unrunnable.prom"  # the entry scripts' (contract 2)

CHECK_HEALTH = "slurmguard_check_health"
DURATION = "slurmguard_hook_duration_seconds"
LAST_RUN = "slurmguard_hook_last_run_timestamp_seconds"
VERDICT = "slurmguard_hook_verdict"
DRAIN_REASON = "slurmguard_hook_drain_reason"
RUNS = "slurmguard_hook_runs_total"

_HELP = {
    CHECK_HEALTH: ("gauge", "1 for the health the check had in the hook's last run, 0 for the others."),
    DURATION: ("gauge", "Seconds the hook's last run took, checks, drain and report included."),
    LAST_RUN: ("gauge", "Unix time the hook's last run ended."),
    VERDICT: ("gauge", "1 for the verdict of the hook's last run, 0 for the others."),
    DRAIN_REASON: ("gauge", "1 while the hook's last run decided to drain; the reason is the drain reason."),
    RUNS: ("counter", "Hook runs on this node by verdict."),
}


def hook_file(directory: str, hook: str) -> str:
    return os.path.join(directory, f"slurmguard_hook_{hook}.prom")


def escape(value: str) -> str:
    """A label value in the text exposition format."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(hook: str, results: Iterable[tuple[str, str]], verdict: str, reason: str,
           duration: float, *, now: float, runs: Mapping[str, int], check: str = "") -> str:
    """The file's text. ``results``: (check, health) pairs; ``runs``: counts per verdict,
    this run included; ``check``: the first failing check of a drain."""
    h = escape(hook)
    out: list[str] = []

    def family(name: str, lines: list[str]) -> None:
        kind, text = _HELP[name]
        out.append(f"# HELP {name} {text}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(lines)

    rows = []
    for name, health in results:
        c = escape(name)
        rows += [f'{CHECK_HEALTH}{{hook="{h}",check="{c}",health="{x}"}} {int(x == health)}'
                 for x in HEALTHS]
    family(CHECK_HEALTH, rows)
    family(DURATION, [f'{DURATION}{{hook="{h}"}} {round(duration, 6)!r}'])
    family(LAST_RUN, [f'{LAST_RUN}{{hook="{h}"}} {round(now, 3)!r}'])
    family(VERDICT, [f'{VERDICT}{{hook="{h}",verdict="{v}"}} {int(v == verdict)}' for v in VERDICTS])
    if verdict == "drain":
        family(DRAIN_REASON, [f'{DRAIN_REASON}{{hook="{h}",check="{escape(check)}",'
                              f'reason="{escape(reason)}"}} 1'])
    family(RUNS, [f'{RUNS}{{hook="{h}",verdict="{v}"}} {n}' for v, n in sorted(runs.items())])
    return "\n".join(out) + "\n"


def previous_runs(path: str) -> dict[str, int]:
    """The per-verdict run counts in the file the previous run left (empty if none)."""
    counts: dict[str, int] = {}
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(1 << 20)
    except OSError:
        return counts
    prefix = RUNS + "{"
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        labels, _, value = line[len(prefix):].rpartition("} ")
        marker = 'verdict="'
        at = labels.find(marker)
        if at < 0:
            continue
        verdict = labels[at + len(marker):].split('"', 1)[0]
        try:
            counts[verdict] = int(float(value))
        except ValueError:
            continue
    return counts


def write_hook(directory: str, hook: str, *, results: Iterable[tuple[str, str]], verdict: str,
               reason: str = "", check: str = "", duration: float,
               now: float | None = None) -> str | None:
    """Rewrite this hook's textfile atomically. Returns None, or a one-line problem (the
    caller logs it: a metrics file that cannot be written is never a node fault)."""
    path = hook_file(directory, hook)
    lock = _lock(directory, hook)
    try:
        runs = previous_runs(path)
        runs[verdict] = runs.get(verdict, 0) + 1
        text = render(hook, results, verdict, reason, duration,
                      now=time.time() if now is None else now, runs=runs, check=check)
        write_atomic(path, text, mode=0o644, durable=False)
    except OSError as exc:
        return f"metrics textfile {path}: {exc.strerror or exc}"
    finally:
        if lock is not None:
            os.close(lock)  # releases the flock
    return None


def labels(**kw: str) -> str:
    """``a="x",b="y"`` with values escaped (the key of :func:`bump_counters`)."""
    return ",".join(f'{k}="{escape(str(v))}"' for k, v in kw.items())


def read_counters(path: str, names: Iterable[str]) -> dict[tuple[str, str], float]:
    """Samples of the families ``names`` in a textfile: (name, labels text) -> value."""
    wanted = set(names)
    out: dict[tuple[str, str], float] = {}
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(1 << 20)
    except OSError:
        return out
    for line in text.splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        name, _, rest = line.partition("{")
        lbl, _, value = rest.rpartition("} ")
        if name in wanted:
            try:
                out[(name, lbl)] = float(value)
            except ValueError:
                continue
    return out


def bump_counters(directory: str, filename: str, helps: Mapping[str, str],
                  add: Mapping[tuple[str, str], int]) -> str | None:
    """Add ``add`` ((family, :func:`labels` text) -> n) to the counters kept in
    ``<directory>/<filename>``, rewriting it atomically under a lock (for commands that run
    once per job, like the gate). Families: ``helps`` (name -> HELP text); every series the
    file had is kept. Returns None or a one-line problem, never raises."""
    path = os.path.join(directory, filename)
    lock = _lock(directory, filename)
    try:
        counts = read_counters(path, helps)
        for key, n in add.items():
            counts[key] = counts.get(key, 0) + n
        out = []
        for name, text in helps.items():
            out += [f"# HELP {name} {text}", f"# TYPE {name} counter"]
            out += [f"{name}{{{lbl}}} {int(v)}" for (n, lbl), v in sorted(counts.items()) if n == name]
        write_atomic(path, "\n".join(out) + "\n", mode=0o644, durable=False)
    except OSError as exc:
        return f"metrics textfile {path}: {exc.strerror or exc}"
    finally:
        if lock is not None:
            os.close(lock)
    return None


def _lock(directory: str, hook: str) -> int | None:
    """Serialize two runs of the same hook on a node (two jobs starting at once), so the
    runs counter loses no increment. Waits at most ~200 ms, then goes on without the lock
    (the count may then miss one run): a metrics file never holds up a job for long."""
    import fcntl

    try:
        name = hook if hook.endswith(".prom") else f"slurmguard_hook_{hook}"
        fd = os.open(os.path.join(directory, f".{name}.lock"),
                     os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError:
        return None
    for _ in range(40):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            time.sleep(0.005)
        except OSError:
            break
    os.close(fd)
    return None
