"""Run a set of checks inside a budget: gather each source once, then run the pure checks.

Sources are gathered concurrently, one daemon thread each, with a per-source timeout that
never passes the hook's total budget. A source that does not answer in time is abandoned (its
thread may be stuck in the kernel; work that can hang for good, such as a `stat` of a dead NFS
mount, is done in a child process by the adapter so it can be killed), and every check that
reads it reports ``error: <source>: timed out``. A check that raises reports ``error`` too:
slurmguard's own faults are never node faults.
"""

import json
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from slurmguard import sitemod
from slurmguard.atomic import write_atomic
from slurmguard.checks.base import SOURCES, Check, CheckContext
from slurmguard.config import Config
from slurmguard.contract import CheckResult, Health, error, one_line, unsupported
from slurmguard.errors import ConfigError, Unsupported
from slurmguard.sources import GatherContext

STATE_FILE = "state.json"  # before 0.x: one file per host; read once, as a fallback


def state_path(cfg: Config, node: str) -> Path:
    """Where ``node``'s check state lives: ``state.<node>.json`` in hooks.state_dir.

    Per node, not per host: with several slurmd on one host (``slurmd -N n3``, Slurm's
    multiple-slurmd mode) one node's latched Xid must not fail the others. ``node`` is a
    validated Slurm node name (letters, digits, ``._-``): a safe file name."""
    from slurmguard.nodeset import is_node_name

    name = f"state.{node}.json" if is_node_name(node) else STATE_FILE
    return Path(cfg["hooks.state_dir"]) / name


class RunReport(NamedTuple):
    node: str
    hook: str
    results: tuple[CheckResult, ...]
    started: float  # wall-clock
    duration: float
    abandoned: tuple[str, ...] = ()  # sources whose threads were left running
    warnings: tuple[str, ...] = ()


def registry(cfg: Config) -> tuple[list[Check], dict[str, str]]:
    """Every check and source: the built-in list plus ``checks.site_modules``.

    A site module exports ``CHECKS`` (a list of Check) and may export ``SOURCES`` (name ->
    "module:function"). A name that clashes with a built-in check or source is refused.
    """
    from slurmguard.checks import ALL_CHECKS

    key = "checks.site_modules"
    checks, sources = {c.name: c for c in ALL_CHECKS}, dict(SOURCES)
    for mod_name, mod in sitemod.load(key, cfg[key]):
        for name, target in getattr(mod, "SOURCES", {}).items():
            sitemod.add(key, mod_name, "source", sources, name, target)
        for c in getattr(mod, "CHECKS", []):
            sitemod.add(key, mod_name, "check", checks, c.name, c)
            missing = [s for s in c.sources if s not in sources]
            if missing:
                raise ConfigError(f"{key}: check {c.name!r} reads unknown source {missing[0]!r}")
    return list(checks.values()), sources


def select_checks(cfg: Config, hook: str, only: Sequence[str] = (),
                  available: Sequence[Check] | None = None) -> list[Check]:
    """The checks a hook runs: the hook's list (or ``only``), minus ``checks.disabled``."""
    all_checks = list(available) if available is not None else registry(cfg)[0]
    BY_NAME = {c.name: c for c in all_checks}

    names = list(only) if only else list(cfg[f"hooks.{hook}"])
    key = "--only" if only else f"hooks.{hook}"
    disabled = set(cfg["checks.disabled"])
    for name in disabled:
        if name not in BY_NAME:
            raise ConfigError(f"checks.disabled: unknown check {name!r}")
    if "all" in names:
        chosen = list(all_checks)
    else:
        chosen = []
        for name in names:
            if name not in BY_NAME:
                raise ConfigError(f"{key}: unknown check {name!r} (see `slurmguard checks`)")
            if BY_NAME[name] not in chosen:
                chosen.append(BY_NAME[name])
    return [c for c in chosen if c.name not in disabled]


def resolve_source(target: Any) -> Any:
    """A source table entry as a function of (cfg, ctx): "module:function" is imported; a
    callable (the resident agent's cached and live sources, slurmguard/node/agent.py) is itself."""
    return sitemod.resolve(target)


class _Gather(threading.Thread):
    def __init__(self, name: str, target: str | Any, cfg: Config, ctx: GatherContext) -> None:
        super().__init__(name=f"gather-{name}", daemon=True)
        self.target, self.cfg, self.ctx = target, cfg, ctx
        self.value: Any = None
        self.exc: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = resolve_source(self.target)(self.cfg, self.ctx)
        except BaseException as exc:  # reported as the source's outcome, never raised
            self.exc = exc


