"""Goodput accounting: useful GPU time, and where the rest went (docs/goodput.md).

:mod:`~slurmguard.goodput.account` is the pure accounting; :mod:`~slurmguard.goodput.sources`
reads Slurm accounting, the wrapper's records and the store; :mod:`~slurmguard.goodput.report`
collects and renders.
"""
