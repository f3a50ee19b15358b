"""The ``[risk]`` config section: the node risk score's level, windows and weights, and its
uses (each off by default). Declared here once, like slurmguard/policy/params.py."""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from slurmguard.fieldtypes import Bool, Float, Int, Schema, Table

# The risk factors: name -> (default points per unit, cap in points, what one unit is). The
# weights are config keys ([risk.weights]); the caps keep one noisy signal from deciding alone.
FACTORS: dict[str, tuple[float, float, str]] = {
    "failures": (15.0, 50.0, "failure episode in the lookback (shared causes left out)"),
    "gpu_memory": (10.0, 25.0, "new lifetime uncorrectable ECC error (gpu-ecc's count grew) or "
                               "newly remapped row (gpu-remap) in recent_days, beyond the "
                               "node's own earlier rate"),
    "links": (10.0, 25.0, "day with a link-error warning (ib-counters, gpu-nvlink, gpu-pcie) in "
                          "recent_days, beyond the node's own earlier rate"),
    "thermal": (3.0, 15.0, "day with a thermal warning (gpu-thermal) in recent_days, beyond the "
                           "node's own earlier rate"),
    "xid": (5.0, 20.0, "day with an Xid that did not drain (gpu-xid warning) in recent_days, "
                       "beyond the node's own earlier rate"),
    "rising": (25.0, 25.0, "an area's warnings rising beyond chance: its recent units improbable "
                           "(p < 0.01, binomial) at the node's own earlier rate"),
    "burnin": (10.0, 25.0, "burn-in verdict: flagged = 1 unit, failed = 2.5 units"),
    "failed_jobs": (5.0, 20.0, "job whose epilog found the node unhealthy"),
}

SECTION: Schema = {
    "level": Float(30.0, "risk score (0-100) at or above which a node is called at risk",
                   minimum=0.0),
    "lookback_days": Float(30.0, "days of history the score reads", minimum=1.0),
    "recent_days": Float(10.0, "the warning factors count these last days against the node's "
                               "own rate in the rest of the lookback",
                         minimum=1.0),
    "horizon_days": Float(7.0, "replay: a flagged node that fails within this many days is a hit",
                          minimum=0.1),
    "weights": {name: Float(w, f"points per {what}", minimum=0.0)
                for name, (w, _cap, what) in FACTORS.items()},
    "probation_mark": Bool(False, "use: mark an at-risk node like probation (feature/weight) "
                                  "so large jobs land on the safest nodes first"),
    "gate_max_nodes": Int(0, "use: the gate refuses an at-risk node to jobs of more than this "
                             "many nodes, without draining it; requeue watch moves the job "
                             "(0: never)", minimum=0),
    "burnin_first": Bool(False, "use: burn-in queues at-risk nodes first"),
}

# The ``[fleet]`` section: what `fleet report --by model` groups by (Slurm does not know a
# node's GPU model; the site names it, like policy.groups names racks).
FLEET_SECTION: Schema = {
    "models": Table("GPU models for `fleet report --by model`: model = \"NodeSet\""),
    "metrics_window_days": Float(30.0, "days the fleet gauges of /metrics look back", minimum=1.0),
}


def _default(key: str) -> Any:
    return SECTION[key].default  # type: ignore[union-attr]


class RiskParams(NamedTuple):
    level: float = _default("level")
    lookback_days: float = _default("lookback_days")
    recent_days: float = _default("recent_days")
    horizon_days: float = _default("horizon_days")
    weights: Mapping[str, float] = MappingProxyType({})
    probation_mark: bool = _default("probation_mark")
    gate_max_nodes: int = _default("gate_max_nodes")
    burnin_first: bool = _default("burnin_first")

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> "RiskParams":
        names = set(cls._fields)
        kw = {k: v for k, v in section.items() if k in names}
        weights = {k: w for k, (w, _c, _d) in FACTORS.items()}
        weights.update({k: float(v) for k, v in dict(kw.get("weights") or {}).items()})
        kw["weights"] = MappingProxyType(weights)
        return cls(**kw)

    def weight(self, factor: str) -> float:
        return float(self.weights.get(factor, FACTORS[factor][0]))
