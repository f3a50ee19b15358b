"""serve's GET /metrics with a real `slurmguard serve`, and docs/metrics.md against real scrapes.

Records go in through the node side's own delivery.deliver() (spool and replay included); the
scrape is parsed with prometheus_client's text parser. The doc test takes its families from
a real serve scrape, the textfile of a real draining prolog, and the files that the requeue
watcher's and the reconciler's metrics classes write, and requires both directions to agree:
every documented metric is in a scrape with the documented type and labels, and every
scraped metric is documented.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.helpers import REPO, run_sg, sg_env, standin_slurm
from support.sgserve import (
    JOB_TOKEN,
    TOKEN,
    Serve,
    job_token_line,
    new_port,
    new_store,
    write_config,
)

from slurmguard import config
from slurmguard.adapters import spool as spool_files
from slurmguard.adapters.serve_client import post_records
from slurmguard.contract import CheckResult, Health
from slurmguard.node import delivery
from slurmguard.node.record import make_record

DOC = REPO / "docs" / "metrics.md"


def scrape(url: str, token: str | None = None) -> tuple[int, str, str]:
    req = urllib.request.Request(url + "/metrics")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, "", e.read().decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(smp: dict, name: str, **labels: str) -> float | None:
    return smp.get((name, tuple(sorted(labels.items()))))


def rec(node: str, *fails: str) -> dict:
    results = [CheckResult("gpu-count", Health.HEALTHY)] + [
        CheckResult(f, Health.UNHEALTHY, "broken") for f in fails]
    return make_record(node, "prolog", results, "drain" if fails else "pass", "")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One serve for the module: records delivered while it was down (spooled), then up."""
    d = tmp_path_factory.mktemp("metrics-serve")
    port = new_port()
    cfg_path = write_config(d, store_url=new_store(d), port=port, report_timeout=5.0,
                            extra=f"[notice]\n{job_token_line(d)}\n")  # jobs read /drains with it
    cfg = config.load(str(cfg_path), env={})
    assert delivery.deliver(rec("n1", "gpu-xid"), cfg) == "spooled"  # serve not up yet
    serve = Serve(cfg_path, port, "--no-policy").start()
    try:
        assert delivery.deliver(rec("n2"), cfg) == "sent"  # ... and replays n1's record
        assert spool_files.pending(str(d / "spool")) == []
        dup = rec("n3")
        for _ in range(2):
            post_records(serve.url + "/ingest", TOKEN, [dup, {"id": "bad!"}], 5.0)
        yield d, serve
    finally:
        serve.stop()


def test_metrics_scrape_counts_ingest_replays_and_fleet_state(served):
    d, serve = served
    code, ctype, text = scrape(serve.url)  # no token: the default (docs/metrics.md)
    assert code == 200 and ctype.startswith("text/plain; version=0.0.4"), (code, ctype)
    smp = samples(text)
    assert value(smp, "slurmguard_ingest_records_total", result="stored") == 3
    assert value(smp, "slurmguard_ingest_records_total", result="duplicate") == 1
    assert value(smp, "slurmguard_ingest_records_total", result="rejected") == 2
    assert value(smp, "slurmguard_spool_replayed_records_total") == 1
    assert value(smp, "slurmguard_ingest_request_duration_seconds_count") == 4
    assert value(smp, "slurmguard_ingest_lag_seconds_count") == 3
    assert value(smp, "slurmguard_store_write_duration_seconds_count") >= 2
    assert value(smp, "slurmguard_http_requests_total", path="/ingest", code="200") == 4
    assert value(smp, "slurmguard_nodes", health="unhealthy") == 1
    assert value(smp, "slurmguard_nodes", health="healthy") == 2
    assert value(smp, "slurmguard_nodes_flagged", flag="lemon") == 0
    assert value(smp, "slurmguard_fleet_alerts_open") == 0
    assert not [k for k in smp if k[0].endswith("_created")]
    code, _, text = scrape(serve.url)
    assert value(samples(text), "slurmguard_http_requests_total", path="/metrics", code="200") >= 1


def test_metrics_per_node_series_need_the_serve_token(served):
    """Node state on /metrics (slurmguard_node_risk{node}) goes only to the serve token, the
    credential a Prometheus scrape job carries (docs/metrics.md); without it, or with a wrong
    one, the counts and fleet figures, and no series naming a node (docs/security.md)."""
    _, serve = served
    for token in (None, "wrong-token-0123456789", JOB_TOKEN):
        code, _, text = scrape(serve.url, token)
        assert code == 200, (token, code)
        smp = samples(text)
        assert not [k for k in smp if "node" in dict(k[1])], token
        assert "slurmguard_node_risk" not in text, token
        assert value(smp, "slurmguard_nodes", health="healthy") == 2  # fleet counts stay
    code, _, text = scrape(serve.url, TOKEN)
    risk = {dict(k[1])["node"] for k in samples(text) if k[0] == "slurmguard_node_risk"}
    assert code == 200 and risk == {"n1", "n2", "n3"}, risk


