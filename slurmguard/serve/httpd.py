"""The HTTP front of `slurmguard serve`: one selector thread, a bounded worker pool.

The standard library's ThreadingHTTPServer starts one thread per connection and reads with no
timeout, so idle or slow clients (slowloris) pile up threads until real nodes wait. Here:

* One dispatcher thread owns every socket that is idle or still sending its request. It reads
  what arrives without blocking and hands a connection to a worker only once a *whole*
  request is buffered (request line, headers and a body of Content-Length bytes). A slow or
  silent client therefore never holds a worker.
* ``workers`` threads run the request handler on complete requests only; they block on the
  store (the batch writer), never on a client.
* Limits, all enforced by the dispatcher: ``idle_timeout`` (a keep-alive connection with no
  request in progress is closed), ``request_timeout`` (a request must arrive completely
  within this many seconds of its first byte, else 408 and close), ``max_connections`` (at the
  cap the oldest idle connection is closed to make room; when none is idle the new connection
  gets 503 and is closed), 64 KiB of request line and headers (431). A request the front can
  refuse from its headers alone (no or wrong token on a POST, a body over ``max_body``, an
  unknown path) is answered without buffering its body, so an unauthenticated client costs at
  most 64 KiB of memory.
* After an answer that closes the connection, the socket is half-closed and drained for up to
  2 s after the last byte it sends, 30 s at most (a "lingering close"), so a client still
  sending a body it was refused (a 100 MB
  upload) reads the 413 instead of a connection reset.

``early`` is the owner's callback: ``early(method, path, headers, peer) -> (status, obj) |
None`` (``peer`` the client's address); ``None`` means "read the body and hand the request to
a worker". It may leave what it learned from the head (an authenticated sender) on
``headers.note`` for the handler.

The request head is parsed once, by the dispatcher (:func:`parse_head`), and the handler
gets those :class:`Headers` (subclass :class:`Handler`): the standard library's parser
(email.feedparser) cost about 20 us a request, twice, most of it on the one dispatcher thread.

With ``ssl_context`` every accepted socket is wrapped server-side and the dispatcher drives
its handshake without blocking (a client that never finishes one is closed by
``idle_timeout`` like any idle connection); a client that refuses the certificate, or speaks
plain HTTP to a TLS port, is counted (``tls_refused``) and closed. A read takes up to 256 KiB
and a TLS record is 16 KiB at most, so OpenSSL never holds a half-read record the selector
cannot see: what is not read yet is still in the kernel's buffer.
"""

from __future__ import annotations

import collections
import http.client
import io
import json
import logging
import queue
import resource
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

log = logging.getLogger("slurmguard.serve")

MAX_HEAD = 64 * 1024
_LINGER = 2.0  # s: a refused client still sending is drained until it pauses this long...
_LINGER_MAX = 30.0  # ... or for this long in all
_TICK = 0.25
_EVICT_AFTER = 0.5  # s idle before a connection may be closed to make room for a new one

_MAX_FIELDS = 100  # header fields in one request at most (http.client's own limit)
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


class Headers:
    """A request's header fields: ``get(name, default)`` by any case of the name; of a field
    sent twice, the first (as email.message.Message.get, which handlers used before)."""

    __slots__ = ("_fields", "note")

    def __init__(self, fields: dict[str, str]) -> None:
        self._fields = fields
        self.note: Any = None  # what the owner's ``early`` learned from the head

    def get(self, name: str, default: Any = None) -> Any:
        return self._fields.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._fields


