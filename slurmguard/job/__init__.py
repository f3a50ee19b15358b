"""The job side: what runs inside or beside a job.

``wrapper`` (`slurmguard run`), ``checkpoint`` (the newest complete checkpoint),
``exitmap`` (exit -> requeue or not), ``requeue`` (the requeue watcher). The training
processes' own API is the public top-level ``slurmguard.progress``.
"""