def test_metrics_token_when_required(tmp_path):
    port = new_port()
    cfg = write_config(tmp_path, store_url=new_store(tmp_path), port=port,
                       extra="[metrics]\nrequire_token = true\n")
    serve = Serve(cfg, port, "--no-policy").start()
    try:
        assert scrape(serve.url)[0] == 401
        assert scrape(serve.url, "wrong-token-0123456789")[0] == 401
        code, _, text = scrape(serve.url, TOKEN)
        assert code == 200 and "slurmguard_ingest_records_total" in text
        assert serve.healthz()["status"] == "ok"  # /healthz stays open
    finally:
        serve.stop()


# ----------------------------------------------------------------------------- the doc

_ROW = re.compile(r"^\| `(slurmguard_[a-z_]+)` \| (counter|gauge|histogram) \|([^|]*)\|")


def documented() -> dict[str, tuple[str, frozenset[str]]]:
    out = {}
    for line in DOC.read_text().splitlines():
        m = _ROW.match(line)
        if m:
            name, kind, labels = m.groups()
            assert name not in out, f"docs/metrics.md lists {name} twice"
            out[name] = (kind, frozenset(re.findall(r"`([a-z_]+)`", labels)))
    return out


def families(text: str) -> dict[str, tuple[str, set[str]]]:
    """name -> (type, label names seen on its samples), from a text exposition."""
    out: dict[str, tuple[str, set[str]]] = {}
    for line in text.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            out[m.group(1)] = (m.group(2), set())
    for fam in text_string_to_metric_families(text):
        name = fam.name + "_total" if fam.type == "counter" else fam.name
        if name in out:
            for s in fam.samples:
                out[name][1].update(k for k in s.labels if k != "le")
    return out


def install_prolog(tmp: Path, textfile_dir: Path) -> Path:
    """prolog/slurmguard-prolog as `slurmguard setup` installs it, but reading its defaults
    from ``tmp`` and naming a slurmguard that does not exist."""
    (tmp / "hookstate").mkdir(exist_ok=True)
    defaults = tmp / "default"
    defaults.write_text(f"SLURMGUARD={tmp}/gone/slurmguard\nSLURMGUARD_STATE_DIR={tmp}/hookstate\n"
                        f"SLURMGUARD_TEXTFILE_DIR={textfile_dir}\n")
    text = (REPO / "prolog" / "slurmguard-prolog").read_text()
    assert "SLURMGUARD_DEFAULTS=/etc/default/slurmguard" in text
    path = tmp / "slurmguard-prolog"
    path.write_text(text.replace("SLURMGUARD_DEFAULTS=/etc/default/slurmguard",
                                 f"SLURMGUARD_DEFAULTS={defaults}"))
    path.chmod(0o755)
    return path


