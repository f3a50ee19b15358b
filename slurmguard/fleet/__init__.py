"""Fleet reliability: episodes, figures, the node risk score and policy replay (docs/fleet.md).

Pure code over plain data (:mod:`slurmguard.fleet.history`); the store builds that data in
``slurmguard/store/fleet.py``, the CLI shows it (``slurmguard fleet report``, ``policy replay``).
"""
