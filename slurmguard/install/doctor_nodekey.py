"""doctor node's check of its node key (``serve.auth = "node-key"``; docs/security.md).

Beyond the file (present, root's, not world-readable: Doctor._token), the key must be the
one serve derives for this node from its site key (or the previous one, during a rotation):
doctor signs an empty batch of records with it and posts it to each report URL, as the hooks
would. serve answers 200 (the key is good; nothing is stored), 403 ``invalid`` (a key for
another node, or from a site key serve no longer takes: install the one ``serve node-keys``
writes), or does not answer (skipped: nothing to say about the key).
"""

from __future__ import annotations

from typing import Any


def check(doc: Any, node: str) -> None:
    import time

    from slurmguard.adapters.serve_client import DeliveryError, ingest_urls, post_json, read_token
    from slurmguard.nodekey import node_key_header

    path = str(doc.cfg["hooks.node_key_file"])
    urls = ingest_urls(doc.cfg.section("hooks"))
    if not urls:
        doc.add("node key", None, "no hooks.report_url: the key is not tried against serve")
        return
    try:
        secret = read_token(path)
    except DeliveryError as exc:
        doc.add("node key", False, str(exc), f"install {node}'s key there (serve node-keys)")
        return
    ca = str(doc.cfg.section("serve").get("tls_ca") or "")
    refused, unreachable = [], []
    for url in urls:
        try:
            post_json(url, lambda body: node_key_header(secret, node, body, time.time()),
                      {"records": []}, float(doc.cfg["hooks.report_timeout"]), ca=ca)
        except DeliveryError as exc:
            (refused if "HTTP 403" in str(exc) else unreachable).append(str(exc))
            continue
        doc.add("node key", True, f"{url} takes {node}'s key ({path})")
        return
    if refused:
        doc.add("node key", False, f"serve refuses {node}'s key from {path}: {refused[0]} (a "
                "key for another node, or from a site key serve no longer takes)",
                f"install {node}'s key from `slurmguard serve node-keys --out DIR` on the "
                f"controller as {path} (root, 0600)")
        return
    doc.add("node key", None, f"serve did not answer: {unreachable[0]}")