def run_checks(
    cfg: Config,
    checks: Sequence[Check],
    *,
    hook: str,
    node: str,
    job_id: str | None = None,
    job_uid: int | None = None,
    deadline: float | None = None,
    sources: Mapping[str, Any] | None = None,
) -> RunReport:
    """Gather the sources ``checks`` need, run them, and return every result.

    ``deadline`` (a ``time.monotonic()`` value) bounds the gathering; by default it is the
    per-source timeout ``hooks.check_timeout`` from now. ``sources`` overrides the source
    table: "module:function" strings, or callables taking (cfg, ctx) (the resident agent
    plugs in its cached and live sources this way, so the checks, their timeouts and the
    error handling are the very same code as in a hook process).
    """
    started_wall, t0 = time.time(), time.monotonic()
    per_source = float(cfg["hooks.check_timeout"])
    gather_deadline = min(t0 + per_source, deadline) if deadline else t0 + per_source
    ctx = GatherContext(node=node, hook=hook, deadline=gather_deadline, job_id=job_id,
                        job_uid=job_uid)
    gathered = gather(cfg, checks, ctx, SOURCES if sources is None else sources)

    path = state_path(cfg, node)
    warnings: list[str] = []
    # Load, evaluate and save under the node's state lock: a prolog and a health check that
    # gathered at the same moment must not both count one change (a remapped row's growth,
    # an Xid read past the cursor); the second evaluates against the first's saved state.
    # Gathering (the slow part) is outside it, so a hook waits milliseconds, not a check.
    with _state_locked(path) as locked:
        previous_state = _load_node_state(path)
        results, new_state = evaluate(cfg, checks, gathered, previous_state, now=started_wall,
                                      hook=hook, node=node, t0=t0)
        if new_state:
            problem = _save_state(path, {**previous_state, **new_state})
            if problem:
                warnings.append(problem)
    if locked:
        warnings.append(locked)
    return RunReport(node, hook, tuple(results), started_wall, time.monotonic() - t0,
                     gathered.abandoned, tuple(warnings))


class Gathered(NamedTuple):
    """The outcome of gathering: one finished or abandoned thread per source."""

    threads: Mapping[str, _Gather]
    deadline: float  # the time.monotonic() gathering was bounded by
    done_at: float  # time.monotonic() when gathering ended
    abandoned: tuple[str, ...]  # sources whose threads were still running then

    def values(self) -> dict[str, Any]:
        return {s: t.value for s, t in self.threads.items() if not t.is_alive() and t.exc is None}


def gather(cfg: Config, checks: Sequence[Check], ctx: GatherContext,
           table: Mapping[str, str]) -> Gathered:
    """Step 1: read every source ``checks`` need once, concurrently, until ``ctx.deadline``."""
    needed = sorted({s for c in checks for s in c.sources})
    threads = {s: _Gather(s, table[s], cfg, ctx) for s in needed}
    for t in threads.values():
        t.start()
    for t in threads.values():
        t.join(max(0.0, ctx.deadline - time.monotonic()))
    abandoned = tuple(s for s, t in threads.items() if t.is_alive())
    return Gathered(threads, ctx.deadline, time.monotonic(), abandoned)


def evaluate(cfg: Config, checks: Sequence[Check], gathered: Gathered,
             previous_state: Mapping[str, Any], *, now: float, hook: str, node: str,
             t0: float) -> tuple[list[CheckResult], dict[str, Any]]:
    """Step 2: run each pure check on what was gathered. Returns the results and the state
    the checks want kept for the next run. A check that raises, or whose source failed, is
    an ``error``/``unsupported`` result, never a crash."""
    values = gathered.values()
    new_state: dict[str, Any] = {}
    results: list[CheckResult] = []
    for c in checks:
        r = _source_problem(c, gathered.threads, gathered.deadline - t0)
        if r is not None:
            results.append(r._replace(duration=gathered.done_at - t0))
            continue
        cctx = CheckContext(
            params=_params(cfg, c.area),
            sources={s: values[s] for s in c.sources},
            previous=previous_state.get(c.name, {}),
            now=now,
            hook=hook,
            node=node,
        )
        results.append(_run_one(c, cctx))
        if cctx.new_state:
            new_state[c.name] = cctx.new_state
    return results, new_state


