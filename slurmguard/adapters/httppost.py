"""One HTTP/1.1 POST the way ``http.client`` sends it, without importing ``http.client``.

``http.client`` imports the email package (its header parser) and ``ssl`` at import: about
15 ms of every hook that reports to serve (the health check on every node every
HealthCheckInterval, the prolog on every job start). serve_client's records and permits need
one request and one answer, so this module sends the bytes ``http.client`` sends (request line,
``Host``, ``Accept-Encoding: identity``, ``Content-Length``, the caller's headers, the body, in
one send) and reads the answer as ``HTTPResponse.begin`` and ``read`` do: 1xx answers skipped,
a Content-Length, chunked, or to-the-close body. Its errors are ``http.client``'s in kind and
words: OSError (refused, timed out, reset; ``ssl.SSLError`` for TLS), :class:`HTTPError` with
http.client's messages (``Remote end closed connection without response``, a bad status line,
``IncompleteRead(...)``), ValueError for a header value http.client refuses.
tests/test_httppost.py holds it to http.client, byte for byte, over canned answers.
"""

from __future__ import annotations

import socket
from typing import Any

_MAXLINE = 65536  # http.client's _MAXLINE and _MAXHEADERS
_MAXHEADERS = 100


class HTTPError(Exception):
    """What ``http.client.HTTPException`` would have been: a broken or cut answer."""


def _incomplete(partial: bytes, expected: int | None = None) -> HTTPError:
    more = f", {expected} more expected" if expected is not None else ""
    return HTTPError(f"IncompleteRead({len(partial)} bytes read{more})")


def _check_value(value: str) -> bytes:
    """A header value as http.client encodes and checks it (latin-1; ValueError for a line
    break that does not continue the value)."""
    raw = value.encode("latin-1")
    for i, ch in enumerate(raw):
        if ch in b"\r\n" and not (ch == 10 and raw[i + 1:i + 2] in (b" ", b"\t")) and not (
                ch == 13 and raw[i + 1:i + 2] in (b" ", b"\t", b"\n")):
            raise ValueError(f"Invalid header value {raw!r}")
    return raw


def post(host: str, port: int | None, path: str, body: bytes, headers: dict[str, str], *,
         timeout: float, source: str = "", tls: Any = None) -> tuple[int, bytes]:
    """POST ``body`` to ``path`` on ``host:port`` (port None: 80, or 443 with ``tls``) and
    return (status, body of the answer). ``tls``: an ``ssl.SSLContext`` that verifies the
    server as ``host`` (SNI too). ``timeout`` bounds the connect, the handshake and each read;
    ``source``: the local address to send from."""
    default = 443 if tls is not None else 80
    head = _request_head(host, default if port is None else port, default, path, body, headers)
    sock = socket.create_connection((host, default if port is None else port), timeout,
                                    (source, 0) if source else None)
    try:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            import errno

            if exc.errno != errno.ENOPROTOOPT:
                raise
        if tls is not None:  # as HTTPSConnection: ALPN http/1.1, post-handshake auth offered
            tls.set_alpn_protocols(["http/1.1"])
            if tls.post_handshake_auth is not None:
                tls.post_handshake_auth = True
            sock = tls.wrap_socket(sock, server_hostname=host)
        sock.sendall(head + body)
        with sock.makefile("rb") as fp:
            return _read_answer(fp)
    finally:
        sock.close()


