"""Who sent this request, and may it speak for the nodes it names? (pure; docs/security.md)

serve takes records, permit asks and slow-node reports from nodes and jobs. With the shared
token any holder could write for every node; here each request carries a MUNGE credential
(slurmguard.adapters.munge) and these functions decide, from what munged vouches for, whether
the request is refused and why. No I/O: the caller decodes the credential, reads Slurm's node
and job tables (cached) and passes them in.

The rules:

* the credential's payload is the SHA-256 hex digest of the exact body bytes (a credential
  cannot carry another body);
* it is not older than its TTL (munged refuses that too; checked again so the rule is here);
* it comes from its origin address: the connection's peer is the address munged sealed in
  (``serve.munge_check_peer``; off only behind a proxy). The site's key is on every node, so
  root on one node can run a munged of its own with ``--origin`` set to another node's
  address; it cannot send from that address;
* a node's request (records, /permit) comes from uid 0 or the SlurmUser, and every node it
  names is one whose NodeAddr (or NodeHostname) resolves to the credential's origin address:
  a host with several slurmd (multi-slurmd, one address) speaks for all of its own nodes and
  no others;
* a job's slow-node report (/suspect) comes from the job's owner (or root/SlurmUser) on a
  node of that job, and names only nodes of the job's allocation;
* a read of node state (GET /drains) is signed over the request target: a node's names only
  the Slurm nodes at its origin address, a job's (``job=`` in the query) only nodes of its
  allocation, under the same rule as its slow-node reports.

Reasons are stable words (metric labels, ledger events): missing, invalid, expired, rewound,
replayed, body-mismatch, wrong-uid, wrong-peer, unknown-origin, other-node, unknown-job,
outside-job, not-job-node, too-large.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from slurmguard.adapters.munge import Credential
from slurmguard.nodekey import NODE_KEY_SCHEME, NODE_KEY_WINDOW, digest_sig, node_secret

__all__ = ["NODE_KEY_SCHEME", "NODE_KEY_WINDOW", "Refusal", "node_request", "job_request",
           "node_key_request", "node_key_head", "node_key_body", "peer_request", "origin_map",
           "EventLimit", "body_digest"]

_NODE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")  # nodeset.validate_node_name's rule
REASONS = ("missing", "invalid", "expired", "rewound", "replayed", "body-mismatch", "wrong-uid",
           "wrong-peer", "unknown-origin", "other-node", "unknown-job", "outside-job", "not-job-node",
           "too-large")


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused: ``reason`` one of REASONS, ``detail`` one line."""

    reason: str
    detail: str

    def line(self) -> str:
        # One line whatever a request named: a hostile node name or job id in the detail
        # (a newline, a lone surrogate) is shown escaped, and long ones cut.
        detail = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in self.detail[:300])
        return f"refused ({self.reason}): {detail}"


def body_digest(body: bytes) -> str:
    """What the credential's payload must be for ``body``."""
    return hashlib.sha256(body).hexdigest()


def _common(cred: Credential, body: bytes, now: float) -> Refusal | None:
    if cred.payload.decode("latin-1") != body_digest(body):
        return Refusal("body-mismatch", "the credential was minted for another body")
    if now > cred.encode_time + cred.ttl:
        return Refusal("expired", f"credential encoded {now - cred.encode_time:.0f} s ago, "
                                  f"TTL {cred.ttl} s")
    return None


def peer_request(cred: Credential, peer: str) -> Refusal | None:
    """None when the credential's origin is the connection's peer address (an IPv4-mapped
    IPv6 peer, ``::ffff:a.b.c.d``, is its IPv4 address)."""
    if peer.startswith("::ffff:"):
        peer = peer[7:]
    if cred.origin != peer:
        return Refusal("wrong-peer", f"a credential of {cred.origin} sent from {peer or '?'}")
    return None


def node_request(cred: Credential, body: bytes, named: Iterable[str],
                 origin_nodes: Mapping[str, frozenset[str]], node_uids: Collection[int],
                 now: float) -> Refusal | None:
    """None when a node's request (records or a permit ask naming ``named``) may stand."""
    refusal = _common(cred, body, now)
    if refusal is not None:
        return refusal
    if cred.uid not in node_uids:
        return Refusal("wrong-uid", f"uid {cred.uid} is not root or the SlurmUser")
    own = origin_nodes.get(cred.origin, frozenset())
    if not own:
        return Refusal("unknown-origin", f"no Slurm node has the address {cred.origin}")
    others = sorted(set(named) - own)
    if others:
        more = f" and {len(others) - 1} more" if len(others) > 1 else ""
        return Refusal("other-node", f"{cred.origin} ({_names(own)}) wrote for {others[0]}{more}")
    return None


def job_request(cred: Credential, body: bytes, named: Iterable[str], job_nodes: frozenset[str] | None,
                job_uid: int | None, node_uids: Collection[int], now: float,
                job: str = "", sender_nodes: frozenset[str] | None = None) -> Refusal | None:
    """None when a job's slow-node report (or its read of ``/drains``) naming ``named`` may
    stand; ``job_nodes`` and ``job_uid`` are the job's allocation and owner from Slurm (None:
    Slurm knows no such running job), ``sender_nodes`` the Slurm nodes at the credential's
    origin address (None: not checked). A job's request comes from a node of that job, whoever
    signs it: root on another node speaks for no job."""
    refusal = _common(cred, body, now)
    if refusal is not None:
        return refusal
    if job_nodes is None:
        return Refusal("unknown-job", f"job {job or '?'} is not running")
    if cred.uid != job_uid and cred.uid not in node_uids:
        return Refusal("wrong-uid", f"uid {cred.uid} does not own job {job}")
    if sender_nodes is not None and not sender_nodes & job_nodes:
        return Refusal("not-job-node", f"{cred.origin} ({_names(sender_nodes) or 'no node'}) "
                                       f"runs no part of job {job}")
    outside = sorted(set(named) - job_nodes)
    if outside:
        return Refusal("outside-job", f"job {job} named {outside[0]}, not in its allocation")
    return None


