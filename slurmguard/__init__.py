"""slurmguard: keep GPU time useful on Slurm clusters."""

__version__ = "0.1.0"