def parse_head(block: bytes) -> Headers:
    """The header lines of a request (after its request line, before the blank line).

    ValueError for what RFC 9112 says to refuse with 400: a line that is not ``name: value``,
    a name that is not a token (``Content-Length : 5`` included), more than 100 fields.
    A line starting with a space or tab continues the field before it (obsolete folding).
    Values are latin-1 text with the surrounding white space removed.
    """
    fields: dict[str, str] = {}
    count = 0
    folding: str | None = None  # the field a continuation line extends (None: a repeat)
    for raw in block.split(b"\n"):
        line = raw[:-1] if raw.endswith(b"\r") else raw
        if not line:
            continue
        if line[0] in (32, 9):  # obs-fold: a continuation of the previous field
            if not count:
                raise ValueError("a continuation line before any header field")
            if folding is not None:
                more = line.strip(b" \t").decode("latin-1")
                fields[folding] = f"{fields[folding]} {more}".strip()
            continue
        name, colon, value = line.partition(b":")
        if not colon or not name or not _TOKEN.issuperset(name):
            raise ValueError(f"not a header field: {line[:40]!r}")
        count += 1
        if count > _MAX_FIELDS:
            raise ValueError(f"more than {_MAX_FIELDS} header fields")
        key = name.decode("ascii").lower()
        folding = None
        if key not in fields:
            fields[key] = value.strip(b" \t").decode("latin-1")
            folding = key
    return Headers(fields)


class Handler(BaseHTTPRequestHandler):
    """Base of the handlers PooledHTTPServer runs: the request's headers are the ones the
    dispatcher parsed (``_sg_headers``), not parsed a second time."""

    _sg_headers: Headers | None = None

    def parse_request(self) -> bool:
        # The server gives this handler the request line, an empty header block and the body;
        # the standard library checks the request line and the version as always, then the
        # dispatcher's headers decide Connection as the library's code would. Expect is the
        # dispatcher's alone: it sent "100 Continue" while the body was still missing, and
        # by now the whole body is buffered (a second interim answer would say nothing).
        if not super().parse_request():
            return False
        headers = self._sg_headers
        if headers is None:
            return True
        self.headers = headers  # type: ignore[assignment]
        conntype = str(headers.get("Connection", "")).lower()
        if conntype == "close":
            self.close_connection = True
        elif conntype == "keep-alive" and self.protocol_version >= "HTTP/1.1":
            self.close_connection = False
        return True


EarlyFn = Callable[[str, str, Headers, str], "tuple[int, dict[str, Any]] | None"]


def fd_limit(want: int) -> int:
    """Raise RLIMIT_NOFILE's soft limit towards ``want`` (up to the hard limit); return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else want


class _Conn:
    __slots__ = ("sock", "addr", "buf", "first_byte", "last_active", "state", "linger_until",
                 "linger_end", "need", "continued", "headers", "head_end", "handshaking")

    def __init__(self, sock: socket.socket, addr: Any, now: float) -> None:
        self.sock = sock
        self.addr = addr
        self.buf = bytearray()
        self.first_byte: float | None = None  # when the current request's first byte came
        self.last_active = now
        self.state = "idle"  # idle | reading | busy | linger
        self.linger_until = 0.0
        self.linger_end = 0.0
        self.need: int | None = None  # total bytes of the current request, once known
        self.continued = False
        self.headers: Headers | None = None  # the current request's, parsed by the dispatcher
        self.head_end = 0  # bytes of its request line, headers and blank line
        self.handshaking = isinstance(sock, ssl.SSLSocket)  # TLS handshake not done yet


class _Writer(io.RawIOBase):
    """The handler's wfile: writes straight to the (blocking, timed) socket."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self._sock.sendall(b)
        return len(b)


