"""adapters/httppost.py against http.client, which serve_client used before: over a socket
that records the request and answers canned bytes, both send the same bytes and come to the
same answer or the same error (kind and words); over TLS (support.testca) both verify the
server the same way. serve_client.post_json's DeliveryError lines come from these."""

from __future__ import annotations

import http.client
import socket
import ssl

import pytest
from support.acceptloop import AcceptLoop
from support.testca import TestCA

from slurmguard.adapters import httppost
from slurmguard.adapters.serve_client import DeliveryError, _is_tls, _why, post_json

HEADERS = {"Authorization": "Bearer t0k", "Content-Type": "application/json",
           "User-Agent": "slurmguard/0"}
BODY = b'{"records":[]}'


class Canned:
    """A server on 127.0.0.1 that reads one request (head and Content-Length body), keeps it,
    writes ``answer`` and closes; ``tls``: a server context wrapping each connection."""

    def __init__(self, answer: bytes, tls: ssl.SSLContext | None = None) -> None:
        self.answer, self.tls, self.requests = answer, tls, []
        sock = socket.create_server(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.loop = AcceptLoop(sock, self._one)

    def _one(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536) or b"\r\n\r\n"
            head, _, rest = data.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            while len(rest) < length:
                rest += conn.recv(65536) or b"x" * length
            self.requests.append(data[:len(head) + 4] + rest)
            conn.sendall(self.answer)
        except (OSError, IndexError, ValueError):
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.loop.close()


def _theirs(port: int, ctx: ssl.SSLContext | None = None, host: str = "127.0.0.1",
            timeout: float = 5.0) -> tuple[str, object]:
    """What serve_client did before: http.client's request, getresponse and read."""
    conn = (http.client.HTTPSConnection(host, port, timeout=timeout, context=ctx) if ctx
            else http.client.HTTPConnection(host, port, timeout=timeout))
    try:
        conn.request("POST", "/ingest", body=BODY, headers=HEADERS)
        resp = conn.getresponse()
        return "answer", (resp.status, resp.read())
    except (OSError, http.client.HTTPException) as exc:
        return "error", (_why(exc), _is_tls(exc))
    finally:
        conn.close()


def _ours(port: int, ctx: ssl.SSLContext | None = None, host: str = "127.0.0.1",
          timeout: float = 5.0) -> tuple[str, object]:
    try:
        return "answer", httppost.post(host, port, "/ingest", BODY, HEADERS, timeout=timeout,
                                       tls=ctx)
    except (OSError, httppost.HTTPError) as exc:
        return "error", (_why(exc), _is_tls(exc))


ANSWERS = [
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\": 1}\n\n",
    b"HTTP/1.1 422 Unprocessable\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
    b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.0 200 OK\r\n\r\n{\"to\": \"the close\"}",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;x=1\r\n{\"a\"\r\n3\r\n: 1\r\n1\r\n}\r\n0\r\nT: x\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\nContent-Length: 99\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked \r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{}",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nContent-Length:\r\n  2\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\n X-Lead: continued\r\nContent-Length: 2\r\n\r\n{}xx",
    b"HTTP/1.1 200 OK\r\nnot a header\r\nContent-Length: 2\r\n\r\n{}xx",
    b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n",
    b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\n{}",
    b"",
    b"garbage\r\n",
    b"HTTP/1.1 abc Bad\r\n\r\n",
    b"HTTP/1.1 99 Low\r\n\r\n",
    b"HTTP/2 200 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"\r\n",
    b"HTTP/1.1 200 OK" + b"x" * 70000 + b"\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70000 + b"\r\n\r\n",
]


@pytest.mark.parametrize("answer", ANSWERS, ids=range(len(ANSWERS)))
def test_the_same_bytes_and_the_same_outcome_as_http_client(answer):
    srv = Canned(answer)
    try:
        theirs, ours = _theirs(srv.port), _ours(srv.port)
    finally:
        srv.close()
    assert ours == theirs
    assert len(srv.requests) == 2 and srv.requests[0] == srv.requests[1], srv.requests


def test_refused_and_timed_out_say_what_http_client_said():
    s = socket.create_server(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    assert _ours(port) == _theirs(port) and "refused" in str(_ours(port))
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (backlog), never answers
    try:
        port = silent.getsockname()[1]
        assert _ours(port, timeout=0.2) == _theirs(port, timeout=0.2) == (
            "error", ("timed out", False))
    finally:
        silent.close()


def test_a_header_value_http_client_refuses_is_refused_the_same_way():
    for bad in ("a\r\nInjected: 1", "caf\u00e9\u2603"):
        headers = {**HEADERS, "Authorization": bad}
        with pytest.raises(ValueError) as theirs:
            http.client.HTTPConnection("127.0.0.1", 9).request("POST", "/", BODY, headers)
        with pytest.raises(ValueError) as ours:
            httppost.post("127.0.0.1", 9, "/", BODY, headers, timeout=1)
        assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)
    assert httppost._check_value("folded\r\n value") == b"folded\r\n value"
    with pytest.raises(httppost.HTTPError, match="control characters"):
        httppost.post("127.0.0.1", 9, "/in gest", BODY, HEADERS, timeout=1)


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    d = tmp_path_factory.mktemp("ca")
    return TestCA(d)


def _server_ctx(ca: TestCA, names: list[str]) -> ssl.SSLContext:
    cert, key = ca.issue("srv-" + "-".join(names), names)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


def test_over_tls_the_same_request_and_the_same_refusal(ca):
    from slurmguard.adapters.tls import client_context

    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    srv = Canned(ok, _server_ctx(ca, ["localhost"]))
    try:
        client = client_context(str(ca.ca_file))
        theirs, ours = _theirs(srv.port, client, "localhost"), _ours(srv.port, client, "localhost")
        assert ours == theirs == ("answer", (200, b"{}"))
        assert len(srv.requests) == 2 and srv.requests[0] == srv.requests[1]
        # the name on the certificate is not the host asked for: refused by both, in words
        theirs, ours = _theirs(srv.port, client, "127.0.0.1"), _ours(srv.port, client, "127.0.0.1")
        assert ours == theirs and ours[0] == "error" and ours[1][1] is True
        assert "certificate refused" in ours[1][0]
    finally:
        srv.close()


def test_post_json_imports_neither_http_client_nor_ssl_for_http():
    import subprocess
    import sys

    srv = Canned(b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n{\"stored\":[]}")
    try:
        code = ("import json, sys\n"
                "from slurmguard.adapters.serve_client import post_json\n"
                f"a = post_json('http://127.0.0.1:{srv.port}/ingest', 'tok', {{'records': []}}, 5)\n"
                "print(json.dumps([a, sorted(m for m in sys.modules if m.split('.')[0] in "
                "('http', 'email', 'ssl'))]))\n")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
    finally:
        srv.close()
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == '[{"stored": []}, []]'
    assert b"Authorization: Bearer tok\r\n" in srv.requests[0]
    with pytest.raises(DeliveryError, match="not an http"):
        post_json("ftp://h/ingest", "t", {}, 1)
