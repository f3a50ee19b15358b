"""doctor's TLS items: serve's certificate on the controller, the nodes' view of it.

Controller (``serve.tls_cert`` set): the key belongs to the certificate, ``serve.tls_ca``
vouches for it, every host of ``hooks.report_url``/``report_urls`` is among its names, and it
is not expired (a warning under :data:`slurmguard.adapters.tls.WARN_DAYS` days). Node: each
``https://`` report URL is asked for a real handshake with the node's ``serve.tls_ca``, the
very check the hooks make. Either role: a plain-HTTP URL or listen address that is not
loopback is a warning (tokens and records in clear).
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from typing import Any


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _urls(cfg: Any) -> list[urllib.parse.SplitResult]:
    from slurmguard.adapters.serve_client import ingest_urls

    return [urllib.parse.urlsplit(u) for u in ingest_urls(cfg.section("hooks"))]


def plain_http(doc: Any) -> None:
    """A warning for each place where records or the token would cross the network in clear."""
    clear = [u.geturl() for u in _urls(doc.cfg) if u.scheme == "http"
             and not _loopback(u.hostname or "")]
    scfg = doc.cfg.section("serve")
    if doc.role == "controller" and not scfg["tls_cert"] and not _loopback(str(scfg["host"])):
        clear.append(f"serve.host {scfg['host']} without serve.tls_cert")
    if clear:
        doc.add_warning("TLS", f"plain HTTP off this host: {', '.join(clear)} (the token and "
                        "the records travel in clear)", "set serve.tls_cert/tls_key on the "
                        "controller, serve.tls_ca and https:// report URLs on the nodes "
                        "(docs/serve.md \"TLS\")")


def controller(doc: Any) -> None:
    """The certificate serve will present, checked against what the nodes will ask."""
    from slurmguard.adapters.tls import inspect

    scfg = doc.cfg.section("serve")
    if not scfg["tls_cert"] and not scfg["tls_key"]:
        doc.add("TLS certificate", None, "serve.tls_cert is empty: serve speaks plain HTTP")
        return
    hosts = list(dict.fromkeys(u.hostname for u in _urls(doc.cfg)
                               if u.scheme == "https" and u.hostname))
    for f in inspect(str(scfg["tls_cert"]), str(scfg["tls_key"]), str(scfg["tls_ca"]), hosts):
        name = f"TLS {f.what}"
        fix = {"chain": "issue serve's certificate from the CA in serve.tls_ca (or set "
                        "serve.tls_ca to the CA that issued it)",
               "names": "reissue the certificate with the report URLs' hosts in its "
                        "subjectAltName, or use a name it has in hooks.report_url",
               "expiry": f"renew {scfg['tls_cert']} and restart serve"}.get(f.what, "")
        if f.status == "warn":
            doc.add_warning(name, f.detail, fix)
        else:
            doc.add(name, f.status == "pass", f.detail, fix)


def node(doc: Any) -> None:
    """A real handshake with each https report URL, verified as the hooks verify it."""
    import socket
    import ssl
    import time

    from slurmguard.adapters.tls import WARN_DAYS, client_context

    ca = str(doc.cfg["serve.tls_ca"])
    for u in _urls(doc.cfg):
        if u.scheme != "https" or not u.hostname:
            continue
        name, where = f"TLS {u.hostname}", f"{u.hostname}:{u.port or 443}"
        try:
            with socket.create_connection((u.hostname, u.port or 443), timeout=5) as raw:
                with client_context(ca).wrap_socket(raw, server_hostname=u.hostname) as s:
                    peer = s.getpeercert() or {}
        except ssl.SSLCertVerificationError as exc:
            doc.add(name, False, f"{where}: serve's certificate refused with serve.tls_ca "
                    f"{ca or '(system CAs)'}: {exc.verify_message}",
                    "copy the CA that issued serve's certificate to serve.tls_ca, or fix the "
                    "certificate's names (doctor controller says which)")
            continue
        except (OSError, ssl.SSLError) as exc:
            doc.add(name, False, f"{where}: {exc}", "start serve, or check serve.tls_ca")
            continue
        left = (ssl.cert_time_to_seconds(peer["notAfter"]) - time.time()) / 86400
        detail = f"{where} verified with {ca or 'the system CAs'}; expires in {left:.0f} days"
        if left < WARN_DAYS:
            doc.add_warning(name, detail, "renew serve's certificate")
        else:
            doc.add(name, True, detail)