def origin_map(nodes: Iterable[tuple[str, str, str]],
               resolve: Callable[[str], Collection[str]]) -> dict[str, frozenset[str]]:
    """address -> the Slurm nodes at it, from (name, NodeAddr, NodeHostname) rows.

    ``resolve`` turns a NodeAddr or NodeHostname into its IPv4 addresses (an address resolves
    to itself; a name that does not resolve to nothing). Several nodes on one address (one
    host running several slurmd) all map to it.
    """
    out: dict[str, set[str]] = {}
    for name, addr, host in nodes:
        for ref in dict.fromkeys(x for x in (addr, host) if x):
            for ip in resolve(ref):
                out.setdefault(ip, set()).add(name)
    return {ip: frozenset(names) for ip, names in out.items()}


# -- node-key mode (sites on auth/slurm, without munged): slurmguard/nodekey.py signs.
def node_key_head(header: str, site_key: bytes | Sequence[bytes], now: float,
                  seen: Callable[[str], bool],
                  body_digest_: str = "") -> tuple[str, str, Refusal | None]:
    """From the header alone: (the signing node, the body digest its signature covers, None)
    when the signature may stand, else (node or "", digest, why). ``seen(sig)`` says whether
    this signature was used before (and remembers it).

    A header of an earlier release declares no digest (``d=``): its signature can be checked
    only with the body, so the caller passes ``body_digest_`` once it has read it; without
    it such a header comes back (node, "", None), unchecked.

    ``site_key`` may be several keys (a rotation: the current one, then the previous one):
    a node key derived from any of them is taken."""
    fields = dict(part.partition("=")[::2] for part in header[len(NODE_KEY_SCHEME):].split(","))
    node, sig, digest = fields.get("node", ""), fields.get("sig", ""), fields.get("d", "")
    try:
        t = int(fields.get("t", ""))
    except ValueError:
        return node, "", Refusal("invalid", "no time in the node-key header")
    if not _NODE.fullmatch(node) or len(sig) != 64 or digest and len(digest) != 64:
        return "", "", Refusal("invalid", "node-key header without a node name or sig")
    if not digest:
        if not body_digest_:
            return node, "", None
        digest = body_digest_
    keys = (site_key,) if isinstance(site_key, bytes) else tuple(site_key)
    if not any(hmac.compare_digest(sig, digest_sig(node_secret(k, node), node, t, digest))
               for k in keys):
        return node, digest, Refusal("invalid", f"signature is not {node}'s over this body")
    if abs(now - t) > NODE_KEY_WINDOW:
        return node, digest, Refusal("expired", f"signed {now - t:.0f} s ago (window "
                                                f"{NODE_KEY_WINDOW:.0f} s)")
    if seen(sig):
        return node, digest, Refusal("replayed", "this signature was used before")
    return node, digest, None


def node_key_body(node: str, digest: str, body: bytes, named: Iterable[str]) -> Refusal | None:
    """With the body read: it must be the one the signature covers, and name only ``node``."""
    if not hmac.compare_digest(digest, body_digest(body)):
        return Refusal("body-mismatch", "the signature was made for another body")
    others = sorted(set(named) - {node})
    if others:
        return Refusal("other-node", f"{node} wrote for {others[0]}")
    return None


def node_key_request(header: str, site_key: bytes | Sequence[bytes], body: bytes, named: Iterable[str],
                     now: float, seen: Callable[[str], bool]) -> tuple[str, Refusal | None]:
    """(the signing node, None) when a node-key request may stand, else (node or "", why):
    node_key_head then node_key_body, for a request whose body is at hand."""
    node, digest, refusal = node_key_head(header, site_key, now, seen, body_digest(body))
    if refusal is None:
        refusal = node_key_body(node, digest, body, named)
    return node, refusal


class EventLimit:
    """At most one ledger event per (sender, reason) in ``per_s`` seconds; the next one
    allowed carries how many were held back, so a flood of refusals costs the store one row a
    minute per sender and reason, not one per request."""

    def __init__(self, per_s: float = 60.0, max_keys: int = 10000) -> None:
        self.per_s, self.max_keys = per_s, max_keys
        self._last: dict[tuple[str, str], tuple[float, int]] = {}

    def allow(self, key: tuple[str, str], now: float) -> tuple[bool, int]:
        """(whether to write an event now, refusals held back since the last one)."""
        last, held = self._last.get(key, (float("-inf"), 0))
        if now - last >= self.per_s:
            if len(self._last) >= self.max_keys:  # forget the stalest (a spoofed-name flood)
                self._last.pop(min(self._last, key=lambda k: self._last[k][0]))
            self._last[key] = (now, 0)
            return True, held
        self._last[key] = (last, held + 1)
        return False, held + 1


def _names(nodes: frozenset[str]) -> str:
    first = sorted(nodes)[:3]
    return ",".join(first) + (f",+{len(nodes) - 3}" if len(nodes) > 3 else "")
