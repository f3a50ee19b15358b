"""A site measurement module (config `burnin.site_modules`) for the burn-in tests: a real
module loaded the way an admin's site benchmark would be, whose measurements hang, raise,
are unsupported or report a value (FAKE_BENCH_VALUE)."""

from __future__ import annotations

import os
import time

from slurmguard.errors import Unsupported

MEASUREMENTS = {
    "site-value": "support.burninsite:value",
    "site-hang": "support.burninsite:hang",
    "site-raise": "support.burninsite:boom",
    "site-unsupported": "support.burninsite:nope",
    "site-slow": "support.burninsite:slow",
    "site-node": "support.burninsite:node_value",
    "site-fault": "support.burninsite:fault_file",
}


def value(p):  # noqa: ANN001, ANN201
    return [{"metric": "site_seconds", "value": float(os.environ.get("FAKE_BENCH_VALUE", "10")),
             "unit": "s", "status": "ok", "higher_is_better": False}]


def hang(p):  # noqa: ANN001, ANN201
    time.sleep(3600)


def boom(p):  # noqa: ANN001, ANN201
    raise RuntimeError("the benchmark crashed")


def nope(p):  # noqa: ANN001, ANN201
    raise Unsupported("needs an InfiniBand HCA")


def slow(p):  # noqa: ANN001, ANN201
    marker = os.environ.get("FAKE_BENCH_MARKER")
    if marker:
        open(marker, "w").close()
    time.sleep(float(os.environ.get("FAKE_BENCH_SLEEP", "60")))
    return value(p)


def node_value(p):  # noqa: ANN001, ANN201
    """10 s everywhere, 50 s on FAKE_SLOW_NODE: a node really slow at the site benchmark."""
    slow = os.environ.get("SLURMD_NODENAME") == os.environ.get("FAKE_SLOW_NODE", "-")
    return [{"metric": "site_seconds", "value": 50.0 if slow else 10.0, "unit": "s",
             "status": "ok", "higher_is_better": False}]


def fault_file(p):  # noqa: ANN001, ANN201
    """A hard failure on a node with a file of its name in FAKE_BENCH_FAULT_DIR (a fault only
    a load finds: the repair tests' node whose health checks pass after the reboot); 50 s on
    a node with a file NODE.slow there (slow under load, every check passing: a straggler
    only its peers show); else 10 s, as every node."""
    d = os.environ.get("FAKE_BENCH_FAULT_DIR", "")
    node = os.environ.get("SLURMD_NODENAME", "")
    if d and node and os.path.exists(os.path.join(d, node)):
        return [{"metric": "site_seconds", "value": None, "unit": "s", "status": "failed",
                 "reason": f"site benchmark: {node} lost a GPU under load",
                 "higher_is_better": False}]
    if d and node and os.path.exists(os.path.join(d, node + ".slow")):
        return [{"metric": "site_seconds", "value": 50.0, "unit": "s", "status": "ok",
                 "higher_is_better": False}]
    return value(p)
