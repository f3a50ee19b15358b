"""The node side: what runs on a compute node from Slurm's hooks and the resident agent.

``hooks`` (prolog, epilog, healthcheck), ``runner`` (gather and evaluate the checks),
``decide`` (pure: results -> action), ``record`` and ``delivery`` (the result to serve, or
the spool), ``agent`` (the resident process the compiled hook client asks). Standard library
only on the hook path (tests/test_hook_imports.py).
"""
