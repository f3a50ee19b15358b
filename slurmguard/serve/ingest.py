"""The ingest HTTP server: result records in, batched exactly-once writes to the store.

    POST /ingest   body {"records": [record, ...]} (or one record), header
                   "Authorization: MUNGE <credential>" (serve.auth = munge; 403 for a write
                   for another node, serve/auth.py) or "Bearer <token>"; answer 200
                   {"stored": [ids], "duplicate": [ids], "rejected": {id: "one line"}}
                   only after the batch holding them has committed; 422 with the same
                   fields when every record of the request was rejected. 401 without the
                   token, 413 for a body over serve.max_body, 400 for a body that is not
                   JSON, 503 when the store cannot be written (the node keeps its records
                   spooled and retries later).
    GET  /healthz  no token: 200 {"status": "ok"} when the store answers, 503 {"status":
                   "store unavailable"} otherwise, nothing more; with the token also the
                   counts, the writer's queue, the connection figures and the store's error.
    GET  /metrics  Prometheus text format (slurmguard.metrics.registry.ServeMetrics); no token
                   unless metrics.require_token (docs/metrics.md); the per-node series
                   (slurmguard_node_risk{node}) only with the serve token.

Connections are served by :mod:`slurmguard.serve.httpd` (one dispatcher thread, a bounded
pool of ``serve.workers`` threads, idle and request timeouts, a connection cap); one writer
thread drains a queue into transactions of up to ``serve.batch_size`` records, so 1,000 nodes
replaying spools at once cost a few dozen commits, not thousands. The writer does not wait
for a batch to fill (``serve.batch_interval`` 0): it writes what queued while it wrote the
last batch, so batches grow with the load by themselves and a lone request is written at
once (tests/bench/bench_ingest_load.py, docs/serve.md "Ingest speed").
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
from typing import TYPE_CHECKING, Any

from slurmguard import __version__
from slurmguard.errors import InputError, SlurmguardError, StoreError
from slurmguard.metrics.registry import CONTENT_TYPE, ServeMetrics
from slurmguard.serve.httpd import Handler as BaseHandler
from slurmguard.serve.httpd import Headers, PooledHTTPServer
from slurmguard.store.api import Store
from slurmguard.store.records import validate_record

if TYPE_CHECKING:
    from slurmguard.serve.auth import Authenticator

log = logging.getLogger("slurmguard.serve")

_WAIT = 30.0  # seconds a request waits for its batch to commit
_MAX_RECORDS = 10000  # records in one request at most (a node replays 200 at a time)


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
            fresh = set(self.store.nodes.record_many(records, validated=True))
        except Exception as exc:
            if len(pending) > 1 and not getattr(exc, "transient", False):
                # Something in one request broke the batch (data the validation let through,
                # a bug): write each request alone, so one bad request cannot make every
                # node in the batch retry forever.
                log.warning("batch of %d requests failed (%s); writing them one by one",
                            len(pending), exc)
                for one in pending:
                    self._write([one])
                return
            self.metrics.write_errors.inc()
            if isinstance(exc, SlurmguardError):
                log.error("store write failed (%d records kept on the nodes): %s", len(records), exc)
                err = exc
            else:  # a bug: the records stay spooled on the nodes
                log.exception("store write failed")
                err = StoreError(f"internal error: {type(exc).__name__}: {exc}")
            for _, fut in pending:
                fut.set_exception(err)
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
        # The ledger events of the records (serve/fleet.py after_ingest: the drains nodes
        # did) are written before the nodes get their answer, so an answered record is in
        # the ledger too; the policy pass itself runs on its own thread afterwards.
        if self.on_commit is not None and fresh:
            try:
                self.on_commit([r for r in records if r["id"] in fresh])
            except Exception:  # policy problems never lose ingested records
                log.exception("post-ingest hook failed")
        for recs, fut in pending:
            fut.set_result([r["id"] for r in recs if r["id"] in fresh])


class IngestServer:
    """The HTTP server and its writer; ``start()`` runs it on a background thread."""

    def __init__(self, store: Store, token: str, *, host: str = "127.0.0.1", port: int = 0,
                 batch_size: int = 200, batch_interval: float = 0.0, max_body: int = 4 << 20,
                 on_commit: Callable[[list[dict[str, Any]]], None] | None = None,
                 routes: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
                 workers: int = 64, max_connections: int = 1024, idle_timeout: float = 15.0,
                 request_timeout: float = 30.0,
                 metrics: ServeMetrics | None = None, metrics_token: bool = False,
                 queries: dict[str, Callable[[dict[str, list[str]]], tuple[int, dict[str, Any]]]]
                 | None = None, job_token: str = "", job_routes: frozenset[str] = frozenset(),
                 auth: Authenticator | None = None, ssl_context: Any = None) -> None:
        self.store = store
        self.token = token
        self.max_body = max_body
        self.routes = routes or {}
        # GET paths answered without a token (what sinfo shows any user: /drains), and POST
        # paths a job may call with the job token (readable by jobs; good for nothing else).
        self.queries = queries or {}
        self.job_token, self.job_routes = job_token, job_routes
        # Who sent a write (serve/auth.py): MUNGE credentials, or the token above in token mode.
        self.auth = auth
        self.metrics = metrics or ServeMetrics()
        self.metrics_token = metrics_token
        self.writer = BatchWriter(store, batch_size=batch_size, interval=batch_interval,
                                  on_commit=on_commit, metrics=self.metrics)
        self.httpd = PooledHTTPServer(
            (host, port), _make_handler(self), workers=workers, max_connections=max_connections,
            idle_timeout=idle_timeout, request_timeout=request_timeout, max_body=max_body,
            early=self.early, ssl_context=ssl_context,
            on_event=lambda e: self.metrics.http_connection_events.labels(event=e).inc())
        self.metrics.add_gauge("slurmguard_http_connections_open",
                               "Connections serve holds open now (idle, arriving, being answered).",
                               (), lambda: {(): float(self.httpd.open_connections)})
        self._thread: threading.Thread | None = None
        self._ping: tuple[float, bool] = (float("-inf"), False)
        self._ping_lock = threading.Lock()

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

    def authorized(self, header: str | None, path: str = "") -> bool:
        if not header or not header.startswith("Bearer ") or not self.token:
            return False
        given = header[7:].strip().encode("utf-8", "replace")
        if hmac.compare_digest(given, self.token.encode()):
            return True
        return bool(self.job_token) and path in self.job_routes and hmac.compare_digest(
            given, self.job_token.encode())

    def query(self, path: str, header: str | None, target: str,
              peer: str) -> tuple[int, dict[str, Any]]:
        """A GET of ``queries`` (/drains): the refusal, or the answer."""
        refusal = self.may_read(path, header, target, peer)
        if refusal is not None:
            return refusal
        return _answer_query(self, path, target.partition("?")[2])

    def may_read(self, path: str, header: str | None, target: str,
                 peer: str) -> tuple[int, dict[str, Any]] | None:
        """None when this GET of node state (``queries``: /drains) may be answered: the serve
        token (admins) sees all; the job token, or a signature (serve/auth.py ``read``), what
        its node or job may see. Without an authenticator (a library use) reads stay open."""
        import urllib.parse

        from slurmguard.serve.drains import parse_query, query_job

        if self.auth is None:
            return None
        given = (header[7:].strip().encode("utf-8", "replace")
                 if header and header.startswith("Bearer ") else None)
        if given is not None and self.token and hmac.compare_digest(given, self.token.encode()):
            return None
        try:
            query = urllib.parse.parse_qs(target.partition("?")[2], max_num_fields=8)
            nodes, _ = parse_query(query)
            job = query_job(query)
        except (ValueError, InputError) as exc:
            return 400, {"error": getattr(exc, "message", None) or "query: too many fields"}
        if given is not None:
            if not (self.job_token and hmac.compare_digest(given, self.job_token.encode())):
                return 401, {"error": "missing or wrong token"}
            return self.auth.read(path, None, target, nodes, job, peer, job_token=True)
        return self.auth.read(path, header, target, nodes, job, peer)

    def scrape(self, header: str | None) -> tuple[int, dict[str, Any] | bytes, str]:
        """GET /metrics: (code, answer, content type). Node state (the per-node series: a
        node's risk score) only to the serve token, as on /drains (docs/security.md); the
        counts and fleet figures to any scraper unless metrics.require_token."""
        admin = self.authorized(header)
        if self.metrics_token and not admin:
            return 401, {"error": "missing or wrong token"}, "application/json"
        return 200, self.metrics.exposition(per_node=admin or self.auth is None), CONTENT_TYPE

    def signed(self, path: str) -> bool:
        """Whether POSTs to ``path`` carry a signature (serve/auth.py) instead of the token."""
        return self.auth is not None and self.auth.signs(path)

    def early(self, method: str, path: str, headers: Headers,
              peer: str = "") -> tuple[int, dict[str, Any]] | None:
        """Refuse from the request head alone (before any body is read), or None; a signed
        POST is authenticated here (serve/auth.py), so only a sender proven by its head
        gets its body read."""
        if method == "POST":
            if path != "/ingest" and path not in self.routes:
                return 404, {"error": f"not found: POST {path[:80]}"}
            if self.signed(path):
                assert self.auth is not None
                return self.auth.early(path, headers, peer)
            if not self.authorized(headers.get("Authorization"), path):
                return 401, {"error": "missing or wrong token"}
            return None
        if method in ("GET", "HEAD") and headers.get("Content-Length", "0").strip() not in ("", "0"):
            return 400, {"error": f"{method} with a body"}
        return None

    def ingest(self, body: Any) -> tuple[int, dict[str, Any]]:
        t0 = time.monotonic()
        try:
            code, answer = self._ingest(body)
        finally:
            self.metrics.ingest_duration.observe(time.monotonic() - t0)
        m = self.metrics.ingest_records
        if code in (200, 422):
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
        if len(raw) > _MAX_RECORDS:
            return 413, {"error": f"body: {len(raw)} records, more than {_MAX_RECORDS} in one request"}
        now = time.time()
        good: list[dict[str, Any]] = []
        rejected: dict[str, str] = {}
        seen: set[str] = set()
        duplicate_in_request: list[str] = []
        for i, rec in enumerate(raw):
            try:
                v = validate_record(rec, now=now)
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
        code = 422 if rejected and not good and not duplicate_in_request else 200
        answer = {"stored": stored,
                  "duplicate": [r["id"] for r in good if r["id"] not in fresh] + duplicate_in_request,
                  "rejected": rejected}
        if code == 422:
            answer["error"] = next(iter(rejected.values()))
        return code, answer

    def healthz(self, authorized: bool = False) -> tuple[int, dict[str, Any]]:
        """Liveness. Without the token: only whether the store answers (a cached ping, at most
        one query a second however often a probe asks); with it: the figures and the error."""
        if not authorized:
            ok = self._store_alive()
            return (200, {"status": "ok"}) if ok else (503, {"status": "store unavailable"})
        try:
            counts = self.store.counts()
        except SlurmguardError as exc:
            return 503, {"status": "store unavailable", "error": exc.message}
        return 200, {"status": "ok", "version": __version__, "runs": counts["runs"],
                     "nodes": counts["nodes"], "batches": self.writer.batches,
                     "queued": self.writer.q.qsize(),
                     "connections": self.httpd.open_connections, **self.httpd.stats}

    def _store_alive(self) -> bool:
        with self._ping_lock:
            at, ok = self._ping
            if time.monotonic() - at < 1.0:
                return ok
            try:
                self.store.ping()
                ok = True
            except SlurmguardError as exc:
                log.warning("healthz: %s", exc.message)
                ok = False
            self._ping = (time.monotonic(), ok)
            return ok


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _make_handler(server: IngestServer) -> type[BaseHandler]:
    class Handler(BaseHandler):
        server_version = f"slurmguard/{__version__}"
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            log.debug("%s " + format, self.address_string(), *args)

        def _send(self, code: int, obj: dict[str, Any] | bytes,
                  ctype: str = "application/json") -> None:
            data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
            path = self.path.split("?")[0]
            known = path in ("/ingest", "/healthz", "/metrics") or path in server.routes \
                or path in server.queries
            server.metrics.http_requests.labels(path=path if known else "other", code=str(code)).inc()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def send_error(self, code: int, message: str | None = None,
                       explain: str | None = None) -> None:
            # The stdlib answers in HTML; clients of serve read one JSON line. An unknown
            # method is the client's mistake (405), not a server fault (501).
            if code == 501:
                code = 405
            self.close_connection = True
            try:
                self._send(code, {"error": one_line(message or explain or self.responses.get(
                    code, ("error",))[0])})
            except OSError:
                pass

        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?")[0]
            if path == "/healthz":
                self._send(*server.healthz(server.authorized(self.headers.get("Authorization"))))
            elif path == "/metrics":
                self._send(*server.scrape(self.headers.get("Authorization")))
            elif path in server.queries:
                self._send(*server.query(path, self.headers.get("Authorization"), self.path,
                                         self.client_address[0]))
            else:
                self._send(404, {"error": f"not found: GET {self.path[:80]}"})

        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?")[0]
            if path != "/ingest" and path not in server.routes:
                self._send(404, {"error": "not found"})
                return
            header = self.headers.get("Authorization")
            if not server.signed(path) and not server.authorized(header, path):
                self._send(401, {"error": "missing or wrong token"})
                return
            ok, body, raw = _read_body(self, server.max_body)
            if not ok:
                return
            if server.auth is not None:
                refusal = server.auth.check(path, header, raw, body, self.client_address[0],
                                            getattr(self.headers, "note", None))
                if refusal is not None:
                    self._send(*refusal)
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


def _read_body(h: Any, max_body: int) -> tuple[bool, Any, bytes]:
    """(True, the request's JSON body, its bytes), or (False, None, b"") once ``h`` answered
    the error."""
    try:
        length = int(h.headers.get("Content-Length") or "")
    except ValueError:
        h._send(411, {"error": "Content-Length required"})
        return False, None, b""
    if length < 0 or length > max_body:
        h.close_connection = True
        h._send(413, {"error": f"body over {max_body} bytes"})
        return False, None, b""
    raw = h.rfile.read(length)
    try:
        return True, json.loads(raw or b"null", parse_constant=_no_constant), raw
    except (ValueError, RecursionError) as exc:
        h._send(400, {"error": one_line(f"body: not JSON: {exc}")})
        return False, None, b""


def _answer_query(server: IngestServer, path: str, raw: str) -> tuple[int, dict[str, Any]]:
    """A GET query route (``server.queries``): its answer, or the error as (code, body)."""
    import urllib.parse

    try:
        query = urllib.parse.parse_qs(raw, max_num_fields=8)
    except ValueError:
        return 400, {"error": "query: too many fields"}
    try:
        return server.queries[path](query)
    except SlurmguardError as exc:
        return 503, {"error": exc.message}
