"""Nightly fleet burn-in: measure every node under load, find stragglers, keep them out.

Modules: :mod:`.stats` (pure straggler statistics), :mod:`.verdict` (pure: a night's runs and
values -> per-node verdicts and drain reasons), :mod:`.measure` (the measurement registry),
:mod:`.parse` (dcgmi/nccl-tests output parsers), :mod:`.worker` (the job body on the node),
:mod:`.submit` and :mod:`.apply` (Slurm and store side). docs/burnin.md.
"""
