"""The Slurm adapter: every call to Slurm's commands and every parse of their output.

``commands`` (scontrol/sinfo/squeue: drain, undrain, node and job views), ``parse`` (pure
parsers of their output across versions), ``conf`` (slurm.conf and `scontrol show config`),
``marks`` (probation weight/feature marks), ``burnin`` (burn-in job submission).
"""
