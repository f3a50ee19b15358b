"""`slurmguard shadow report`: what observe mode would have done, against what happened to each
node in Slurm (docs/shadow.md). ``report`` is the pure join; ``gather`` reads its inputs."""