def _request_head(host: str, port: int, default: int, path: str, body: bytes,
                  headers: dict[str, str]) -> bytes:
    if any(c <= " " or c == "\x7f" for c in path):
        bad = next(c for c in path if c <= " " or c == "\x7f")
        raise HTTPError(f"URL can't contain control characters. {path!r} (found at least {bad!r})")
    try:
        host_enc = host.encode("ascii")
    except UnicodeEncodeError:
        host_enc = host.encode("idna")
    if ":" in host:
        host_enc = b"[" + host_enc + b"]"
    lines = [f"POST {path} HTTP/1.1".encode("ascii"),
             b"Host: " + (host_enc if port == default else host_enc + b":%d" % port),
             b"Accept-Encoding: identity", b"Content-Length: %d" % len(body)]
    lines += [k.encode("latin-1") + b": " + _check_value(v) for k, v in headers.items()]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _read_answer(fp: Any) -> tuple[int, bytes]:
    """HTTPResponse.begin() then read(), for a POST."""
    while True:
        version, status = _read_status(fp)
        if status != 100:
            break
        _read_header_lines(fp)  # a 100 Continue's headers, skipped
    if version not in ("HTTP/1.0", "HTTP/0.9") and not version.startswith("HTTP/1."):
        raise HTTPError(version)  # http.client's UnknownProtocol
    found = _parse_headers(_read_header_lines(fp))
    if (found.get("transfer-encoding") or "").lower() == "chunked":
        return status, _read_chunked(fp)
    length: int | None = None
    if found.get("content-length"):
        try:
            length = int(found["content-length"])
        except ValueError:
            length = None
        if length is not None and length < 0:
            length = None
    if status in (204, 304) or 100 <= status < 200:
        length = 0
    if length is None:
        return status, fp.read()
    data = fp.read(length)
    if len(data) < length:
        raise _incomplete(data, length - len(data))
    return status, data


def _read_status(fp: Any) -> tuple[str, int]:
    line = str(fp.readline(_MAXLINE + 1), "iso-8859-1")
    if len(line) > _MAXLINE:
        raise HTTPError(f"got more than {_MAXLINE} bytes when reading status line")
    if not line:
        raise HTTPError("Remote end closed connection without response")
    parts = line.split(None, 2)
    version, code = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
    if not version.startswith("HTTP/"):
        raise HTTPError(line)  # http.client's BadStatusLine, in its words
    try:
        status = int(code)
    except ValueError:
        raise HTTPError(line) from None
    if status < 100 or status > 999:
        raise HTTPError(line)
    return version, status


def _read_header_lines(fp: Any) -> list[bytes]:
    lines: list[bytes] = []
    while True:
        line = fp.readline(_MAXLINE + 1)
        if len(line) > _MAXLINE:
            raise HTTPError(f"got more than {_MAXLINE} bytes when reading header line")
        lines.append(line)
        if len(lines) > _MAXHEADERS:
            raise HTTPError(f"got more than {_MAXHEADERS} headers")
        if line in (b"\r\n", b"\n", b""):
            return lines


def _parse_headers(lines: list[bytes]) -> dict[str, str]:
    """Lower-case name -> the first such header's value, as email's parser (compat32) gives
    it to http.client: leading blanks dropped, continuation lines kept, the line end cut; a
    line that is neither a header nor a continuation ends the block."""
    fields: list[list[str]] = []
    for raw in lines[:-1]:
        text = raw.decode("iso-8859-1")
        if text[:1] in (" ", "\t"):
            if fields:
                fields[-1][1] += text
            continue
        name, colon, value = text.partition(":")
        if not colon or any(not (33 <= ord(c) <= 126) for c in name):
            break
        fields.append([name.lower(), value.lstrip(" \t")])
    found: dict[str, str] = {}
    for name, value in fields:
        found.setdefault(name, value.rstrip("\r\n"))
    return found


def _read_chunked(fp: Any) -> bytes:
    value: list[bytes] = []
    while True:
        line = fp.readline(_MAXLINE + 1)
        if len(line) > _MAXLINE:
            raise HTTPError(f"got more than {_MAXLINE} bytes when reading chunk size")
        try:
            size = int(line.split(b";", 1)[0], 16)
        except ValueError:
            raise _incomplete(b"".join(value)) from None
        if size == 0:
            while True:  # the trailer, up to its blank line (or the close)
                line = fp.readline(_MAXLINE + 1)
                if len(line) > _MAXLINE:
                    raise HTTPError(f"got more than {_MAXLINE} bytes when reading trailer line")
                if line in (b"\r\n", b"\n", b""):
                    return b"".join(value)
        data = fp.read(size)
        if len(data) < size:
            raise _incomplete(b"".join(value))
        value.append(data)
        if len(fp.read(2)) < 2:
            raise _incomplete(b"".join(value))
