"""The one permit (drainguard.StorePermit) asked by many processes at once on one store, as
the gate's processes, burn-in, the reconciler and serve replicas do: on SQLite (BEGIN
IMMEDIATE) and on a real PostgreSQL (a transaction-scoped advisory lock per cause), the
permits allowed equal the cap exactly and there is one fleet alert (store/serial.py).

Each of 10 real processes asks for 10 of 100 nodes of one partition, all released at the
same moment; a second cause asked at the same time keeps its own allowance.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from support.helpers import sg_env
from support.pgserver import pg_server, store_url  # noqa: F401  (fixtures)

from slurmguard.store import Store

NODES = [f"m{i:03d}" for i in range(1, 101)]
ASKER = r"""
import json, os, sys, time
from slurmguard.drainguard import StorePermit
from slurmguard.policy.params import PolicyParams
from slurmguard.store import Store

url, go, nodes = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
everyone = frozenset(f"m{i:03d}" for i in range(1, 101))
store = Store.open(url=url)
permit = StorePermit(store, PolicyParams(), {"fleet": everyone, "partition:gpu": everyone}, via="test")
store.ping()  # connected before the start signal
while not os.path.exists(go):
    time.sleep(0.005)
allowed = {c: sum(permit.ask(n, c, f"slurmguard: {c}: x")[0] for n in nodes)
           for c in ("fs-mount", "ib-link")}
print(json.dumps(allowed))
"""


def test_permits_from_ten_processes_allow_exactly_the_cap(store_url: str, tmp_path: Path) -> None:  # noqa: F811
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", ASKER, store_url, str(go),
                               ",".join(NODES[i::10])], env=sg_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(10)]
    time.sleep(3.0)  # let every process import and connect
    go.write_text("")
    totals = {"fs-mount": 0, "ib-link": 0}
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        for cause, n in json.loads(out).items():
            totals[cause] += n
    assert totals == {"fs-mount": 10, "ib-link": 10}  # cap: 10 % of the 100-node partition
    store = Store.open(url=store_url)
    try:
        permits = store.nodes.events(kinds=["permit"])
        alerts = store.nodes.alerts()
    finally:
        store.close()
    assert len(permits) == 20 and len({(e.node, e.source) for e in permits}) == 20
    assert sorted((a.cause, a.count) for a in alerts) == [("fs-mount", 100), ("ib-link", 100)]
