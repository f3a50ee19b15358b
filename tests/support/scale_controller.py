"""Controller-side scenarios of the scale harness (docs/scale.md): a serve outage while jobs'
wrappers watch for drain notices, the gate's latency, ingest latency and the store's growth.
Each is a function given the running :class:`support.scaleharness.ScaleHarness`, like those
of support/scale_scenarios.py, and :data:`SCENARIOS` here is theirs plus these.

- **outage**: one `slurmguard run` job per node (each wrapper reading its node's config, as
  a site's wrappers read /etc/slurmguard: serve's URLs), sdiag by message type with serve up,
  then with every replica down; one node drained during the outage must reach its job's
  wrapper through Slurm, and every record the nodes spooled meanwhile must be stored exactly
  once when serve is back.
- **gate**: the installed PrologSlurmctld entry script run as slurmctld runs it (its
  environment, as root), timed from outside: one job over every node, repeatedly, and a
  burst of 200 one-node jobs' gates at once; then the same as real jobs through Slurm.
- **ingest**: every node POSTs a record at once, round after round (a fleet-wide health
  pass): POST-to-stored latency (serve answers only after the batch committed); then the
  store's growth over simulated days written through the store API.
"""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from support import footprint
from support.loadgen import hook_record
from support.nodetraffic import prolog_slurmctld_env
from support.scale_repair import wave_repair
from support.scale_scenarios import SCENARIOS as BASE
from support.scale_scenarios import Figures, Phase, _restart, emulated_note
from support.scaleharness import ScaleHarness

NOTICE_LINE = re.compile(r"drain notice: (\S+) drained \((.*)\) seen via (\w+)"
                         r"(?:, ([0-9.]+)s after the drain)?")
DRAIN_REASON = "slurmguard: scale-outage: drained while every serve was down"


def _q(xs: list[float], q: float) -> float:
    return round(footprint.percentile(xs, q) * 1000, 1)  # ms


def _running(h: ScaleHarness, ids: list[str]) -> int:
    assert h.cluster is not None
    out = h.cluster.run("squeue", "-h", "-t", "R", "-o", "%i", timeout=60).stdout.split()
    return len(set(out) & set(ids))


def _job_nodes(h: ScaleHarness, ids: list[str]) -> dict[str, str]:
    """Job id -> its node, from one squeue."""
    assert h.cluster is not None
    out = h.cluster.run("squeue", "-h", "-o", "%i %N", timeout=60).stdout.splitlines()
    pairs = (ln.split() for ln in out)
    return {p[0]: p[1] for p in pairs if len(p) == 2 and p[0] in ids}


def _not_started(h: ScaleHarness, ids: list[str]) -> dict[str, str]:
    """Job id -> ``state reason`` of each of ``ids`` not running, from one squeue."""
    assert h.cluster is not None
    out = h.cluster.run("squeue", "-h", "-o", "%i|%T|%r|%N", timeout=60).stdout.splitlines()
    rows = (ln.split("|", 1) for ln in out)
    return {r[0]: r[1] for r in rows if len(r) == 2 and r[0] in ids and not r[1].startswith("RUNNING")}


def _spooled(h: ScaleHarness) -> dict[str, int]:
    """Every record id in the nodes' spools -> its number of check results."""
    out = {}
    for f in h.root.glob("nodes/*/spool/*.json"):
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        out[rec["id"]] = len(rec.get("results", []))
    return out


