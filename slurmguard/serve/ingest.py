"""The ingest HTTP server: result records in, batched exactly-once writes to the store.

    POST /ingest   body {"records": [record, ...]} (or one record), header
                   "Authorization: Bearer <token>"; answer 200
                   {"stored": [ids], "duplicate": [ids], "rejected": {id: "one line"}}
                   only after the batch holding them has committed. 401 without the token,
                   413 for a body over serve.max_body, 503 when the store cannot be written
                   (the node keeps its records spooled and retries later).
    GET  /healthz  200 {"status": "ok", ...} when the store answers, 503 otherwise (no token).
    GET  /metrics  Prometheus text format (slurmguard.metrics.registry.ServeMetrics); no token
                   unless metrics.require_token (docs/metrics.md).

Requests are handled on threads; one writer thread drains a queue into transactions of up to
``serve.batch_size`` records, so 1,000 nodes replaying spools at once cost a few dozen
commits, not thousands.
"""

from __future__ import annotations

import hmac
import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from slurmguard import __version__
from slurmguard.errors import InputError, SlurmguardError, StoreError
from slurmguard.metrics.registry import CONTENT_TYPE, ServeMetrics
from slurmguard.store.api import Store
from slurmguard.store.records import validate_record

log = logging.getLogger("slurmguard.serve")

_WAIT = 30.0  # seconds a request waits for its batch to commit


class BatchWriter(threading.Thread):
    """Collects validated records from request threads and writes them in batches."""

    def __init__(self, store: Store, *, batch_size: int, interval: float,
                 on_commit: Callable[[list[dict[str, Any]]], None] | None = None,
                 metrics: ServeMetrics | None = None) -> None:
        super().__init__(name="sg-writer", daemon=True)
        self.store = store
        self.metrics = metrics or ServeMetrics()
        self.batch_size = batch_size
        self.interval = interval
        self.on_commit = on_commit
        self.q: queue.Queue[tuple[list[dict[str, Any]], Future[list[str]]] | None] = queue.Queue()
        self.batches = 0
        self.stored = 0

    def submit(self, records: list[dict[str, Any]]) -> Future[list[str]]:
        fut: Future[list[str]] = Future()
        self.q.put((records, fut))
        return fut

    def stop(self) -> None:
        self.q.put(None)
        self.join(timeout=10)

    def run(self) -> None:
        stopping = False
        while not stopping:
            item = self.q.get()
            if item is None:
                break
            pending = [item]
            count = len(item[0])
            end = time.monotonic() + self.interval
            while count < self.batch_size:
                try:
                    nxt = self.q.get(timeout=max(0.0, end - time.monotonic()))
                except queue.Empty:
                    break
                if nxt is None:
                    stopping = True
                    break
                pending.append(nxt)
                count += len(nxt[0])
            self._write(pending)

    def _write(self, pending: list[tuple[list[dict[str, Any]], Future[list[str]]]]) -> None:
        records = [r for recs, _ in pending for r in recs]
        t0 = time.monotonic()
        try:
            fresh = set(self.store.record_many(records))
        except SlurmguardError as exc:
            self.metrics.write_errors.inc()
            log.error("store write failed (%d records kept on the nodes): %s", len(records), exc)
            for _, fut in pending:
                fut.set_exception(exc)
            return
        except Exception as exc:  # a bug: the records stay spooled on the nodes
            self.metrics.write_errors.inc()
            log.exception("store write failed")
            for _, fut in pending:
                fut.set_exception(StoreError(f"internal error: {type(exc).__name__}: {exc}"))
            return
        self.batches += 1
        self.stored += len(fresh)
        now = time.time()
        self.metrics.batch_duration.observe(time.monotonic() - t0)
        for r in records:
            if r["id"] in fresh:
                self.metrics.ingest_lag.observe(max(0.0, now - r["started"] - r["duration"]))
                if r.get("spooled"):
                    self.metrics.replays.inc()
        for recs, fut in pending:
            fut.set_result([r["id"] for r in recs if r["id"] in fresh])
        if self.on_commit is not None and fresh:
            try:
                self.on_commit([r for r in records if r["id"] in fresh])
            except Exception:  # policy problems never lose ingested records
                log.exception("post-ingest hook failed")


class _Server(ThreadingHTTPServer):
    # The stdlib default backlog of 5 refuses connections when many nodes start jobs (or
    # replay their spools) at once; refused nodes would spool or, for /permit, fail open.
    request_queue_size = 1024
    daemon_threads = True


