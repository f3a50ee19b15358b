"""Prometheus metrics of slurmguard (docs/metrics.md lists every one).

Two halves, so that the hook path never imports prometheus_client:

- :mod:`slurmguard.metrics.textfile` (standard library only): the node side. Each hook run
  writes a node_exporter textfile (``metrics.textfile_dir``) with the health of every check,
  the run's duration, its verdict and drain reason.
- :mod:`slurmguard.metrics.registry` (prometheus_client, the ``server`` extra): the
  controller side. One class per process kind, each with its own ``CollectorRegistry``:
  :class:`~slurmguard.metrics.registry.ServeMetrics` (``slurmguard serve``'s ``/metrics``),
  :class:`~slurmguard.metrics.registry.RequeueMetrics` (``requeue watch``, a textfile) and
  :class:`~slurmguard.metrics.registry.ReconcileMetrics` (``reconcile``, a textfile).

This package's ``__init__`` imports neither half.
"""