def outage(h: ScaleHarness, outage_minutes: float = 5.0, baseline_minutes: float | None = None,
           notice_timeout: float = 400.0, settle: float = 15.0, outage_jobs: int | None = None,
           **_: Any) -> Figures:
    """Every serve replica down for ``outage_minutes`` while one wrapped job per node (or
    ``outage_jobs`` one-node jobs: a wrapper holds ~26 MB, and 1,024 of them do not fit this
    host beside 1,024 slurmd) watches for drain notices (serve up for ``baseline_minutes``
    first, by default as long).
    When the outage phase has ended, and serve is still down, a sample of nodes runs its
    health check (their records go to the spool), so that the replay has something to
    lose; the phase's own figures hold only what slurmctld's HealthCheckInterval ran.
    Serve is up as long as it is down unless ``baseline_minutes`` says otherwise: the health
    checks (HealthCheckNodeState=CYCLE) read Slurm whether serve is up or not, so two windows
    of one length hold the same share of a health-check pass, and their ratio is the outage's."""
    assert h.cluster is not None
    up_s = 60 * (baseline_minutes if baseline_minutes is not None else outage_minutes)
    down_s = 60 * outage_minutes
    logdir = h.root / "outage"
    logdir.mkdir(exist_ok=True)
    cfg = h.prefix / "etc/slurmguard/nodes"
    # The wrapper reads the node's own config (a site's /etc/slurmguard), so it asks serve.
    script = (f"#!/bin/sh\nSLURMGUARD_CONFIG={cfg}/$SLURMD_NODENAME.toml\nexport SLURMGUARD_CONFIG\n"
              f"exec {h.sg} run -- /bin/sleep {int(up_s + down_s + notice_timeout + 600)}\n")
    ids = [h.cluster.sbatch(script, "-N1", f"--output={logdir}/job-%j.out")
           for _ in range(outage_jobs or len(h.nodes))]
    t0 = time.monotonic()
    while (running := _running(h, ids)) < len(ids) and time.monotonic() - t0 < 300:
        time.sleep(2)
    late = _not_started(h, ids) if running < len(ids) else {}
    if running < 0.95 * len(ids):
        raise RuntimeError(f"outage: {running} of {len(ids)} jobs running after 300 s: {late}")
    if late:  # a few stuck (a node's slurmd slow to answer at 1,024): the outage goes on without them
        h.cluster.run("scancel", *late, timeout=120)
        ids = [i for i in ids if i not in late]
    where = _job_nodes(h, ids)
    time.sleep(settle)  # the scenario: every wrapper has started and asked serve
    wrappers = _wrapper_rss_mb(h)
    out: Figures = {**emulated_note(h, "their health checks and jobs go on at the fleet's rates; "
                                      "in the outage their records go to their one spool, "
                                      "replayed by their first send once serve is back; one "
                                      "wrapped job per real node only (Slurm runs none on "
                                      "them)"),
                    "jobs": len(ids), "not_started": late, "up_s": up_s, "down_s": down_s,
                    "wrapper_rss_mb": round(sum(wrappers) / len(wrappers), 1) if wrappers else None}
    try:
        p = Phase(h)
        time.sleep(up_s)  # the scenario: serve up, every wrapper watching
        out["serve_up"] = p.end()
        before = set(_spooled(h))
        for s in h.serves:
            s.stop()
        victim_job = ids[len(ids) // 2]
        victim = where[victim_job]
        p = Phase(h)
        time.sleep(min(20.0, down_s / 4))  # the scenario: the outage is under way
        h.cluster.run("scontrol", "update", f"nodename={victim}", "state=drain",
                      f"reason={DRAIN_REASON}", timeout=60)
        drained_at = time.monotonic()
        rest = down_s - (time.monotonic() - p.t0)
        if rest > 0:
            time.sleep(rest)  # the scenario: the outage lasts
        out["serve_down"] = p.end()
        sample = h.nodes[:: max(1, len(h.nodes) // 8)]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda n: h.run_entry("healthcheck", n), sample))
        spooled = {k: v for k, v in _spooled(h).items() if k not in before}
        out["drained_node"], out["drained_job"] = victim, victim_job
        out["notice"] = _wait_notice(logdir / f"job-{victim_job}.out", drained_at, notice_timeout)
    finally:
        for s in h.serves:
            if s.proc is None:
                _restart(s)
    out["spooled_during"] = len(spooled)
    out.update(_replay_and_count(h, spooled))
    up, down = out["serve_up"], out["serve_down"]
    tot_up = up["slurm_own_rpm"] + up["slurmguard_rpm"]
    tot_down = down["slurm_own_rpm"] + down["slurmguard_rpm"]
    out["ratio_total"] = round(tot_down / tot_up, 2) if tot_up else None
    out["ratio_slurmguard"] = (round(down["slurmguard_rpm"] / up["slurmguard_rpm"], 2)
                               if up["slurmguard_rpm"] else None)
    out["other_notices"] = sorted(m[0] for f in logdir.glob("job-*.out")
                                  for m in NOTICE_LINE.findall(f.read_text())
                                  if m[0] != victim)
    h.cluster.run("scancel", *ids, timeout=120)
    t0 = time.monotonic()  # the jobs gone before the undrain: a step that outlives Slurm's
    while _queued(h, ids) and time.monotonic() - t0 < 300:  # kill wait drains its node
        time.sleep(2)  # ("Kill task failed", seen at load 180), which the next scenario needs
    h.undrain_all()
    return out


def _queued(h: ScaleHarness, ids: list[str]) -> int:
    assert h.cluster is not None
    return len(set(h.cluster.run("squeue", "-h", "-o", "%i", timeout=60).stdout.split()) & set(ids))


def _wrapper_rss_mb(h: ScaleHarness) -> list[float]:
    """RSS of every running `slurmguard run` wrapper (MB)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(cmd) > 2 and cmd[0] == h.sg.encode() and cmd[1] == b"run" or (
                len(cmd) > 3 and cmd[1] == h.sg.encode() and cmd[2] == b"run"):
            rss = footprint.proc_rss_mb(int(d.name))
            if rss:
                out.append(rss)
    return out


def _wait_notice(path: Path, drained_at: float, timeout: float) -> dict[str, Any]:
    """The drained job's wrapper's notice line (it writes to the job's output), waited for."""
    end = drained_at + timeout
    while True:
        text = path.read_text() if path.exists() else ""
        m = NOTICE_LINE.search(text)
        if m:
            # The wrapper's own figure: its seen time less Slurm's drain time (1-s clock).
            return {"node": m.group(1), "reason": m.group(2), "via": m.group(3),
                    "seen_after_s": float(m.group(4)) if m.group(4) else None}
        if time.monotonic() > end:
            return {"node": None, "via": None, "seen_after_s": None, "log": text[-600:]}
        time.sleep(1)


def _replay_and_count(h: ScaleHarness, spooled: dict[str, int], rounds: int = 8) -> Figures:
    """serve is back: each node with a spool runs its health check, which replays the spool
    once its own record is delivered, within the hook's report_timeout (so under load one
    run may replay only part of it: the rest waits for the node's next run), round after
    round while any is left; then every spooled record is counted in the store by id. Lost
    is a record neither stored nor still spooled."""
    from support.loadgen import count_records

    done = 0
    for done in range(1, rounds + 1):  # noqa: B007 -- the rounds it took
        nodes = sorted({f.parent.parent.name for f in h.root.glob("nodes/*/spool/*.json")})
        if not nodes:
            break
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda n: h.run_entry("healthcheck", n), nodes))
    left = set(_spooled(h))
    _, dup, stored = count_records(h.store_url, spooled)
    gone = {i: n for i, n in spooled.items() if i not in left}  # no longer on any node
    lost = count_records(h.store_url, gone)[0]
    return {"replay_rounds": done, "lost": lost, "pending": len(spooled) - len(gone),
            "duplicated": dup, "stored": stored, "spool_left": len(left)}


SCENARIOS = {**BASE, "outage": outage}


FELL_BACK: list[int] = []  # jobs whose compiled client ran the Python gate (serve not used)


def _gate_once(h: ScaleHarness, job: int, nodelist: str) -> tuple[float, int]:
    import subprocess

    t0 = time.monotonic()
    r = subprocess.run([h.entry("prolog/slurmguard-gate")], env=prolog_slurmctld_env(job, nodelist),
                       capture_output=True, text=True, timeout=120)
    if "serve not used" in r.stderr:
        FELL_BACK.append(job)
    return time.monotonic() - t0, r.returncode


def gate(h: ScaleHarness, gate_runs: int = 20, burst: int = 200, **_: Any) -> Figures:
    """PrologSlurmctld's latency: the installed gate entry script as slurmctld runs it, timed
    from outside, for one job over every node (``gate_runs`` times, one at a time) and for a
    burst of ``burst`` one-node jobs started at once; then one batch job over every node and
    ``burst`` one-node batch jobs through Slurm itself (the gate's CPU as slurmctld reaped it,
    submit to every job ended)."""
    from slurmguard.nodeset import fold

    assert h.cluster is not None
    allnodes = fold(h.nodes)
    FELL_BACK.clear()
    big = [_gate_once(h, 900000 + i, allnodes) for i in range(gate_runs)]
    large_fell_back = len(FELL_BACK)
    with ThreadPoolExecutor(burst) as pool:
        t0 = time.monotonic()
        small = list(pool.map(lambda i: _gate_once(h, 910000 + i, h.nodes[i % len(h.nodes)]),
                              range(burst)))
        burst_wall = time.monotonic() - t0
    burst_fell_back = len(FELL_BACK) - large_fell_back
    out: Figures = {
        **emulated_note(h, "the gate's jobs are on real nodes (Slurm starts none on an "
                           "emulated node); the emulated nodes' own jobs' gates run meanwhile "
                           "at their share of the job rate (the phase's 'emulated' figures)"),
        "large_job_nodes": len(h.nodes), "large_runs": gate_runs,
        "large_p50_ms": _q([t for t, _ in big], 0.5), "large_p99_ms": _q([t for t, _ in big], 0.99),
        "large_refused": sum(rc != 0 for _, rc in big),
        "burst": burst, "burst_p50_ms": _q([t for t, _ in small], 0.5),
        "burst_p99_ms": _q([t for t, _ in small], 0.99), "burst_wall_s": round(burst_wall, 1),
        "burst_refused": sum(rc != 0 for _, rc in small),
        # the client's timeout passed (or serve refused) and it ran `slurmguard gate` itself
        "large_fell_back": large_fell_back, "burst_fell_back": burst_fell_back}
    # The Python gate alone (serve's socket not answering: its fallback), one job at a time:
    # 200 of them at once (tens of MB and ~0.3 CPU-s each, SQLAlchemy for PostgreSQL) do not
    # fit this host next to the others' work, which is why the socket is the fleet's path.
    h.serves[0].stop()
    try:
        py = [_gate_once(h, 920000 + i, allnodes) for i in range(max(3, gate_runs // 4))]
    finally:
        _restart(h.serves[0])
    out.update(python_large_p50_ms=_q([t for t, _ in py], 0.5),
               python_large_p99_ms=_q([t for t, _ in py], 0.99), python_runs=len(py),
               python_refused=sum(rc != 0 for _, rc in py))
    if h.emulated_nodes:
        # Not through Slurm beside emulated entries: a job over every real node runs 1,024
        # epilogs at once, and beside 1,024 slurmd that each hold a 10,000-entry table this
        # 2-core, 23-GB host ran out of memory (the kernel killed a serve replica).
        out["slurm_jobs"] = "not run: with emulated nodes (memory)"
        return out
    # The same through Slurm: the gate runs under slurmscriptd, as in production.
    done = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")
    h.undrain_all()  # a job over every node needs every node
    p = Phase(h)
    t0 = time.monotonic()
    j = h.cluster.sbatch("#!/bin/sh\ntrue\n", f"-N{len(h.nodes)}", "--output=/dev/null")
    big_job = h.cluster.wait_job(j, done, timeout=600)
    out["slurm_large_job_s"] = round(time.monotonic() - t0, 1)
    out["slurm_large_job_state"] = big_job["JobState"]
    t0 = time.monotonic()
    ids = [h.cluster.sbatch("#!/bin/sh\ntrue\n", "-N1", "--output=/dev/null") for _ in range(burst)]
    submitted = time.monotonic() - t0
    states = [h.cluster.wait_job(i, done, timeout=900)["JobState"] for i in ids]
    out["slurm_burst_submit_s"] = round(submitted, 1)
    out["slurm_burst_all_ended_s"] = round(time.monotonic() - t0, 1)
    out["slurm_burst_completed"] = sum(s == "COMPLETED" for s in states)
    ph = p.end()
    out["slurm_gate_cpu_s"] = ph["gate_cpu_s"]
    out["slurm_gate_cpu_ms_per_job"] = round(1000 * ph["gate_cpu_s"] / (burst + 1), 1)
    out["drained"] = len(h.drained())
    return out


def ingest(h: ScaleHarness, rounds: int = 10, days: int = 2, jobs_per_hour: int = 300,
           **_: Any) -> Figures:
    """Ingest p50/p99 (a POST answered only once its batch committed: POST to stored) with
    every node posting at once, ``rounds`` times; then the store's growth: ``days`` simulated
    days of this fleet's records (a health check per node per HealthCheckInterval, a prolog
    and an epilog per one-node job at ``jobs_per_hour``) written through the store API,
    and a month extrapolated from the last day's growth."""
    from slurmguard import config
    from slurmguard.adapters.serve_client import node_auth, post_records

    # Each node signs as its hooks do (serve.auth: a MUNGE credential over each body).
    auth = {n: node_auth(config.load(str(h.prefix / f"etc/slurmguard/nodes/{n}.toml")), n)
            for n in h.nodes}
    url = f"http://127.0.0.1:{h.ports[0]}/ingest"
    lat: list[float] = []
    fails = 0
    errors: list[str] = []

    def post(node: str) -> float | None:
        rec = hook_record(node, "healthcheck", time.time())
        t0 = time.monotonic()
        try:
            ans = post_records(url, auth[node], [rec], 10.0)
        except Exception as exc:  # noqa: BLE001 -- counted: a failed POST is the figure
            errors.append(f"{type(exc).__name__}: {exc}"[:200])
            return None
        if rec["id"] not in ans.get("stored", []):
            errors.append(json.dumps(ans)[:200])
            return None
        return time.monotonic() - t0

    t0 = time.monotonic()
    with ThreadPoolExecutor(len(h.nodes)) as pool:
        for _ in range(rounds):
            for dt in pool.map(post, h.nodes):
                if dt is None:
                    fails += 1
                else:
                    lat.append(dt)
    out: Figures = {**emulated_note(h, "the rounds are the real nodes'; the emulated nodes' "
                                      "traffic goes on meanwhile; the store's month is every "
                                      "node entry's"),
                    "posts": len(lat) + fails, "failed": fails, "errors": errors[:3],
                    "p50_ms": _q(lat, 0.5),
                    "p99_ms": _q(lat, 0.99), "wall_s": round(time.monotonic() - t0, 1)}
    out.update(store_month(h, days, jobs_per_hour))
    return out


def store_month(h: ScaleHarness, days: int, jobs_per_hour: int) -> Figures:
    """Simulated days of records written through the store API (batches of 2,000, as serve's
    writer does), the PostgreSQL size after each; a month = the size now + 30 x the last
    day's growth (extrapolated, said so in docs/scale.md)."""
    from slurmguard.store.api import Store

    store = Store.open(url=h.store_url)
    sizes = [h.store_size_mb()]
    nodes = h.all_nodes  # the emulated nodes' history too: a fleet of every node entry
    per_day = len(nodes) * 86400 // h.spec.hc_interval + 2 * jobs_per_hour * 24
    t_start = time.time() - days * 86400
    t0 = time.monotonic()
    try:
        for d in range(days):
            recs: list[dict[str, Any]] = []
            day0 = t_start + d * 86400
            for i in range(len(nodes) * 86400 // h.spec.hc_interval):
                recs.append(hook_record(nodes[i % len(nodes)], "healthcheck",
                                        day0 + i * h.spec.hc_interval / len(nodes)))
            for j in range(jobs_per_hour * 24):
                t, node = day0 + j * 3600 / jobs_per_hour, nodes[j % len(nodes)]
                recs.append(hook_record(node, "prolog", t, str(10**6 + d * 10**5 + j)))
                recs.append(hook_record(node, "epilog", t + 60, str(10**6 + d * 10**5 + j)))
            recs.sort(key=lambda r: r["started"])
            for k in range(0, len(recs), 2000):
                store.nodes.record_many(recs[k:k + 2000])
            sizes.append(h.store_size_mb())
    finally:
        store.close()
    growth = sizes[-1] - sizes[-2]
    return {"records_per_day": per_day, "days_written": days, "node_entries": len(nodes),
            "write_s": round(time.monotonic() - t0, 1),
            "sizes_mb": [round(s, 1) for s in sizes], "growth_mb_per_day": round(growth, 1),
            "month_mb": round(sizes[-1] + (30 - days) * growth, 0),
            "bytes_per_record": round(growth * 2**20 / per_day)}


SCENARIOS["gate"] = gate
SCENARIOS["ingest"] = ingest
# Needs a harness with repair in act mode (ScaleSpec.repair): run.py runs it alone.
SCENARIOS["wave_repair"] = wave_repair