class IngestServer:
    """The HTTP server and its writer; ``start()`` runs it on a background thread."""

    def __init__(self, store: Store, token: str, *, host: str = "127.0.0.1", port: int = 0,
                 batch_size: int = 200, batch_interval: float = 0.2, max_body: int = 4 << 20,
                 on_commit: Callable[[list[dict[str, Any]]], None] | None = None,
                 routes: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
                 metrics: ServeMetrics | None = None, metrics_token: bool = False) -> None:
        self.store = store
        self.token = token
        self.max_body = max_body
        self.routes = routes or {}
        self.metrics = metrics or ServeMetrics()
        self.metrics_token = metrics_token
        self.writer = BatchWriter(store, batch_size=batch_size, interval=batch_interval,
                                  on_commit=on_commit, metrics=self.metrics)
        self.httpd = _Server((host, port), _make_handler(self))
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self.writer.start()
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="sg-http", daemon=True)
        self._thread.start()

    def serve_forever(self) -> None:
        self.writer.start()
        self.httpd.serve_forever()

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.writer.stop()

    # -- request logic (called on handler threads)

    def authorized(self, header: str | None) -> bool:
        if not header or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header[7:].strip().encode(), self.token.encode())

    def ingest(self, body: Any) -> tuple[int, dict[str, Any]]:
        t0 = time.monotonic()
        try:
            code, answer = self._ingest(body)
        finally:
            self.metrics.ingest_duration.observe(time.monotonic() - t0)
        m = self.metrics.ingest_records
        if code == 200:
            for key in ("stored", "duplicate", "rejected"):
                if answer[key]:
                    m.labels(result=key).inc(len(answer[key]))
        return code, answer

    def _ingest(self, body: Any) -> tuple[int, dict[str, Any]]:
        raw = body.get("records") if isinstance(body, dict) and "records" in body else body
        if isinstance(raw, dict):
            raw = [raw]
        if not isinstance(raw, list):
            return 400, {"error": "body: expected {\"records\": [...]} or a record"}
        good: list[dict[str, Any]] = []
        rejected: dict[str, str] = {}
        seen: set[str] = set()
        duplicate_in_request: list[str] = []
        for i, rec in enumerate(raw):
            try:
                v = validate_record(rec)
            except InputError as exc:
                rid = rec.get("id") if isinstance(rec, dict) and isinstance(rec.get("id"), str) else f"#{i}"
                rejected[rid] = exc.message
                log.warning("rejected record %s: %s", rid, exc.message)
                continue
            if v["id"] in seen:
                duplicate_in_request.append(v["id"])
                continue
            seen.add(v["id"])
            good.append(v)
        stored: list[str] = []
        if good:
            try:
                stored = self.writer.submit(good).result(timeout=_WAIT)
            except StoreError as exc:
                self.metrics.ingest_records.labels(result="failed").inc(len(good))
                return 503, {"error": exc.message}
            except TimeoutError:
                self.metrics.ingest_records.labels(result="failed").inc(len(good))
                return 503, {"error": "store write timed out"}
        fresh = set(stored)
        return 200, {"stored": stored,
                     "duplicate": [r["id"] for r in good if r["id"] not in fresh] + duplicate_in_request,
                     "rejected": rejected}

    def healthz(self) -> tuple[int, dict[str, Any]]:
        try:
            counts = self.store.counts()
        except SlurmguardError as exc:
            return 503, {"status": "store unavailable", "error": exc.message}
        return 200, {"status": "ok", "version": __version__, "runs": counts["runs"],
                     "nodes": counts["nodes"], "batches": self.writer.batches,
                     "queued": self.writer.q.qsize()}


def _make_handler(server: IngestServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = f"slurmguard/{__version__}"
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            log.debug("%s " + format, self.address_string(), *args)

        def _send(self, code: int, obj: dict[str, Any] | bytes,
                  ctype: str = "application/json") -> None:
            data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
            path = self.path.split("?")[0]
            known = path in ("/ingest", "/healthz", "/metrics") or path in server.routes
            server.metrics.http_requests.labels(path=path if known else "other", code=str(code)).inc()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?")[0]
            if path == "/healthz":
                self._send(*server.healthz())
            elif path == "/metrics":
                if server.metrics_token and not server.authorized(self.headers.get("Authorization")):
                    self._send(401, {"error": "missing or wrong token"})
                    return
                self._send(200, server.metrics.exposition(), CONTENT_TYPE)
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?")[0]
            if path != "/ingest" and path not in server.routes:
                self._send(404, {"error": "not found"})
                return
            if not server.authorized(self.headers.get("Authorization")):
                self._send(401, {"error": "missing or wrong token"})
                return
            try:
                length = int(self.headers.get("Content-Length") or "")
            except ValueError:
                self._send(411, {"error": "Content-Length required"})
                return
            if length < 0 or length > server.max_body:
                self.close_connection = True
                self._send(413, {"error": f"body over {server.max_body} bytes"})
                return
            try:
                body = json.loads(self.rfile.read(length) or b"null")
            except ValueError as exc:
                self._send(400, {"error": f"body: not JSON: {exc}"})
                return
            if path == "/ingest":
                self._send(*server.ingest(body))
                return
            try:
                self._send(200, server.routes[path](body))
            except InputError as exc:
                self._send(400, {"error": exc.message})
            except SlurmguardError as exc:
                self._send(503, {"error": exc.message})

    return Handler
