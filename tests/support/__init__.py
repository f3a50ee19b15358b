"""The test harness: real components the suite starts (Slurm, PostgreSQL, sshd, slurmdbd,
`slurmguard serve`), site modules it loads, and the shared helpers (`wait_for`, `run_sg`).

Importable as ``support`` because tests/conftest.py puts tests/ on sys.path; subprocesses that
load a site module from here get tests/ on their PYTHONPATH (``support.faultsite``)."""
