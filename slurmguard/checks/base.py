"""What a check is: a name, the data sources it reads, and a pure function of them.

A hook gathers each source once (one NVML pass, one kernel-log read, one sysfs walk) into a
snapshot; every check then reads that snapshot and its area's params and returns one
:class:`~slurmguard.contract.CheckResult`. Checks never touch the world themselves, so they are
tested with hand-built inputs.
"""

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from slurmguard.contract import CheckResult

# Data sources: name -> "module:function". Imported lazily, only when an enabled check needs
# one, so the hook path never imports what it does not use. A gather function takes
# (cfg: Config, ctx: slurmguard.sources.GatherContext) and returns the source's data, raising
# slurmguard.errors.Unsupported when the source does not exist on this node.
SOURCES: dict[str, str] = {
    "nvml": "slurmguard.adapters.nvml:gather",
    "kmsg": "slurmguard.adapters.kmsg:gather",
    "ib": "slurmguard.adapters.sysfs:gather_ib",
    "fs": "slurmguard.adapters.fs:gather",
    "host": "slurmguard.adapters.host:gather",
    "procs": "slurmguard.adapters.host:gather_procs",
    "timesync": "slurmguard.adapters.timesync:gather",
    "munge": "slurmguard.adapters.host:gather_munge",
}


class CheckContext:
    """The inputs of one check: its area's params, the gathered sources, its saved state.

    A plain class, not a dataclass (see slurmguard.contract): ``new_state`` is written by the
    check and saved for its next run."""

    __slots__ = ("params", "sources", "previous", "now", "hook", "node", "new_state")

    def __init__(self, params: Mapping[str, Any], sources: Mapping[str, Any],
                 previous: Mapping[str, Any] | None = None, now: float = 0.0,
                 hook: str = "check", node: str = "",
                 new_state: dict[str, Any] | None = None) -> None:
        self.params = params
        self.sources = sources
        self.previous: Mapping[str, Any] = {} if previous is None else previous
        self.now = now  # wall-clock time (time.time()) of the run
        self.hook = hook
        self.node = node
        self.new_state: dict[str, Any] = {} if new_state is None else new_state

    def __repr__(self) -> str:
        return (f"CheckContext(hook={self.hook!r}, node={self.node!r}, "
                f"sources={sorted(self.sources)!r}, params={dict(self.params)!r})")


CheckFn = Callable[[CheckContext], CheckResult]


class Check(NamedTuple):
    name: str  # kebab-case, stable: it is stored and appears in drain reasons
    area: str  # config table checks.<area>
    sources: tuple[str, ...]
    run: CheckFn
    summary: str  # one line for `slurmguard checks` and docs


def check(name: str, area: str, sources: tuple[str, ...], summary: str) -> Callable[[CheckFn], Check]:
    """Decorator turning a function of CheckContext into a registered-able Check."""

    def wrap(fn: CheckFn) -> Check:
        return Check(name, area, tuple(sources), fn, summary)

    return wrap
