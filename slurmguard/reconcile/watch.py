"""``slurmguard reconcile --watch``: rounds driven by Kubernetes watch events and a Slurm poll.

The Kubernetes view is a cache filled by a full list (every ``resync`` seconds, and after any
watch failure) and kept current by a watch from the list's resourceVersion. A Node event
starts a round at once; otherwise a round runs every ``interval`` seconds, which is also how
often Slurm (which has no watch) is polled. A 410 Gone or a cut stream means the cache may
have missed events: it is thrown away and relisted, and until the relist succeeds every
round fails closed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from slurmguard.errors import SlurmguardError

from .apply import Reconciler, Round


def watch_loop(rec: Reconciler, *, interval: float, resync: float,
               rounds: int | None = None, on_round: Callable[[Round], None] = lambda r: None,
               should_stop: Callable[[], bool] = lambda: False) -> int:
    """Run rounds until ``should_stop()`` or ``rounds`` rounds; returns the rounds run."""
    from slurmguard.adapters.k8s import KubeGone

    cache: dict[str, dict[str, Any]] | None = None
    rv = ""
    listed_at = 0.0
    failure = ""
    done = 0
    selector = rec.section.get("label_selector") or ""
    while not should_stop() and (rounds is None or done < rounds):
        if cache is None or time.monotonic() - listed_at >= resync:
            try:
                items, rv = rec.kube.list(selector)
                cache = {o["metadata"]["name"]: o for o in items}
                listed_at, failure = time.monotonic(), ""
            except SlurmguardError as exc:
                cache, failure = None, str(exc)
        r = rec.round(apply=True, kube_objs=list(cache.values()) if cache is not None else None,
                      kube_failed=failure if cache is None else "")
        for o in r.outcomes:  # our own writes: keep the cache current without a relist
            if o.ok and o.changed and o.action.kind.startswith("k8s") and cache is not None:
                cache.pop(o.action.k8s_name, None)
                cache = None  # simplest correct choice: relist after we wrote
        rec.metrics.write()
        on_round(r)
        done += 1
        if should_stop() or (rounds is not None and done >= rounds):
            break
        if cache is None:
            time.sleep(min(interval, 5.0) if failure else 0)
            continue
        try:
            for kind, obj in rec.kube.watch(rv, max(1, int(interval)), selector):
                name = (obj.get("metadata") or {}).get("name", "")
                rv = str((obj.get("metadata") or {}).get("resourceVersion", rv))
                if kind == "DELETED":
                    cache.pop(name, None)
                elif kind in ("ADDED", "MODIFIED"):
                    cache[name] = obj
                else:  # BOOKMARK and the like: only the version moves
                    continue
                break  # something changed: run a round now
        except KubeGone:
            cache = None  # too old: relist
        except SlurmguardError as exc:
            cache, failure = None, str(exc)
            rec.log(f"reconcile: watch failed, relisting: {exc}")
    return done
