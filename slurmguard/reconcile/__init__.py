"""Slurm <-> Kubernetes reconciliation: views, a pure planner, and the round that applies it.

Nothing here imports ``kubernetes`` at import time: the client is loaded by
:mod:`slurmguard.adapters.k8s` when a round first talks to the API server.
"""

from .plan import Action, Plan, Rules, plan, plan_node
from .views import KubeView, NameMapping, SlurmView, kube_view, slurm_view

__all__ = ["Action", "KubeView", "NameMapping", "Plan", "Rules", "SlurmView", "kube_view",
           "plan", "plan_node", "slurm_view"]
