"""The node's HTTP client of `slurmguard serve`: POST result records, ask for a drain permit.

Standard library only (``http.client``): it runs in every prolog. Every call is bounded by a
timeout; an unreachable serve, a non-200 answer or an unreadable token raise
:class:`DeliveryError`, which callers turn into "spool and retry" (records) or "fail open"
(permits).
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
    """serve could not take the records now (unreachable, 5xx, no token): spool and retry."""


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


def munge_signer(sock: str = "") -> Callable[[bytes], str]:
    """The ``Authorization`` value for a body: ``MUNGE <credential>`` whose payload is the
    body's SHA-256 hex digest (serve/identity.py). A munged that does not answer is a
    DeliveryError: the record is spooled and sent later, never lost."""
    import hashlib

    from slurmguard.adapters import munge

    def sign(body: bytes) -> str:
        try:
            return "MUNGE " + munge.encode(hashlib.sha256(body).hexdigest().encode(), sock=sock)
        except munge.MungeError as exc:
            raise DeliveryError(exc.message) from None

    return sign


def post_records(url: str, token: Auth, records: list[dict[str, Any]], timeout: float) -> dict[str, Any]:
    """POST records to serve's ingest URL; returns serve's JSON answer.

    Raises DeliveryError when serve is unreachable or answers anything but 2xx/4xx-for-a-
    record (401/403/5xx mean "try again later", so the records stay spooled).
    """
    return post_json(url, token, {"records": records}, timeout)


def ingest_urls(hooks: Any) -> list[str]:
    """The ingest URLs of the ``[hooks]`` section in the order to try them: ``report_url``,
    then ``report_urls`` (serve replicas), each once."""
    urls = [str(hooks.get("report_url") or "")] + [str(u) for u in hooks.get("report_urls") or ()]
    return list(dict.fromkeys(u for u in urls if u))


def post_first(urls: list[str], token: Auth, obj: dict[str, Any], timeout: float,
               path: str = "") -> tuple[str, dict[str, Any]]:
    """POST ``obj`` to the first of ``urls`` that answers (with ``path`` in place of the URL's
    last part when given); each try gets its share of what is left of ``timeout``, so a
    replica that refuses at once leaves its time to the next. Returns (the URL that
    answered, its answer); raises DeliveryError naming every failure."""
    deadline = time.monotonic() + timeout
    problems = []
    for i, url in enumerate(urls):
        target = url.rsplit("/", 1)[0] + path if path else url
        share = max(0.05, (deadline - time.monotonic()) / (len(urls) - i))
        try:
            return url, post_json(target, token, obj, share)
        except DeliveryError as exc:
            problems.append(str(exc))
    raise DeliveryError("; ".join(problems) or "no report_url")


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
                               float(hooks.get("report_timeout", 2.0)), path="/permit")
    except DeliveryError as exc:
        return True, f"{UNREACHABLE}: {exc}"
    if answer.get("allow") is False:
        return False, str(answer.get("alert") or "refused by the blast-radius guard")
    return True, "allowed"


def post_json(url: str, token: Auth, obj: dict[str, Any], timeout: float) -> dict[str, Any]:
    import http.client
    import urllib.parse

    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise DeliveryError(f"report_url: not an http(s) URL: {url!r}")
    body = json.dumps(obj, separators=(",", ":")).encode()
    conn_cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    auth = token(body) if callable(token) else f"Bearer {token}"
    conn = conn_cls(u.hostname, u.port, timeout=max(0.05, timeout))
    try:
        conn.request("POST", u.path or "/ingest", body=body, headers={
            "Authorization": auth, "Content-Type": "application/json",
            "User-Agent": f"slurmguard/{__version__}"})
        resp = conn.getresponse()
        data = resp.read()
    except (OSError, http.client.HTTPException) as exc:
        raise DeliveryError(f"{url}: {exc}") from None
    finally:
        conn.close()
    # 422: every record of the request was malformed; the answer's "rejected" settles them
    # (they are dropped, not retried: sending them again cannot make them valid).
    if resp.status not in (200, 422):
        raise DeliveryError(f"{url}: HTTP {resp.status}")
    try:
        answer = json.loads(data)
    except ValueError:
        raise DeliveryError(f"{url}: answer is not JSON") from None
    return answer if isinstance(answer, dict) else {}