def unrunnable_prolog(tmp: Path, textfile_dir: Path) -> str:
    p = subprocess.run([str(install_prolog(tmp, textfile_dir))], env={}, capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0, p.stderr  # fail-open: the job runs
    text = (textfile_dir / "slurmguard_hook_unrunnable.prom").read_text()
    assert 'slurmguard_hook_unrunnable_total{hook="prolog"} 1\n' in text
    return text


def declared_labels() -> dict[str, set[str]]:
    """Label names of the controller metrics as declared (for families without a sample)."""
    from slurmguard.metrics.registry import ReconcileMetrics, RequeueMetrics, ServeMetrics

    out = {}
    for m in (ServeMetrics(), RequeueMetrics(), ReconcileMetrics()):
        for fam in m.registry.collect():
            c = {"counter": "_total"}.get(fam.type, "")
            out[fam.name + c] = {n for n in getattr(_collector(m, fam.name), "_labelnames", ())}
    return out


def _collector(m, name: str):
    return next((c for c in m.registry._collector_to_names if getattr(c, "_name", None) == name), None)


def test_doc_lists_exactly_the_metrics_of_real_scrapes(served, tmp_path):
    from slurmguard.metrics.registry import RequeueMetrics
    from slurmguard.reconcile.metrics import Metrics as ReconcileFile

    d, serve = served
    texts = [scrape(serve.url, TOKEN)[2]]  # the whole scrape: per-node series need the token
    # a real prolog that drains (every node-side family present)
    cfg = tmp_path / "hook.toml"
    tdir = tmp_path / "textfile"
    tdir.mkdir()
    cfg.write_text(f"""
[slurm]
{standin_slurm(tmp_path, "n9")}
[hooks]
state_dir = "{tmp_path}/state"
prolog = ["fault-value"]
[checks]
site_modules = ["support.faultsite"]
[metrics]
textfile_dir = "{tdir}"
""")
    env = sg_env(SLURMGUARD_CONFIG=str(cfg), SLURMD_NODENAME="n9", FAULT_VALUE="bad")
    env["PYTHONPATH"] += os.pathsep + str(REPO / "tests")
    assert run_sg("prolog", env=env).returncode == 1
    texts.append((tdir / "slurmguard_hook_prolog.prom").read_text())
    # a real gate refusing a lemon (drain = false: no Slurm here)
    from slurmguard.store import Store

    gurl = new_store(tmp_path, "gate.db")
    st = Store.open(url=gurl)
    st.nodes.set_flags("n1", lemon=True, lemon_reason="slurmguard: lemon: 3 failures in 1h (gpu-xid)")
    st.close()
    gcfg = tmp_path / "gate.toml"
    gcfg.write_text(f'[store]\nurl = "{gurl}"\n[gate]\ndrain = false\n'
                    f'[metrics]\ntextfile_dir = "{tdir}"\n')
    g = run_sg("gate", env=sg_env(SLURMGUARD_CONFIG=str(gcfg), SLURM_JOB_ID="5",
                                  SLURM_JOB_NODELIST="n[1-2]"))
    assert g.returncode == 1, g.stderr
    gate = (tdir / "slurmguard_gate.prom").read_text()
    assert 'slurmguard_gate_jobs_total{result="refused"} 1\n' in gate
    assert 'slurmguard_gate_refusals_total{cause="lemon"} 1\n' in gate
    texts.append(gate)
    # the real prolog entry script when it cannot run slurmguard (a missing binary)
    texts.append(unrunnable_prolog(tmp_path, tdir))
    # the files the requeue watcher and the reconciler write, through their own classes
    rq = RequeueMetrics()
    rq.requeues.labels(action="expedite").inc()
    rq.recovery.observe(1.5)
    rq.polls.labels(result="ok").inc()
    rq.write(str(tmp_path / "requeue.prom"))
    rc = ReconcileFile(str(tmp_path / "reconcile.prom"))
    rc.action("k8s-mark", "ok")
    rc.round("ok")
    rc.write()
    texts += [(tmp_path / "requeue.prom").read_text(), (tmp_path / "reconcile.prom").read_text()]

    scraped: dict[str, tuple[str, set[str]]] = {}
    for t in texts:
        for name, (kind, labels) in families(t).items():
            k, ls = scraped.setdefault(name, (kind, set()))
            assert k == kind, name
            ls.update(labels)
    doc = documented()
    assert sorted(set(scraped) - set(doc)) == [], "scraped but not in docs/metrics.md"
    assert sorted(set(doc) - set(scraped)) == [], "in docs/metrics.md but in no scrape"
    declared = declared_labels()
    for name, (kind, labels) in doc.items():
        assert scraped[name][0] == kind, f"{name}: doc says {kind}, scrape {scraped[name][0]}"
        seen = scraped[name][1]
        if seen:  # a labelled family with samples: its label names are the documented ones
            assert seen == set(labels), f"{name}: doc labels {sorted(labels)}, scrape {sorted(seen)}"
        elif name in declared:  # no sample in these scrapes: the labels it is declared with
            assert declared[name] == set(labels), f"{name}: doc {sorted(labels)}, declared {sorted(declared[name])}"
    assert json.loads(json.dumps(sorted(doc)))  # the table is not empty


def test_store_outage_leaves_the_fleet_gauges_out_but_the_scrape_answers(tmp_path):
    from slurmguard.metrics.registry import ServeMetrics
    from slurmguard.serve.gauges import add_store_gauges
    from slurmguard.store import Store

    url = new_store(tmp_path)
    store = Store.open(url=url)
    store.nodes.set_flags("n1", lemon=True)
    m = ServeMetrics(cache_seconds=0)
    add_store_gauges(m, store)
    smp = samples(m.exposition().decode())
    assert value(smp, "slurmguard_nodes_flagged", flag="lemon") == 1
    assert value(smp, "slurmguard_nodes", health="unknown") == 1
    store.close()
    (tmp_path / "store.db").rename(tmp_path / "moved.db")  # the store is gone
    (tmp_path / "store.db").mkdir()  # ... and cannot be recreated in its place
    import time

    time.sleep(1.1)  # past the gauges' shared 1 s query cache
    smp = samples(m.exposition().decode())
    assert not [k for k in smp if k[0] in ("slurmguard_nodes", "slurmguard_nodes_flagged")]
    assert value(smp, "slurmguard_metrics_collect_errors_total", gauge="slurmguard_nodes") == 1
    assert value(smp, "slurmguard_ingest_records_total", result="stored") is None  # rest intact
    assert "slurmguard_ingest_records_total" in m.exposition().decode()
