"""Gate burst benchmark: many one-node jobs' PrologSlurmctld at once, through serve's socket.

    python tests/bench/bench_gate_burst.py [--nodes 10000] [--burst 500] [--rounds 3]
        [--store postgresql|sqlite] [--timeout 2] [--tree PATH ...]

A store of ``--nodes`` nodes (every 50th a lemon, every 97th failed a check just now), a real
`slurmguard serve` with its gate socket, and ``--burst`` one-node jobs' gates started at once
as slurmctld starts them: `/bin/sh -c exec` of the compiled client, whose fallback is
`python -m slurmguard gate` (both from the tree under test; the client's timeout
SLURMGUARD_GATE_TIMEOUT, 2 s by default as in production). Each ``--tree`` (a slurmguard
checkout; default this one) runs ``--rounds`` bursts, the trees in turn, one serve per round.
Prints, per tree, the medians over rounds of: the gate's p50 and p99 as slurmctld waits for
it, the burst's wall time, the jobs that fell back to the Python gate, the PostgreSQL sessions
opened, and the verdicts that differ from the store's (a fail-open counts there).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from support.pgserver import PgServer, _pg_bin  # noqa: E402
from support.sgserve import Serve, new_port, new_store  # noqa: E402

LEMON = "slurmguard: lemon: 3 failures in 1h (gpu-xid)"


def expected(i: int) -> int:
    """The gate's exit code for a one-node job on node i."""
    return 1 if i % 50 == 0 or i % 97 == 0 else 0


def fill(url: str, nodes: int) -> None:
    from sqlalchemy import text

    from slurmguard.store.engine import make_engine
    from slurmguard.store.migrate import upgrade

    eng = make_engine({"url": url})
    upgrade(eng)
    now = time.time()
    rows = [{"name": f"gpu{i:05d}", "first": now - 30 * 86400, "lemon": i % 50 == 0,
             "lr": LEMON if i % 50 == 0 else None, "seen": now - 60,
             "health": "unhealthy" if i % 97 == 0 else "healthy",
             "reason": "slurmguard: gpu-xid: Xid 79" if i % 97 == 0 else ""}
            for i in range(1, nodes + 1)]
    with eng.begin() as conn:
        conn.execute(text(
            "INSERT INTO nodes (name, first_seen, lemon, lemon_reason, burnin_required, probation,"
            " probation_passes, last_seen, last_health, last_reason)"
            " VALUES (:name, :first, :lemon, :lr, false, false, 0, :seen, :health, :reason)"), rows)
    eng.dispose()


def sessions(pg: PgServer | None, db: str) -> int:
    if pg is None:
        return 0
    return int(pg.sql(f"SELECT sessions FROM pg_stat_database WHERE datname = '{db}'")[0][0])


def one_round(tree: Path, d: Path, url: str, client: Path, args: argparse.Namespace,
              pg: PgServer | None, rng: random.Random) -> dict[str, Any]:
    sock = d / f"gate-{os.getpid()}.sock"
    port = new_port()
    token = d / "token"
    token.write_text("bench-token-0123456789abcdef\n")
    token.chmod(0o600)
    cfg = d / "sg.toml"
    cfg.write_text(f'[store]\nurl = "{url}"\n[gate]\ndrain = false\n[serve]\nhost = "127.0.0.1"\n'
                   f'port = {port}\nauth = "token"\ntoken_file = "{token}"\npolicy = false\n'
                   f'gate_socket = "{sock}"\n')
    env = dict(os.environ, PYTHONPATH=str(tree), SLURMGUARD_CONFIG=str(cfg),
               SLURMGUARD_GATE_SOCKET=str(sock), SLURMGUARD_GATE_TIMEOUT=str(args.timeout))
    os.chdir(tree)  # `python -m` puts the working directory first on sys.path
    srv = Serve(cfg, port, env={"PYTHONPATH": str(tree)}).start()
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        argv = ["/bin/sh", "-c", 'exec "$@"', "sh", str(client), "--", sys.executable, "-m",
                "slurmguard", "gate"]
        subprocess.run(argv, env={**env, "SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "gpu00001"},
                       capture_output=True, timeout=120)  # serve's first connections
        picks = [rng.randrange(1, args.nodes + 1) for _ in range(args.burst)]
        db = url.rsplit("/", 1)[1]
        before = sessions(pg, db)

        def gate(k: int) -> tuple[float, int, str]:
            e = {**env, "SLURM_JOB_ID": str(100000 + k), "SLURM_JOB_NODELIST": f"gpu{picks[k]:05d}"}
            t0 = time.monotonic()
            p = subprocess.run(argv, env=e, capture_output=True, text=True, timeout=600)
            return time.monotonic() - t0, p.returncode, p.stderr

        with ThreadPoolExecutor(args.burst) as pool:
            t0 = time.monotonic()
            done = list(pool.map(gate, range(args.burst)))
            wall = time.monotonic() - t0
        time.sleep(1.5)  # a backend reports its session to the statistics within a second
        opened = sessions(pg, db) - before
    finally:
        srv.stop()
    times = sorted(t for t, _, _ in done)
    return {"p50_ms": round(statistics.median(times) * 1e3, 1),
            "p99_ms": round(times[min(len(times) - 1, int(0.99 * len(times)))] * 1e3, 1),
            "wall_s": round(wall, 2),
            "fell_back": sum("serve not used" in err for _, _, err in done),
            "sessions": opened,
            "wrong": sum(rc != expected(picks[k]) for k, (_, rc, _) in enumerate(done))}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--burst", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--store", choices=("postgresql", "sqlite"), default="postgresql")
    ap.add_argument("--timeout", type=float, default=2.0)
    ap.add_argument("--tree", action="append", type=Path, default=None)
    args = ap.parse_args()
    trees = [t.resolve() for t in (args.tree or [REPO])]
    d = Path(tempfile.mkdtemp(prefix="sg-bench-gateburst-"))
    pg = None
    try:
        build = d / "prolog"
        shutil.copytree(REPO / "prolog", build, ignore=shutil.ignore_patterns("slurmguard-*-client"))
        subprocess.run(["make", "-s", "-C", str(build), "slurmguard-gate-client"], check=True)
        client = build / "slurmguard-gate-client"
        if args.store == "postgresql":
            pg = PgServer(_pg_bin(), options=("max_connections=200",))  # as the scale harness
            pg.start()
            url = pg.url(pg.create_db())
        else:
            url = new_store(d, "bench.db")
        fill(url, args.nodes)
        rng = random.Random(5)
        runs: dict[Path, list[dict[str, Any]]] = {t: [] for t in trees}
        for r in range(args.rounds):
            for t in trees:
                got = one_round(t, d, url, client, args, pg, rng)
                runs[t].append(got)
                print(f"round {r + 1} {t}: {json.dumps(got)}", flush=True)
        print(f"{args.burst} one-node jobs at once, {args.nodes} nodes, {args.store}, client "
              f"timeout {args.timeout:g} s; medians over {args.rounds} rounds:")
        for t in trees:
            med = {k: statistics.median(x[k] for x in runs[t]) for k in runs[t][0]}
            print(f"  {t}: {json.dumps(med)}")
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
