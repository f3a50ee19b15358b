"""The node's HTTP client of `slurmguard serve`: POST result records, ask for a drain permit.

Standard library only (sockets, and ``ssl`` for https: adapters/httppost.py sends what
``http.client`` would, without its ~15 ms import): it runs in every prolog and health check.
Every call is bounded by a timeout; an unreachable serve, a non-200 answer or an unreadable
token raise :class:`DeliveryError`, which callers turn into "spool and retry" (records) or
"fail open" (permits).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from slurmguard import __version__

if TYPE_CHECKING:
    from slurmguard.config import Config


UNREACHABLE = "serve unreachable"  # drain_permit's answer when no replica answered

# What authenticates a request: the shared token (serve.auth = "token"), or a function of the
# body bytes giving the Authorization header (serve.auth = "munge": a credential per body).
Auth = str | Callable[[bytes], str]


class DeliveryError(Exception):
    """serve could not take the records now (unreachable, 5xx, no token): spool and retry.
    ``tls``: the server's certificate was refused (or the CA file is unusable): a fault of
    the installation that the hook says in its log line, never a node fault."""

    def __init__(self, message: str, *, tls: bool = False, refused: bool = False) -> None:
        super().__init__(message)
        self.tls = tls
        # A replica answered with a 4xx other than 422 (a serve that is up refused the
        # request or does not know its path): not an outage.
        self.refused = refused


def read_token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            token = fh.read().strip()
    except OSError as exc:
        raise DeliveryError(f"token {path}: {exc.strerror}") from None
    if not token:
        raise DeliveryError(f"token {path}: empty")
    return token


def node_auth(cfg: Config, node: str, *, socket_key: str = "hooks.munge_socket") -> Auth:
    """How node ``node`` signs its requests, by ``serve.auth``: a MUNGE credential over each
    body (the default), its node key (``hooks.node_key_file``), or the shared token of
    ``hooks.token_file``."""
    mode = str(cfg["serve.auth"])
    if mode == "token":
        return read_token(str(cfg["hooks.token_file"]))
    if mode == "node-key":
        import time

        from slurmguard.nodekey import node_key_header

        secret = read_token(str(cfg["hooks.node_key_file"]))
        return lambda body: node_key_header(secret, node, body, time.time())
    return munge_signer(str(cfg[socket_key]))


def munge_signer(sock: str = "") -> MungeSigner:
    """The ``Authorization`` value for a body: ``MUNGE <credential>`` whose payload is the
    body's SHA-256 hex digest (serve/identity.py). A munged that does not answer is a
    DeliveryError: the record is spooled and sent later, never lost."""
    return MungeSigner(sock)


class MungeSigner:
    """Signs bodies with the munged at ``sock``; :meth:`source_address` is that munged's
    origin address, which :func:`post_json` binds as the connection's source: serve refuses a
    credential sent from any address but its origin (``wrong-peer``), so a node on a host
    with several addresses sends from the one its munged seals in (its NodeAddr, which
    `slurmguard doctor node` checks)."""

    def __init__(self, sock: str = "") -> None:
        self.sock = sock
        self._source: str | None = None

    def __call__(self, body: bytes) -> str:
        import hashlib

        from slurmguard.adapters import munge

        try:
            return "MUNGE " + munge.encode(hashlib.sha256(body).hexdigest().encode(), sock=self.sock)
        except munge.MungeError as exc:
            raise DeliveryError(exc.message) from None

    def source_address(self) -> str:
        """The origin address of this munged when this host can send from it, else "" (the
        kernel picks; serve then says ``wrong-peer`` and the record stays spooled). Learnt
        once per process: a throwaway credential minted and decoded here (two round trips to
        the local munged, about 0.2 ms)."""
        if self._source is None:
            import socket

            from slurmguard.adapters import munge

            try:
                origin = munge.decode(munge.encode(b"", sock=self.sock), sock=self.sock).origin
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                    probe.bind((origin, 0))
                self._source = "" if origin == "0.0.0.0" else origin
            except (munge.MungeError, OSError):
                self._source = ""
        return self._source


def post_records(url: str, token: Auth, records: list[dict[str, Any]], timeout: float,
                 ca: str = "") -> dict[str, Any]:
    """POST records to serve's ingest URL; returns serve's JSON answer.

    Raises DeliveryError when serve is unreachable or answers anything but 2xx/4xx-for-a-
    record (401/403/5xx mean "try again later", so the records stay spooled).
    """
    return post_json(url, token, {"records": records}, timeout, ca=ca)


def ingest_urls(hooks: Any) -> list[str]:
    """The ingest URLs of the ``[hooks]`` section in the order to try them: ``report_url``,
    then ``report_urls`` (serve replicas), each once."""
    urls = [str(hooks.get("report_url") or "")] + [str(u) for u in hooks.get("report_urls") or ()]
    return list(dict.fromkeys(u for u in urls if u))


def post_first(urls: list[str], token: Auth, obj: dict[str, Any], timeout: float,
               path: str = "", ca: str = "") -> tuple[str, dict[str, Any]]:
    """POST ``obj`` to the first of ``urls`` that answers (with ``path`` in place of the URL's
    last part when given); each try gets its share of what is left of ``timeout``, so a
    replica that refuses at once leaves its time to the next. Returns (the URL that
    answered, its answer); raises DeliveryError naming every failure."""
    deadline = time.monotonic() + timeout
    problems, tls, refused = [], False, False
    for i, url in enumerate(urls):
        target = url.rsplit("/", 1)[0] + path if path else url
        share = max(0.05, (deadline - time.monotonic()) / (len(urls) - i))
        try:
            return url, post_json(target, token, obj, share, ca=ca)
        except DeliveryError as exc:
            problems.append(str(exc))
            tls, refused = tls or exc.tls, refused or exc.refused
    raise DeliveryError("; ".join(problems) or "no report_url", tls=tls, refused=refused)


def drain_permit(node: str, check: str, reason: str, cfg: Config) -> tuple[bool, str]:
    """Ask serve whether this node may drain itself now (the blast-radius guard).

    Returns (allowed, why). Fails open: when serve is not configured or no replica answers
    in ``hooks.report_timeout`` the answer is (True, ...), because a node with a fault must
    not take jobs just because the controller is busy; the cap then holds for serve's own
    drains and the ledger shows the drain when the record is replayed.
    """
    hooks = cfg.section("hooks")
    urls = ingest_urls(hooks)
    if not urls:
        return True, "no report_url"
    try:
        token = node_auth(cfg, node)
        _, answer = post_first(urls, token, {"node": node, "check": check, "reason": reason},
                               float(hooks.get("report_timeout", 2.0)), path="/permit",
                               ca=str(cfg.section("serve").get("tls_ca") or ""))
    except DeliveryError as exc:
        return True, f"{UNREACHABLE}: {exc}"
    if answer.get("allow") is False:
        return False, str(answer.get("alert") or "refused by the blast-radius guard")
    return True, "allowed"


def connection(url: str, timeout: float, ca: str = "", source: str = "") -> Any:
    """An unopened ``http.client`` connection to ``url``'s host (from the local address
    ``source`` when given); for https one that verifies serve's certificate against ``ca``
    (serve.tls_ca; empty: the system's CAs) and the URL's host name. Raises DeliveryError for
    a URL that is not http(s) or an unusable CA file. (The job wrapper's notices use it;
    records and permits go by :func:`post_json`, without http.client.)"""
    import http.client

    u = _split(url)
    bind = (source, 0) if source else None
    if u.scheme == "http":
        return http.client.HTTPConnection(u.hostname, u.port, timeout=max(0.05, timeout),
                                          source_address=bind)
    return http.client.HTTPSConnection(u.hostname, u.port, timeout=max(0.05, timeout),
                                       context=_tls_context(ca), source_address=bind)


def _split(url: str) -> Any:
    """``url`` split; DeliveryError unless it is http(s) with a host."""
    import urllib.parse

    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise DeliveryError(f"report_url: not an http(s) URL: {url!r}")
    return u


def _tls_context(ca: str) -> Any:
    """The verifying client context of ``ca`` (adapters/tls.py); DeliveryError (tls) for an
    unusable CA file."""
    import ssl

    from slurmguard.adapters.tls import client_context

    try:
        return client_context(ca)
    except (OSError, ssl.SSLError) as exc:
        raise DeliveryError(f"serve.tls_ca {ca}: {getattr(exc, 'strerror', None) or exc}",
                            tls=True) from None


def post_json(url: str, token: Auth, obj: dict[str, Any], timeout: float,
              ca: str = "") -> dict[str, Any]:
    """POST ``obj`` as JSON to ``url`` and return serve's JSON answer (200, or 422: every
    record refused). DeliveryError for anything else: unreachable, timed out, TLS refused, a
    broken answer, another status. The request and its reading are http.client's
    (adapters/httppost.py), without importing it on the hook path."""
    import urllib.parse

    from slurmguard.adapters import httppost

    u = urllib.parse.urlsplit(url)
    body = json.dumps(obj, separators=(",", ":")).encode()
    auth = token(body) if callable(token) else f"Bearer {token}"
    source = token.source_address() if isinstance(token, MungeSigner) else ""
    _split(url)
    tls = _tls_context(ca) if u.scheme == "https" else None
    headers = {"Authorization": auth, "Content-Type": "application/json",
               "User-Agent": f"slurmguard/{__version__}"}
    try:
        status, data = httppost.post(u.hostname or "", u.port, u.path or "/ingest", body,
                                     headers, timeout=max(0.05, timeout), source=source, tls=tls)
    except (OSError, httppost.HTTPError) as exc:
        raise DeliveryError(f"{url}: {_why(exc)}", tls=_is_tls(exc)) from None
    # 422: every record of the request was malformed; the answer's "rejected" settles them
    # (they are dropped, not retried: sending them again cannot make them valid).
    if status not in (200, 422):
        raise DeliveryError(f"{url}: HTTP {status}", refused=400 <= status < 500)
    try:
        answer = json.loads(data)
    except ValueError:
        raise DeliveryError(f"{url}: answer is not JSON") from None
    return answer if isinstance(answer, dict) else {}


def _is_tls(exc: BaseException) -> bool:
    return type(exc).__module__ == "ssl" or exc.__class__.__name__.startswith("SSL")


def _why(exc: BaseException) -> str:
    """One line; a refused certificate says so in words an admin greps for."""
    if exc.__class__.__name__ == "SSLCertVerificationError":
        return f"TLS: serve's certificate refused: {getattr(exc, 'verify_message', '') or exc}"
    if _is_tls(exc):
        return f"TLS: {getattr(exc, 'reason', None) or exc}"
    return str(exc)
