"""Probation marks in Slurm: a node feature (default ``sg_probation``) or a node weight.

A returned node stays usable but marked until it has passed M jobs (policy.probation_jobs):
the feature makes probation visible (``sinfo -o "%N %f"``) and lets a site steer work with
constraints; the weight makes the scheduler pick the node last. Both are ``scontrol update`` changes, lost on a slurmctld
reconfigure, so serve re-applies them on each policy pass while probation lasts.
"""

from __future__ import annotations

from slurmguard.adapters.slurm.commands import Change, NodeInfo, SlurmCLI, validate_node_name


def _features(info: NodeInfo) -> list[str]:
    raw = str(info.raw.get("AvailableFeatures") or "")
    if raw and raw != "(null)":
        return [f for f in raw.split(",") if f]
    return list(info.features)


def has_feature(info: NodeInfo, feature: str) -> bool:
    return feature in _features(info)


def set_feature(cli: SlurmCLI, info: NodeInfo, feature: str, on: bool) -> bool:
    """Add or remove ``feature`` on the node; True if Slurm was changed."""
    validate_node_name(info.name)
    feats = _features(info)
    if (feature in feats) == on:
        return False
    new = feats + [feature] if on else [f for f in feats if f != feature]
    value = ",".join(new)
    return cli._change("scontrol", "update", f"nodename={info.name}",
                       f"AvailableFeatures={value}", f"ActiveFeatures={value}") is Change.MADE


def weight(info: NodeInfo) -> int | None:
    try:
        return int(str(info.raw.get("Weight")))
    except ValueError:
        return None


def set_weight(cli: SlurmCLI, info: NodeInfo, value: int) -> bool:
    """Set the node's scheduling weight; True if Slurm was changed."""
    validate_node_name(info.name)
    if weight(info) == value:
        return False
    return cli._change("scontrol", "update", f"nodename={info.name}",
                       f"Weight={int(value)}") is Change.MADE