def _quick_reply(code: int, obj: dict[str, Any], *, close: bool = True) -> bytes:
    data = json.dumps(obj).encode()
    reason = http.client.responses.get(code, "")
    head = (f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n")
    return head.encode() + data


class PooledHTTPServer:
    """Serves ``handler_cls`` (a BaseHTTPRequestHandler) with the limits described above."""

    def __init__(self, address: tuple[str, int], handler_cls: type, *, workers: int = 64,
                 max_connections: int = 1024, idle_timeout: float = 15.0,
                 request_timeout: float = 30.0, write_timeout: float = 10.0,
                 max_body: int = 4 << 20, early: EarlyFn | None = None,
                 on_event: Callable[[str], None] | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.handler_cls = handler_cls
        self._own_handler = issubclass(handler_cls, Handler)
        self.workers = max(1, workers)
        # Two descriptors per connection at most (the socket, and none other) plus headroom
        # for the store, logs and the listening socket.
        limit = fd_limit(max_connections + 256)
        self.max_connections = max(8, min(max_connections, limit - 128))
        if self.max_connections < max_connections:
            log.warning("connection cap lowered to %d by the open-files limit (%d)",
                        self.max_connections, limit)
        self.idle_timeout = idle_timeout
        self.request_timeout = request_timeout
        self.write_timeout = write_timeout
        self.max_body = max_body
        self.early = early
        self.ssl_context = ssl_context
        self.socket = socket.create_server(address, backlog=1024)
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._returned: collections.deque[_Conn] = collections.deque()
        self._conns: dict[int, _Conn] = {}
        self._idle: collections.OrderedDict[int, _Conn] = collections.OrderedDict()
        self._work: queue.Queue[_Conn | None] = queue.Queue()
        self._stop = threading.Event()
        self._done = threading.Event()
        self._threads: list[threading.Thread] = []
        self.stats = {"accepted": 0, "refused_over_cap": 0, "evicted_idle": 0,
                      "idle_closed": 0, "request_timeouts": 0, "early_answers": 0,
                      "requests": 0, "tls_refused": 0}
        self.on_event = on_event

    def _count(self, event: str) -> None:
        self.stats[event] += 1
        if self.on_event is not None and event != "requests":
            try:
                self.on_event(event)
            except Exception:  # metrics never break serving
                log.exception("connection metrics failed")

    # -- life cycle
    def serve_forever(self) -> None:
        for i in range(self.workers):
            t = threading.Thread(target=self._worker, name=f"sg-http-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        self._sel.register(self.socket, selectors.EVENT_READ, "listen")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        try:
            while not self._stop.is_set():
                self._loop_once()
        finally:
            self._done.set()

    def shutdown(self) -> None:
        self._stop.set()
        self._wake()
        self._done.wait(timeout=10)

    def server_close(self) -> None:
        for c in list(self._conns.values()):
            self._close(c)
        for _ in self._threads:
            self._work.put(None)
        for t in self._threads:
            t.join(timeout=2)
        for s in (self.socket, self._wake_r, self._wake_w):
            try:
                s.close()
            except OSError:
                pass
        self._sel.close()

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    # -- dispatcher
    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass

    def _loop_once(self) -> None:
        self._take_returned()
        for key, _ in self._sel.select(timeout=_TICK):
            if key.data == "listen":
                self._accept()
            elif key.data == "wake":
                try:
                    while self._wake_r.recv(4096):
                        pass
                except (BlockingIOError, OSError):
                    pass
            else:
                self._readable(key.data)
        self._take_returned()
        self._sweep(time.monotonic())

    def _take_returned(self) -> None:
        while self._returned:
            conn = self._returned.popleft()
            if conn.state == "closing":
                self._linger(conn)
            else:
                self._resume(conn)

    def _accept(self) -> None:
        while True:
            try:
                sock, addr = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and friends: stop accepting this round
                log.warning("accept failed: %s", exc)
                return
            self._count("accepted")
            sock.setblocking(False)
            if len(self._conns) >= self.max_connections:
                # Make room by closing the connection idle the longest, if it has been idle
                # a moment (a connection accepted just now may not have been read yet).
                oldest = next(iter(self._idle.values()), None)
                if oldest is not None and time.monotonic() - oldest.last_active >= _EVICT_AFTER:
                    self._count("evicted_idle")
                    self._close(oldest)
                else:
                    self._count("refused_over_cap")
                    try:  # a TLS client reads this as a failed handshake: closed all the same
                        sock.send(_quick_reply(503, {"error": "too many connections; retry later"}))
                    except OSError:
                        pass
                    sock.close()
                    continue
            if self.ssl_context is not None:
                try:
                    sock = self.ssl_context.wrap_socket(sock, server_side=True,
                                                        do_handshake_on_connect=False)
                except (OSError, ValueError):  # the peer reset it already
                    sock.close()
                    continue
            conn = _Conn(sock, addr, time.monotonic())
            self._conns[sock.fileno()] = conn
            self._idle[sock.fileno()] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _handshake(self, conn: _Conn) -> bool:
        """Advance a TLS handshake; True once it is done (the request may follow)."""
        try:
            conn.sock.do_handshake()  # type: ignore[attr-defined]
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            # WantWrite: the server's flight did not fit the socket buffer (a few KiB against
            # hundreds); the client's next bytes, or idle_timeout, move it on.
            return False
        except (ssl.SSLError, OSError) as exc:
            self._count("tls_refused")
            log.info("TLS handshake with %s failed: %s", conn.addr[0] if conn.addr else "?",
                     getattr(exc, "reason", None) or exc)
            self._close(conn)
            return False
        conn.handshaking = False
        return True

    def _recv(self, conn: _Conn) -> bytes | None:
        """What arrived (b"" at the end of the stream), None for nothing yet."""
        try:
            data = conn.sock.recv(262144)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return None
        except OSError:
            return b""
        return data

    def _readable(self, conn: _Conn) -> None:
        if conn.handshaking and not self._handshake(conn):
            return
        data = self._recv(conn)
        if data is None:
            return
        if not data:
            self._close(conn)
            return
        now = time.monotonic()
        conn.last_active = now
        if conn.state == "linger":  # discard what a refused client still sends
            conn.linger_until = min(conn.linger_end, now + _LINGER)
            return
        conn.buf += data
        self._progress(conn, now)

    def _progress(self, conn: _Conn, now: float) -> None:
        """Look at the buffered bytes: wait for more, answer early, or hand to a worker."""
        fd = conn.sock.fileno()
        if not conn.buf:
            return
        if conn.first_byte is None:
            conn.first_byte = now
            conn.state = "reading"
            self._idle.pop(fd, None)
        if conn.need is None:
            end = conn.buf.find(b"\r\n\r\n")
            sep = 4
            if end < 0:
                end, sep = conn.buf.find(b"\n\n"), 2
            if end < 0:
                if len(conn.buf) > MAX_HEAD:
                    self._answer_and_linger(conn, 431, {"error": f"request head over {MAX_HEAD} bytes"})
                return
            if end > MAX_HEAD:
                self._answer_and_linger(conn, 431, {"error": f"request head over {MAX_HEAD} bytes"})
                return
            head = bytes(conn.buf[:end])
            verdict = self._look(head, str(conn.addr[0]) if conn.addr else "")
            if verdict is None:
                return
            kind, value = verdict
            if kind == "answer":
                code, obj = value
                self._count("early_answers")
                self._answer_and_linger(conn, code, obj)
                return
            body_len, expect, conn.headers = value
            conn.head_end = end + sep
            conn.need = end + sep + body_len
            if expect and len(conn.buf) < conn.need and not conn.continued:
                conn.continued = True
                try:
                    conn.sock.send(b"HTTP/1.1 100 Continue\r\n\r\n")
                except OSError:
                    pass
        if len(conn.buf) >= conn.need:
            self._dispatch(conn)

    def _look(self, head: bytes, peer: str = "") -> tuple[str, Any] | None:
        """("answer", (code, obj)) or ("body", (length, expects_100, headers)) for a request
        head (headers None: a malformed request line, which the handler answers)."""
        line, _, rest = head.partition(b"\n")
        words = line.decode("latin-1").strip().split()
        if len(words) != 3:
            return "body", (0, False, None)  # the handler answers 400 for a malformed request line
        method, target, _version = words
        try:
            headers = parse_head(rest)
        except ValueError:
            return "answer", (400, {"error": "malformed request headers"})
        path = target.split("?", 1)[0]
        if self.early is not None:
            refusal = self.early(method, path, headers, peer)
            if refusal is not None:
                return "answer", refusal
        if headers.get("Transfer-Encoding"):
            return "answer", (411, {"error": "Content-Length required (no chunked bodies)"})
        raw = headers.get("Content-Length")
        if raw is None:
            return "body", (0, False, headers)
        try:
            length = int(raw)
        except ValueError:
            return "answer", (400, {"error": f"Content-Length: not a number: {raw[:40]!r}"})
        if length < 0:
            return "answer", (400, {"error": f"Content-Length: negative: {length}"})
        if length > self.max_body:
            return "answer", (413, {"error": f"body over {self.max_body} bytes"})
        expect = str(headers.get("Expect", "")).lower() == "100-continue"
        return "body", (length, expect, headers)

    def _dispatch(self, conn: _Conn) -> None:
        self._sel.unregister(conn.sock)
        conn.state = "busy"
        self._work.put(conn)

    def _resume(self, conn: _Conn) -> None:
        """A worker finished a request on a keep-alive connection."""
        if conn.sock.fileno() < 0:
            return
        conn.sock.setblocking(False)
        conn.first_byte, conn.need, conn.continued, conn.headers = None, None, False, None
        conn.state = "idle"
        now = time.monotonic()
        conn.last_active = now
        self._sel.register(conn.sock, selectors.EVENT_READ, conn)
        if conn.buf:
            self._progress(conn, now)  # a pipelined request was already buffered
        else:
            self._idle[conn.sock.fileno()] = conn

    def _linger(self, conn: _Conn) -> None:
        """Half-close and discard input for a while, so the client reads our answer."""
        if conn.sock.fileno() < 0:
            return
        conn.sock.setblocking(False)
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.state = "linger"
        conn.buf = bytearray()
        now = time.monotonic()
        conn.linger_until = now + _LINGER
        conn.linger_end = now + _LINGER_MAX
        self._idle.pop(conn.sock.fileno(), None)
        try:
            self._sel.register(conn.sock, selectors.EVENT_READ, conn)
        except (KeyError, ValueError):
            pass  # already registered

    def _answer_and_linger(self, conn: _Conn, code: int, obj: dict[str, Any]) -> None:
        try:
            conn.sock.settimeout(1.0)  # a small answer; a client that reads nothing is dropped
            conn.sock.sendall(_quick_reply(code, obj))
        except OSError:
            self._close(conn)
            return
        if code == 408:
            log.info("request from %s timed out", conn.addr[0] if conn.addr else "?")
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        self._linger(conn)

    def _sweep(self, now: float) -> None:
        for conn in list(self._conns.values()):
            if conn.state == "idle" and now - conn.last_active > self.idle_timeout:
                self._count("idle_closed")
                self._close(conn)
            elif (conn.state == "reading" and conn.first_byte is not None
                  and now - conn.first_byte > self.request_timeout):
                self._count("request_timeouts")
                self._answer_and_linger(conn, 408, {
                    "error": f"request not complete within {self.request_timeout:g}s"})
            elif conn.state == "linger" and now > conn.linger_until:
                self._close(conn)

    def _close(self, conn: _Conn) -> None:
        fd = conn.sock.fileno()
        if fd >= 0:
            try:
                self._sel.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
            self._conns.pop(fd, None)
            self._idle.pop(fd, None)
        try:
            conn.sock.close()
        except OSError:
            pass

    # -- workers
    def _worker(self) -> None:
        while True:
            conn = self._work.get()
            if conn is None:
                return
            keep = False
            try:
                keep = self._handle(conn)
            except Exception:  # a handler bug: drop this connection, keep serving
                log.exception("request handler failed")
            conn.state = "keep" if keep else "closing"
            self._returned.append(conn)
            self._wake()

    def _handle(self, conn: _Conn) -> bool:
        """Run the handler on one buffered request; True to keep the connection open."""
        need = conn.need or len(conn.buf)
        data, conn.buf = bytes(conn.buf[:need]), conn.buf[need:]
        conn.sock.settimeout(self.write_timeout)
        h = self.handler_cls.__new__(self.handler_cls)
        h.request = h.connection = conn.sock
        h.client_address = conn.addr
        h.server = self
        if conn.headers is not None and self._own_handler:
            # The request line, an empty header block, the body: the dispatcher parsed the
            # headers already (Handler.parse_request takes them from _sg_headers).
            line = data[: data.find(b"\n") + 1]
            h.rfile = io.BytesIO(line + b"\r\n" + data[conn.head_end:])
            h._sg_headers = conn.headers
        else:
            h.rfile = io.BytesIO(data)
        h.wfile = _Writer(conn.sock)
        h.close_connection = True
        self._count("requests")
        h.handle_one_request()
        return not h.close_connection
