"""Per-node keys for sites without munged (``serve.auth = "node-key"``; docs/security.md).

Each node holds ``HMAC-SHA256(site_key, "slurmguard node-key v1|" + name)``, which `slurmguard
serve node-key NODE` prints on the controller; serve keeps only the site key and derives any
node's secret from it. One node's secret cannot give another's: HMAC is one-way in its key.
A request carries ``Authorization: SGNODE node=N,t=T,d=D,sig=HMAC(secret, "N|T|D")`` where D is
the body's SHA-256 hex digest: serve checks the signature from the header alone, before it
reads the body, then the body against D (nodes of earlier releases sent no ``d=``: serve takes their
requests up to 64 KiB of body, docs/security.md).
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
    return digest_sig(secret, node, t, hashlib.sha256(body).hexdigest())


def digest_sig(secret: str, node: str, t: int, digest: str) -> str:
    """The signature over a body whose SHA-256 hex digest is ``digest``."""
    return hmac.new(secret.encode(), f"{node}|{t}|{digest}".encode(), hashlib.sha256).hexdigest()


def node_key_header(secret: str, node: str, body: bytes, now: float) -> str:
    """The Authorization value a node sends for ``body``."""
    t = int(now)
    digest = hashlib.sha256(body).hexdigest()
    return f"{NODE_KEY_SCHEME}node={node},t={t},d={digest},sig={digest_sig(secret, node, t, digest)}"
