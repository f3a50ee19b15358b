"""`incident list` reads only the jobs near its episodes (slurmguard/store/incidents.py,
fleet/incidents.py ``job_spans``): over a store that also holds jobs far from every episode,
on SQLite and PostgreSQL, the incidents (hits, costs, timelines, the GPUs per node) are
those read over every job of the window, and the far jobs are not read."""

from __future__ import annotations

import time

from support.incidentgen import T0, account_job, plant, run_record
from support.pgserver import pg_server, store_url  # noqa: F401  (fixtures)

from slurmguard.goodput.account import Allocation
from slurmguard.store import Store
from slurmguard.store.incidents import load


def test_the_jobs_near_the_episodes_answer_as_every_job(store_url: str) -> None:  # noqa: F811
    store = Store.open(url=store_url)
    try:
        truth = plant(store)
        # Far from every episode: two days before the first, on the episodes' nodes, one with
        # 16 GPUs on n01 (the most n01 ever had: its out-of-service cost takes it) and a
        # day's worth of one-node jobs on n05 and n06.
        account_job(store, "far-16", [Allocation(T0 - 2 * 86400, T0 - 2 * 86400 + 600, ("n01",),
                                                 16, "COMPLETED")],
                    [run_record(0, T0 - 2 * 86400, 1, 50, None, 10, "success")], "COMPLETED")
        for k in range(24):
            for node in ("n05", "n06"):
                start = T0 - 2 * 86400 + 3600 * k
                account_job(store, f"far-{node}-{k}",
                            [Allocation(start, start + 1800, (node,), 8, "COMPLETED")],
                            [run_record(0, start, 1, 100, None, 10, "success")], "COMPLETED")
        since, until = time.time() - 7 * 86400, time.time()
        for gpus in (None, 8):
            near = load(store, since=since, until=until, gpus_per_node=gpus)
            every = load(store, since=since, until=until, gpus_per_node=gpus, every_job=True)
            assert [i.to_dict() for i in near.incidents] == [i.to_dict() for i in every.incidents]
            assert near.window_jobs <= every.window_jobs
            read = {j.job_id for j in near.jobs}
            assert read == {"101", "102"}, read  # the jobs near an episode; 103 is on n10
            assert {j.job_id for j in every.jobs} >= read | {"far-16", "far-n05-0"}
        n01 = next(i for i in near.incidents if i.nodes == ("n01",))
        assert n01.cost["out_of_service"] == truth["n01"]["out"]  # 8 GPUs given
        per_node = load(store, since=since, until=until).incidents
        n01 = next(i for i in per_node if i.nodes == ("n01",))
        assert n01.cost["out_of_service"] == truth["n01"]["out"] * 2  # 16: the far job's
    finally:
        store.close()
