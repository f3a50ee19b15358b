"""Per-node keys for sites without munged (``serve.auth = "node-key"``; docs/security.md).

Each node holds ``HMAC-SHA256(site_key, "slurmguard node-key v1|" + name)``, which `slurmguard
serve node-key NODE` prints on the controller; serve keeps only the site key and derives any
node's secret from it. One node's secret cannot give another's: HMAC is one-way in its key.
A request carries ``Authorization: SGNODE node=N,t=T,sig=HMAC(secret, "N|T|sha256(body)")``.
Standard library only: the node side signs with it in every prolog.
"""

from __future__ import annotations

import hashlib
import hmac

NODE_KEY_SCHEME = "SGNODE "
NODE_KEY_WINDOW = 300.0  # s a signed request stays good (munge's default TTL)


def node_secret(site_key: bytes, node: str) -> str:
    """The secret of ``node`` (hex), from the site key."""
    return hmac.new(site_key, b"slurmguard node-key v1|" + node.encode(), hashlib.sha256).hexdigest()


def node_sig(secret: str, node: str, t: int, body: bytes) -> str:
    msg = f"{node}|{t}|{hashlib.sha256(body).hexdigest()}".encode()
    return hmac.new(secret.encode(), msg, hashlib.sha256).hexdigest()


def node_key_header(secret: str, node: str, body: bytes, now: float) -> str:
    """The Authorization value a node sends for ``body``."""
    t = int(now)
    return f"{NODE_KEY_SCHEME}node={node},t={t},sig={node_sig(secret, node, t, body)}"
