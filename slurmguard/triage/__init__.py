"""Triage: rank suspect nodes from the store, and collect evidence from nodes over SSH.

Nothing here is imported by the hooks; paramiko and tqdm are imported only by
:mod:`slurmguard.triage.collect` when `slurmguard triage collect` runs.
"""

from __future__ import annotations

import re

from slurmguard.errors import InputError

# Slurm node names as slurmguard accepts them: they become directory names in a bundle and
# words on remote command lines, so nothing beyond letters, digits, '.', '_', '-'.
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def expand_nodes(nodeset: str) -> list[str]:
    """Expand a NodeSet (``gpu[001-004],cpu7``) into validated node names, in order.

    Raises InputError naming the offending value for a malformed set or a hostile name.
    """
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError

    try:
        names = list(NodeSet(nodeset))
    except (NodeSetParseError, ValueError) as exc:
        raise InputError(f"NODESET: not a node set: {nodeset!r} ({exc})") from None
    if not names:
        raise InputError(f"NODESET: empty node set: {nodeset!r}")
    for name in names:
        validate_node_name(name)
    return names


def validate_node_name(name: str) -> str:
    """Return ``name`` if it is a plausible Slurm node name, else raise InputError.

    The Slurm adapter's rule, narrowed: no leading '_' and no '..', since here the name also
    becomes a directory in an evidence bundle.
    """
    from slurmguard.adapters.slurm import validate_node_name as slurm_rule

    slurm_rule(name)
    if not _NODE_NAME.match(name) or ".." in name:
        raise InputError(f"node name: refused hostile or malformed name {name!r}")
    return name
