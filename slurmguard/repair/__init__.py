"""Autonomous repair of the nodes slurmguard drained (docs/repair.md).

* :mod:`slurmguard.policy.repair_params`: the ``[repair]`` config section (ladders, limits, commands);
* :mod:`slurmguard.repair.plan`: the pure decision core: ledger events in, next actions out;
* :mod:`slurmguard.repair.loop`: serve's repair pass, which gathers the inputs, carries the
  actions out through Slurm and the site's commands, and writes every step to the ledger.
"""
