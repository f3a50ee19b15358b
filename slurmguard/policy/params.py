"""Policy parameters: the ``[policy]`` config section, declared here once with every
threshold (lemon, flapping, blast radius, probation), and read once into PolicyParams.

Nothing else states a threshold: config registers :data:`SECTION`, PolicyParams takes its
defaults from it, and ``Store.nodes.lemon_candidates`` asks :func:`slurmguard.policy.lemon.lemon_verdict`.
"""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from slurmguard.fieldtypes import Bool, Choice, Float, Int, Schema, Str, StrList, Table

SECTION: Schema = {
    "mode": Choice("act", ["observe", "act"], "observe: run every check, store every record, "
                   "write what slurmguard would have done to the ledger (would-events) and "
                   "change nothing in Slurm or Kubernetes; act: drain, repair, requeue. "
                   "Per [[group]]; an observing group acts nowhere, whatever repair.mode says "
                   "(docs/policy.md, \"Observe mode\")"),
    "window": Float(3600.0, "seconds of history the lemon and flapping rules look at", minimum=1.0),
    "lemon_failures": Int(3, "failures (unhealthy runs or foreign drains) in window => lemon", minimum=1),
    "lemon_rate_factor": Float(5.0, "lemon when the node's failure rate is this many times the fleet's", minimum=1.0),
    "lemon_rate_min_runs": Int(10, "runs a node needs in window before the rate rule applies", minimum=1),
    "lemon_rate_floor": Float(0.5, "and its failure rate is at least this", minimum=0.0),
    "flap_transitions": Int(4, "pass<->fail changes in window => flapping (counts as failing)", minimum=2),
    "burnin_after_lemon": Bool(True, "a lemon needs a burn-in (or an admin) before it runs jobs"),
    "blast_window": Float(3600.0, "seconds over which drains are counted for the caps", minimum=1.0),
    "blast_max_nodes": Int(50, "never drain more than this many nodes of the fleet for one cause in blast_window", minimum=1),
    "blast_max_percent": Float(10.0, "... nor more than this percent of a partition or group (at least 1 node)", minimum=0.0),
    "second_look_after": Int(2, "a node's own drain (its hooks', or the gate's) for a cause "
                             "that at least this many other nodes were drained for in the last "
                             "second_look_window seconds waits for the node's next check to fail "
                             "too (a brief shared fault then drains nothing); 0: off "
                             "(docs/policy.md, \"Second look\")", minimum=0),
    "second_look_checks": StrList(["fs-mount", "ib-link", "ib-counters", "host-munge",
                                   "host-timesync"],
                                  "the checks a second look applies to: those whose failure a "
                                  "shared service can cause for seconds (a filer, the fabric, "
                                  "munge, time); a node's own hardware (a lost GPU, an Xid) "
                                  "drains at once, however many nodes fail it"),
    "second_look_window": Float(120.0, "seconds back the other nodes' drains are counted for a "
                                "second look", minimum=1.0),
    "second_look_delay": Float(20.0, "seconds after its held drain a node's next failing check "
                               "drains it (through the caps as before)", minimum=0.0),
    "groups": Table("named topology groups (rack, switch): name = \"NodeSet\""),
    "probation_jobs": Int(3, "passing jobs a returned node needs to leave probation", minimum=0),
    "probation_mark": Choice("feature", ["feature", "weight", "none"], "how Slurm marks probation"),
    "probation_feature": Str("sg_probation", "feature added while on probation"),
    "probation_weight": Int(65000, "node Weight while on probation (higher = picked last)", minimum=1),
}


def _default(key: str) -> Any:
    return SECTION[key].default  # type: ignore[union-attr]


class PolicyParams(NamedTuple):
    window: float = _default("window")
    lemon_failures: int = _default("lemon_failures")
    lemon_rate_factor: float = _default("lemon_rate_factor")
    lemon_rate_min_runs: int = _default("lemon_rate_min_runs")
    lemon_rate_floor: float = _default("lemon_rate_floor")
    flap_transitions: int = _default("flap_transitions")
    burnin_after_lemon: bool = _default("burnin_after_lemon")
    blast_window: float = _default("blast_window")
    blast_max_nodes: int = _default("blast_max_nodes")
    blast_max_percent: float = _default("blast_max_percent")
    second_look_after: int = _default("second_look_after")
    second_look_checks: tuple[str, ...] = tuple(_default("second_look_checks"))
    second_look_window: float = _default("second_look_window")
    second_look_delay: float = _default("second_look_delay")
    groups: Mapping[str, str] = MappingProxyType({})  # name -> NodeSet pattern
    probation_jobs: int = _default("probation_jobs")

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> "PolicyParams":
        names = set(cls._fields)
        got = {k: v for k, v in section.items() if k in names}
        if "second_look_checks" in got:
            got["second_look_checks"] = tuple(got["second_look_checks"])
        return cls(**got)


def human_window(seconds: float) -> str:
    """3600 -> "1h", 5400 -> "90m", 86400 -> "1d", 45 -> "45s"."""
    s = int(round(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size and s % size == 0:
            return f"{s // size}{unit}"
    return f"{s}s"
