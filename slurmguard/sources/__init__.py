"""What the node's data sources deliver: the types shared by the adapters that gather them
and the pure checks that read them.

They sit below both layers so that an adapter never imports a check and a check never imports
an adapter (tests/test_import_graph.py): :class:`GatherContext` (what a gather function is
told), ``nvml`` (the GPU snapshot), ``xidline`` (the driver's kernel-log lines), ``procs``
(what counts as a job's leftover process). Standard library only, NamedTuples: the hook path
imports them.
"""

from typing import NamedTuple


class GatherContext(NamedTuple):
    """What a gather function may know besides config: which node, which hook, the deadline."""

    node: str
    hook: str
    deadline: float  # time.monotonic() value by which the gather must be done
    job_id: str | None = None
    job_uid: int | None = None
