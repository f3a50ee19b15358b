"""The allocation gate: PrologSlurmctld's verdict on a job's nodes.

``answer`` (the verdict, read from the store with the standard library) and ``sock`` (the
unix socket serve answers it on, for the compiled gate client).
"""
