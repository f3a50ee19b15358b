"""Triage: rank suspect nodes from the store, and collect evidence from nodes over SSH.

Nothing here is imported by the hooks; paramiko and tqdm are imported only by
:mod:`slurmguard.triage.collect` when `slurmguard triage collect` runs. Node sets are
expanded, and node names checked (they become bundle directories), by
:mod:`slurmguard.nodeset`.
"""
