"""TLS for serve's HTTP front and its clients, standard library ``ssl`` only.

* :func:`client_context`: what every client of serve (the node's records and permits, the job
  wrapper's notices) verifies the server with: ``serve.tls_ca`` (the site's CA file; empty:
  the system's CAs), the URL's host name against the certificate's names, TLS 1.2 at least.
* :func:`server_context`: serve's certificate and key (``serve.tls_cert``/``tls_key``), loaded
  once at start; a missing file or a key that does not belong to the certificate is a one-line
  config error naming the key.
* :func:`inspect`: what doctor reports about a certificate: the key matches it, the CA vouches
  for it, the names cover the host the nodes use, days to expiry. It runs real handshakes
  between two in-memory TLS ends (``ssl.MemoryBIO``), so the verdict is OpenSSL's own, the
  same a node would reach, with no network and no private API.

A client imports ``ssl`` (with this module) only for an https URL: the hooks' records and
permits go by adapters/httppost.py, which imports neither ``http.client`` nor, for http,
``ssl``; then it pays the handshake (docs/serve.md "TLS").
"""

from __future__ import annotations

import functools
import ssl
import time
from typing import NamedTuple

from slurmguard.errors import ConfigError

WARN_DAYS = 30  # doctor warns this many days before a certificate expires
_HOST_MISMATCH = 62  # X509_V_ERR_HOSTNAME_MISMATCH
_IP_MISMATCH = 64  # X509_V_ERR_IP_ADDRESS_MISMATCH
_EXPIRED = 10  # X509_V_ERR_CERT_HAS_EXPIRED


def client_context(ca: str = "") -> ssl.SSLContext:
    """The verifying client context for ``ca``, built once per version of the file (the
    resident agent sees a replaced CA file without a restart). Raises OSError or
    ssl.SSLError for an unreadable or malformed CA file."""
    import os

    return _context(ca, os.stat(ca).st_mtime_ns if ca else 0)


@functools.lru_cache(maxsize=8)
def _context(ca: str, _version: int) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca or None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def server_context(cert: str, key: str, *, where: str = "serve") -> ssl.SSLContext:
    """serve's context with its certificate chain and key; ConfigError naming the key."""
    if not cert or not key:
        missing = f"{where}.tls_key" if cert else f"{where}.tls_cert"
        raise ConfigError(f"{missing}: empty while {where}.tls_{'cert' if cert else 'key'} "
                          "is set (TLS needs both)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except FileNotFoundError as exc:
        field = "tls_key" if exc.filename == key else "tls_cert"
        raise ConfigError(f"{where}.{field}: {exc.filename}: no such file") from None
    except PermissionError as exc:
        raise ConfigError(f"{where}.tls_key: {key}: {exc.strerror} (serve's user must "
                          "read it)") from None
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            raise ConfigError(f"{where}.tls_key: {key} is not the key of {where}.tls_cert "
                              f"{cert}") from None
        raise ConfigError(f"{where}.tls_cert/tls_key: {cert}, {key}: not a PEM certificate "
                          f"and key ({exc.reason or exc})") from None
    return ctx


class CertFinding(NamedTuple):
    """One thing doctor says about the certificate: ``status`` pass, warn or fail."""

    what: str  # "key", "chain", "names", "expiry"
    status: str
    detail: str


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, host: str | None) -> dict:
    """One TLS handshake between two in-memory ends; the client's view of the peer's
    certificate. Raises ssl.SSLCertVerificationError as a node's client would."""
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    s = server.wrap_bio(s_in, s_out, server_side=True)
    c = client.wrap_bio(c_in, c_out, server_hostname=host)
    done = [False, False]
    for _ in range(20):  # a TLS 1.3 handshake takes two round trips; 20 is ample
        for i, (end, out, peer_in) in enumerate(((c, c_out, s_in), (s, s_out, c_in))):
            if not done[i]:
                try:
                    end.do_handshake()
                    done[i] = True
                except ssl.SSLWantReadError:
                    pass
            peer_in.write(out.read())
        if all(done):
            return c.getpeercert() or {}
    raise ssl.SSLError("the in-memory handshake did not finish")


def inspect(cert: str, key: str, ca: str, hosts: list[str], *,
            now: float | None = None) -> list[CertFinding]:
    """Key, chain (against ``ca``; empty: the system's CAs), names (each of ``hosts``) and
    expiry of serve's certificate. Raises ConfigError when the pair cannot be loaded."""
    now = time.time() if now is None else now
    server = server_context(cert, key)
    found = [CertFinding("key", "pass", f"{key} belongs to {cert}")]
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    try:
        client.load_verify_locations(cafile=ca) if ca else client.load_default_certs()
    except (OSError, ssl.SSLError) as exc:
        return found + [CertFinding("chain", "fail", f"serve.tls_ca {ca}: {exc}")]
    try:
        peer = _handshake(server, client, None)
    except ssl.SSLCertVerificationError as exc:
        status = "expired" if exc.verify_code == _EXPIRED else "not trusted"
        return found + [CertFinding("chain" if status != "expired" else "expiry", "fail",
                                    f"{cert} {status} by {ca or 'the system CAs'}: "
                                    f"{exc.verify_message}")]
    found.append(CertFinding("chain", "pass", f"signed by {ca or 'a system CA'}"))
    names = [v for k, v in peer.get("subjectAltName", ()) if k in ("DNS", "IP Address")]
    client.check_hostname = True
    for host in hosts:
        try:
            _handshake(server, client, host)
            found.append(CertFinding("names", "pass", f"{host} is in {names}"))
        except ssl.SSLCertVerificationError as exc:
            if exc.verify_code not in (_HOST_MISMATCH, _IP_MISMATCH):
                raise
            found.append(CertFinding("names", "fail", f"{host} (a report_url's host) is not "
                                     f"among the certificate's names {names}"))
    left = (ssl.cert_time_to_seconds(peer["notAfter"]) - now) / 86400
    status = "pass" if left >= WARN_DAYS else "warn"
    found.append(CertFinding("expiry", status, f"expires {peer['notAfter']} "
                             f"({left:.0f} days{'' if status == 'pass' else f', under {WARN_DAYS}'})"))
    return found