def _run_one(c: Check, cctx: CheckContext) -> CheckResult:
    t_check = time.monotonic()
    try:
        r = c.run(cctx)
        if not isinstance(r, CheckResult):
            r = error(c.name, f"check returned {type(r).__name__}, not a CheckResult")
    except Exception as exc:  # a bug in a check: an error result, never a crash
        r = error(c.name, f"check raised {type(exc).__name__}: {exc}")
    return r._replace(name=c.name, duration=time.monotonic() - t_check)


def _source_problem(c: Check, threads: Mapping[str, _Gather], timeout: float) -> CheckResult | None:
    """An unsupported/error result when a source this check reads is missing, else None."""
    for s in c.sources:
        t = threads[s]
        if t.is_alive():
            return error(c.name, f"{s}: timed out after {max(timeout, 0):.1f}s")
        if isinstance(t.exc, Unsupported):
            return unsupported(c.name, f"{s}: {t.exc.message}")
        if t.exc is not None:
            return error(c.name, f"{s}: {type(t.exc).__name__}: {t.exc}")
    return None


def _params(cfg: Config, area: str) -> Mapping[str, Any]:
    try:
        return cfg.section(f"checks.{area}")
    except KeyError:
        return {}


def _load_state(path: Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _load_node_state(path: Path) -> dict[str, Any]:
    """A node's state; a host that kept one state.json (before per-node state) carries it
    over to its node once, so an upgrade forgets no latched Xid."""
    if path.exists():
        return _load_state(path)
    return _load_state(path.with_name(STATE_FILE))


STATE_LOCK_WAIT = 2.0  # seconds a run waits for another run's evaluate-and-save


@contextmanager
def _state_locked(path: Path, wait: float = STATE_LOCK_WAIT) -> Iterator[str]:
    """Hold the node's state lock (``flock`` on ``<state file>.lock``) for the ``with`` block.
    Yields "" with the lock held, or a warning when another run held it for ``wait`` seconds
    (the run then goes on without it: a stuck run must not stop the node's checks). A lock
    file that cannot be opened yields "" unlocked: the save says what is wrong with the
    directory."""
    import fcntl

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.with_name(path.name + ".lock"),
                     os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError:
        yield ""
        return
    try:
        end = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= end:
                    yield (f"check state {path} was locked by another run for {wait:g}s: "
                           "evaluated without the lock")
                    return
                time.sleep(0.01)
        yield ""
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _save_state(path: Path, state: dict[str, Any]) -> str | None:
    """Write atomically; a failure is a warning (a checker problem), never a node fault.
    Not durable: a lost cursor after a power loss means one first-run window, and a latch
    ends with the boot anyway; an fsync per hook would cost the budget on a busy disk."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(state, sort_keys=True), mode=0o644, durable=False)
        return None
    except OSError as exc:
        return one_line(f"cannot save check state to {path}: {exc.strerror or exc}")


def remember(cfg: Config, node: str, name: str, values: Mapping[str, Any]) -> str | None:
    """Merge ``values`` into check ``name``'s saved state (what the hook learnt outside the
    check, e.g. Slurm's Gres for gpu-count); written only on a change. Returns a warning."""
    path = state_path(cfg, node)
    with _state_locked(path) as locked:
        state = _load_node_state(path)
        mine = state.get(name) if isinstance(state.get(name), dict) else {}
        if all(mine.get(k) == v for k, v in values.items()):
            return locked or None
        state[name] = {**mine, **values}
        return _save_state(path, state) or locked or None


def forget_state(cfg: Config, names: Sequence[str], node: str) -> list[str]:
    """Drop the saved state of these checks (e.g. latched Xids after a GPU reset).

    The read cursor (key ``cursor``) is kept so already-read log lines are not read again.
    Returns the names that had state. Unknown names are refused with a ConfigError.
    """
    known = {c.name for c in registry(cfg)[0]}
    for n in names:
        if n not in known:
            raise ConfigError(f"--forget: unknown check {n!r} (see `slurmguard checks`)")
    path = state_path(cfg, node)
    state = _load_node_state(path)
    had = [n for n in names if n in state]
    for n in had:
        # Keep the read cursor: forgetting it would make the check read old log lines again.
        kept = {k: v for k, v in state[n].items() if k == "cursor"} if isinstance(state[n], dict) else {}
        state[n] = kept
    if had:
        problem = _save_state(path, state)
        if problem:
            raise ConfigError(problem)
    return had


def worst(results: Iterable[CheckResult]) -> Health:
    order = [Health.HEALTHY, Health.UNSUPPORTED, Health.DEGRADED, Health.ERROR, Health.UNHEALTHY]
    return max((r.health for r in results), key=order.index, default=Health.HEALTHY)
