"""A site-check module (config `checks.site_modules`) that injects checker faults.

Used by the tests the way an admin's site checks would be loaded: a real module, real
sources, real threads. Each check reads one source; the source does what its name says.
"""

from __future__ import annotations

import os
import time

from slurmguard.checks.base import CheckContext, check
from slurmguard.contract import CheckResult, healthy, unhealthy
from slurmguard.errors import Unsupported

SOURCES = {
    "fault-ok": "support.faultsite:gather_ok",
    "fault-hang": "support.faultsite:gather_hang",
    "fault-raise": "support.faultsite:gather_raise",
    "fault-missing": "support.faultsite:gather_missing",
}


def gather_ok(cfg, ctx):  # noqa: ANN001
    return {"value": os.environ.get("FAULT_VALUE", "ok")}


def gather_hang(cfg, ctx):  # noqa: ANN001
    time.sleep(3600)


def gather_raise(cfg, ctx):  # noqa: ANN001
    raise OSError("injected gather failure")


def gather_missing(cfg, ctx):  # noqa: ANN001
    raise Unsupported("no such hardware here")


@check("fault-value", "fault", ("fault-ok",), "unhealthy when $FAULT_VALUE is 'bad'")
def fault_value(ctx: CheckContext) -> CheckResult:
    if ctx.sources["fault-ok"]["value"] == "bad":
        return unhealthy("fault-value", "injected node fault")
    return healthy("fault-value")


@check("fault-hang", "fault", ("fault-hang",), "its source never answers")
def fault_hang(ctx: CheckContext) -> CheckResult:
    return healthy("fault-hang")


@check("fault-gather-raises", "fault", ("fault-raise",), "its source raises")
def fault_gather_raises(ctx: CheckContext) -> CheckResult:
    return healthy("fault-gather-raises")


@check("fault-check-raises", "fault", ("fault-ok",), "the check itself raises")
def fault_check_raises(ctx: CheckContext) -> CheckResult:
    raise ZeroDivisionError("injected check bug")


@check("fault-unsupported", "fault", ("fault-missing",), "its source is absent")
def fault_unsupported(ctx: CheckContext) -> CheckResult:
    return healthy("fault-unsupported")


@check("fault-counter", "fault", ("fault-ok",), "counts its runs in saved state")
def fault_counter(ctx: CheckContext) -> CheckResult:
    n = int(ctx.previous.get("runs", 0)) + 1
    ctx.new_state["runs"] = n
    return healthy("fault-counter", runs=n)


CHECKS = [fault_value, fault_hang, fault_gather_raises, fault_check_raises, fault_unsupported,
          fault_counter]
