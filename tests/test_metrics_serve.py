"""serve's GET /metrics with a real `slurmguard serve`, and docs/metrics.md against real scrapes.

Records go in through the node side's own report.deliver() (spool and replay included); the
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
import urllib.error
import urllib.request

import pytest
from helpers import REPO, run_sg, sg_env
from prometheus_client.parser import text_string_to_metric_families
from sgserve import TOKEN, Serve, new_port, new_store, write_config

from slurmguard import config, report
from slurmguard.health import CheckResult, Health

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
    return report.make_record(node, "prolog", results, "drain" if fails else "pass", "")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One serve for the module: records delivered while it was down (spooled), then up."""
    d = tmp_path_factory.mktemp("metrics-serve")
    port = new_port()
    cfg_path = write_config(d, store_url=new_store(d), port=port, report_timeout=5.0)
    cfg = config.load(str(cfg_path), env={})
    assert report.deliver(rec("n1", "gpu-xid"), cfg) == "spooled"  # serve not up yet
    serve = Serve(cfg_path, port, "--no-policy").start()
    try:
        assert report.deliver(rec("n2"), cfg) == "sent"  # ... and replays n1's record
        assert report.spooled(str(d / "spool")) == []
        dup = rec("n3")
        for _ in range(2):
            report.post_records(serve.url + "/ingest", TOKEN, [dup, {"id": "bad!"}], 5.0)
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
    texts = [scrape(serve.url)[2]]
    # a real prolog that drains (every node-side family present)
    cfg = tmp_path / "hook.toml"
    tdir = tmp_path / "textfile"
    tdir.mkdir()
    cfg.write_text(f"""
[slurm]
scontrol = "{tmp_path}/no-scontrol"
[hooks]
state_dir = "{tmp_path}/state"
prolog = ["fault-value"]
[checks]
site_modules = ["faultsite"]
[metrics]
textfile_dir = "{tdir}"
""")
    env = sg_env(SLURMGUARD_CONFIG=str(cfg), SLURMD_NODENAME="n9", FAULT_VALUE="bad")
    env["PYTHONPATH"] += os.pathsep + str(REPO / "tests")
    assert run_sg("prolog", env=env).returncode == 1
    texts.append((tdir / "slurmguard_hook_prolog.prom").read_text())
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
    script_only = {"slurmguard_hook_unrunnable_total"}  # written by prolog/, epilog/ scripts
    if "slurmguard_hook_unrunnable" not in (REPO / "prolog" / "slurmguard-prolog").read_text():
        doc = {k: v for k, v in doc.items() if k not in script_only}
    else:
        scraped.setdefault("slurmguard_hook_unrunnable_total", ("counter", {"hook"}))
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
