"""serve's check of who sent a write (``serve.auth``; docs/security.md "Node identity").

``munge`` (the default): every POST carries ``Authorization: MUNGE <credential>`` whose
payload is the body's SHA-256; this module decodes it with the local munged, reads Slurm's
node table (cached, ``scontrol show node``) and job table (cached, ``squeue --json``) and lets
slurmguard.serve.identity decide. A refusal is answered 403 with one line, counted in
``slurmguard_auth_refusals_total{reason,path}``, logged, and written to the ledger as a
``security`` event of the sending node at most once a minute per (sender, reason).

``token``: the shared bearer token of serve.token_file (test clusters only; doctor warns).
The slow-node reports of jobs are still checked against the job's allocation.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

from slurmguard.adapters import munge
from slurmguard.errors import InputError, SlurmguardError
from slurmguard.nodeset import expand
from slurmguard.serve import identity

log = logging.getLogger("slurmguard.serve")

SCHEME = "MUNGE "
NODE_PATHS = ("/ingest", "/permit", "/nodestate")
JOB_PATHS = ("/suspect",)
_RETRY_UNKNOWN = 5.0  # s: an unknown origin or job re-reads Slurm at most this often
LEGACY_MAX_BODY = 64 * 1024  # a body checked only once read (node-key without d=) is this at most


def _ipv4(peer: str) -> str:
    return peer[7:] if peer.startswith("::ffff:") else peer


def resolve4(ref: str) -> frozenset[str]:
    """IPv4 addresses of a NodeAddr or NodeHostname (an address is its own)."""
    try:
        return frozenset(str(a[4][0]) for a in socket.getaddrinfo(ref, None, socket.AF_INET))
    except (OSError, UnicodeError):
        return frozenset()


class Authenticator:
    """The ``serve.auth = "munge"`` check, and the allocation check of /suspect in any mode."""

    def __init__(self, mode: str, slurm: Any, store: Any, metrics: Any, *, munge_socket: str = "",
                 site_key: bytes | tuple[bytes, ...] = b"",
                 node_cache_s: float = 60.0, job_cache_s: float = 2.0, event_per_s: float = 60.0,
                 resolve: Callable[[str], Collection[str]] = resolve4,
                 check_peer: bool = True) -> None:
        self.mode, self.slurm, self.store, self.metrics = mode, slurm, store, metrics
        # serve.munge_check_peer: a credential's origin must be the connection's peer.
        self.check_peer = check_peer
        self._queue: queue.Queue[Callable[[], None]] | None = None
        self.munge_socket = munge_socket
        self.site_key = site_key
        self._seen: dict[str, float] = {}  # node-key signatures used, until their window ends
        self.node_cache_s, self.job_cache_s = node_cache_s, job_cache_s
        self.resolve = resolve
        self.events = identity.EventLimit(event_per_s)
        self._lock = threading.Lock()  # Slurm's tables (held across a read of them)
        self._qlock, self._seen_lock = threading.Lock(), threading.Lock()
        self._origins: tuple[float, dict[str, frozenset[str]]] = (float("-inf"), {})
        self._jobs: tuple[float, dict[str, Any]] = (float("-inf"), {})
        self._uids: frozenset[int] | None = None

    # -- the dispatcher's look at the head (no body read yet)
    def signs(self, path: str) -> bool:
        """Whether a POST to ``path`` is signed (else the token decides): munge, every
        write; node-key, the nodes' writes (jobs hold no node key: /suspect keeps the job
        token, with the allocation check)."""
        return self.mode == "munge" or (self.mode == "node-key" and path not in JOB_PATHS)

    def early(self, path: str, headers: Any, peer: str = "") -> tuple[int, dict[str, Any]] | None:
        """Authenticate a signed POST from its head alone, before its body is read (docs/
        serve.md: a client not yet authenticated costs serve at most 64 KiB): the MUNGE
        credential is decoded and its origin, uid and time checked, the node-key signature
        checked over the body digest the header declares. What passes is kept on
        ``headers.note`` for :meth:`check`, which binds the body to it."""
        header = headers.get("Authorization")
        scheme = SCHEME if self.mode == "munge" else identity.NODE_KEY_SCHEME
        if not header or not header.startswith(scheme):
            self._count("missing", path)
            return 401, {"error": f"refused (missing): this serve takes {scheme.strip()} "
                                  f"signatures (serve.auth = {self.mode}), not a token"}
        if self.mode == "node-key":
            return self._node_key_head(path, header, headers, peer)
        try:
            cred = munge.decode(header[len(SCHEME):].strip(), sock=self.munge_socket)
        except munge.MungeError as exc:
            # A replayed or expired credential is authentic: the ledger row goes to its node.
            known = exc.credential
            return self._refuse(path, identity.Refusal(exc.word, exc.message), known, peer,
                                addr=known.origin if known else "", later=True)
        refusal = self._peer(cred, peer)
        if refusal is not None:  # the row goes to the nodes at the address that sent it
            return self._refuse(path, refusal, cred, peer, addr=_ipv4(peer), later=True)
        uids = self._uids  # known after the first write; the handler checks it in any case
        if path not in JOB_PATHS and uids is not None and cred.uid not in uids:
            return self._refuse(path, identity.Refusal(
                "wrong-uid", f"uid {cred.uid} is not root or the SlurmUser"), cred, peer,
                addr=cred.origin, later=True)
        headers.note = cred
        return None

    def _peer(self, cred: munge.Credential, peer: str) -> identity.Refusal | None:
        return identity.peer_request(cred, peer) if self.check_peer and peer else None

    def _munge(self, path: str, header: str, peer: str
               ) -> tuple[munge.Credential | None, tuple[int, dict[str, Any]] | None]:
        """The request's MUNGE credential, decoded and its origin held against the
        connection's peer: (credential, None), or (the credential if it decoded, the
        refusal's answer)."""
        try:
            cred = munge.decode(header[len(SCHEME):].strip(), sock=self.munge_socket)
        except munge.MungeError as exc:
            known = exc.credential
            return known, self._refuse(path, identity.Refusal(exc.word, exc.message), known,
                                       peer, addr=known.origin if known else "")
        refusal = self._peer(cred, peer)
        if refusal is not None:
            return cred, self._refuse(path, refusal, cred, peer, addr=_ipv4(peer))
        return cred, None

    def _node_key_head(self, path: str, header: str, headers: Any,
                       peer: str) -> tuple[int, dict[str, Any]] | None:
        node, digest, refusal = identity.node_key_head(header, self.site_key, time.time(),
                                                       self._used)
        if refusal is not None:
            # Only a good signature names its node; a forged one is counted and logged only.
            own = frozenset({node}) if refusal.reason != "invalid" else frozenset()
            return self._refuse(path, refusal, None, f"{peer} as {node}" if node else peer,
                                own, later=True)
        if not digest:  # a node of an earlier release: its signature needs the body
            try:
                length = int(headers.get("Content-Length") or "0")
            except ValueError:
                length = 0  # the front answers 400 for it
            if length > LEGACY_MAX_BODY:
                return self._refuse(path, identity.Refusal(
                    "too-large", f"a node-key signature without d= (an earlier release) is "
                                 f"checked with its body, taken up to {LEGACY_MAX_BODY} bytes; "
                                 f"this one has {length}: upgrade the node"), None, peer)
        headers.note = (node, digest)
        return None

    # -- the handler's check, with the body
    def check(self, path: str, header: str | None, raw: bytes, body: Any,
              peer: str = "", note: Any = None) -> tuple[int, dict[str, Any]] | None:
        """None when the write may go ahead; else (403, {"error": one line}). ``note`` is
        what :meth:`early` authenticated from the head (None: decode here)."""
        if not self.signs(path):
            if path in JOB_PATHS:
                return self._refuse(path, self._job(None, raw, body), None, peer)
            return None
        if self.mode == "node-key":
            return self._node_key(path, header or "", raw, body, peer, note)
        if isinstance(note, munge.Credential):
            cred = note
        else:
            if not header or not header.startswith(SCHEME):
                return self._refuse(path, identity.Refusal("missing", "no MUNGE credential"),
                                    None, peer)
            cred, refused = self._munge(path, header, peer)
            if refused is not None or cred is None:
                return refused
        origins = self._origin_map(cred.origin)
        if path in JOB_PATHS:
            sender = origins.get(cred.origin, frozenset())
            return self._refuse(path, self._job(cred, raw, body, sender), cred, peer, sender)
        named = _named_nodes(path, body)
        refusal = identity.node_request(cred, raw, named, origins, self._node_uids(), time.time())
        return self._refuse(path, refusal, cred, peer, origins.get(cred.origin, frozenset()))

    # -- reads of node state (GET /drains)
    def read(self, path: str, header: str | None, target: str, nodes: list[str], job: str,
             peer: str, *, job_token: bool = False) -> tuple[int, dict[str, Any]] | None:
        """None when this GET may see the state of ``nodes``; else (401 or 403, one line).

        ``job_token``: the caller checked the job token (token and node-key modes): the
        allocation rule alone, as for /suspect. Otherwise the request carries a MUNGE
        credential (or, node-key mode, a node's signature) over the request ``target``: a
        node reads the nodes at its own address, a job (``job`` given) the nodes of its
        allocation from one of them. Admins hold the serve token, checked by the caller."""
        if job_token:
            if not job:
                return self._refuse(path, identity.Refusal(
                    "unknown-job", "the job token reads only a job's own nodes: give job="),
                    None, peer)
            allocation, _ = self._job_allocation(job)
            if allocation is None:
                return self._refuse(path, identity.Refusal(
                    "unknown-job", f"job {job} is not running"), None, peer)
            outside = sorted(set(nodes) - allocation)
            return self._refuse(path, identity.Refusal(
                "outside-job", f"job {job} asked for {outside[0]}, not in its allocation")
                if outside else None, None, peer)
        if self.mode == "node-key" and header and header.startswith(identity.NODE_KEY_SCHEME):
            node, refusal = identity.node_key_request(header, self.site_key, target.encode(),
                                                      nodes, time.time(), self._used)
            own = frozenset({node}) if refusal is None or refusal.reason != "invalid" else frozenset()
            return self._refuse(path, refusal, None, f"{peer} as {node}" if node else peer, own)
        if self.mode != "munge" or not header or not header.startswith(SCHEME):
            self._count("missing", path)
            return 401, {"error": "refused (missing): node state is shown only to its node, a job "
                                  "of it or an admin: sign the request (docs/security.md)"}
        cred, refused = self._munge(path, header, peer)
        if refused is not None or cred is None:
            return refused
        origins = self._origin_map(cred.origin)
        sender = origins.get(cred.origin, frozenset())
        signed = target.encode()
        if job:
            allocation, uid = self._job_allocation(job)
            refusal = identity.job_request(cred, signed, nodes, allocation, uid, self._node_uids(),
                                           time.time(), job=job, sender_nodes=sender)
        else:
            refusal = identity.node_request(cred, signed, nodes, origins, self._node_uids(),
                                            time.time())
        return self._refuse(path, refusal, cred, peer, sender)

    def _node_key(self, path: str, header: str, raw: bytes, body: Any, peer: str,
                  note: Any) -> tuple[int, dict[str, Any]] | None:
        named = _named_nodes(path, body)
        if isinstance(note, tuple) and note[1]:
            node, refusal = note[0], identity.node_key_body(note[0], note[1], raw, named)
        else:  # an earlier release's header (no digest), or no look at the head
            node, refusal = identity.node_key_request(header, self.site_key, raw, named,
                                                      time.time(), self._used)
        # Only a good signature names its node; a forged one is counted and logged only.
        own = frozenset({node}) if refusal is None or refusal.reason != "invalid" else frozenset()
        return self._refuse(path, refusal, None, f"{peer} as {node}" if node else peer, own)

    def _used(self, sig: str) -> bool:
        """Whether ``sig`` was seen within its window; remembers it."""
        now = time.time()
        with self._seen_lock:  # on the dispatcher thread: never behind a Slurm read
            if len(self._seen) > 100000:
                self._seen = {s: t for s, t in self._seen.items() if t > now}
            if self._seen.get(sig, 0.0) > now:
                return True
            self._seen[sig] = now + 2 * identity.NODE_KEY_WINDOW
            return False

    def _job(self, cred: munge.Credential | None, raw: bytes, body: Any,
             sender: frozenset[str] = frozenset()) -> identity.Refusal | None:
        from slurmguard.serve.drains import parse_suspect

        try:
            job, _, entries = parse_suspect(body)
        except InputError:
            return None  # malformed: the route answers 400 naming the field (nothing written)
        named = [e["node"] for e in entries]
        nodes, uid = self._job_allocation(job)
        if cred is None:  # token mode: the allocation rule alone
            if nodes is None:
                return identity.Refusal("unknown-job", f"job {job or '?'} is not running")
            outside = sorted(set(named) - nodes)
            return identity.Refusal("outside-job", f"job {job} named {outside[0]}, not in its "
                                    "allocation") if outside else None
        return identity.job_request(cred, raw, named, nodes, uid, self._node_uids(), time.time(),
                                    job=job, sender_nodes=sender)

    def _refuse(self, path: str, refusal: identity.Refusal | None, cred: munge.Credential | None,
                peer: str, own: frozenset[str] = frozenset(), *, addr: str = "",
                later: bool = False) -> tuple[int, dict[str, Any]] | None:
        """Count, log and answer a refusal; its ledger row goes to the nodes ``own`` (or the
        nodes at ``addr``, looked up in Slurm's node table). ``later``: the caller is the
        dispatcher thread, which must not wait on Slurm or the store: the row is written by
        the ledger thread."""
        if refusal is None:
            return None
        self._count(refusal.reason, path)
        origin = cred.origin if cred is not None else peer
        if refusal.reason == "wrong-peer":
            origin = f"{_ipv4(peer)} (credential of {cred.origin if cred else '?'})"
        line = f"{path} from {origin or '?'}: {refusal.line()}"
        log.warning("%s", line)
        if own or addr:
            if later:
                self._later(lambda: self._ledger_at(own, addr, refusal, path, cred, origin))
            else:
                self._ledger_at(own, addr, refusal, path, cred, origin)
        return 403, {"error": refusal.line()}

    def _ledger_at(self, own: frozenset[str], addr: str, refusal: identity.Refusal, path: str,
                   cred: munge.Credential | None, origin: str) -> None:
        if not own and addr:
            own = self._origin_map(addr).get(addr, frozenset())
        if own:
            self._ledger(sorted(own)[0], refusal, path, cred, origin)

    def _later(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the ledger thread (started at the first use); dropped when 1,000
        are waiting (a flood: the count and the log still say it)."""
        with self._qlock:
            if self._queue is None:
                self._queue = queue.Queue(maxsize=1000)
                threading.Thread(target=self._ledger_loop, name="sg-auth-ledger",
                                 daemon=True).start()
        try:
            self._queue.put_nowait(fn)
        except queue.Full:
            pass

    def _ledger_loop(self) -> None:
        assert self._queue is not None
        while True:
            fn = self._queue.get()
            try:
                fn()
            except Exception:  # evidence only: never stop the thread
                log.exception("security event failed")

    def _ledger(self, node: str, refusal: identity.Refusal, path: str,
                cred: munge.Credential | None, origin: str) -> None:
        ok, held = self.events.allow((origin, refusal.reason), time.time())
        if not ok:
            return
        try:
            self.store.nodes.record_event(
                node, "security", "slurmguard", f"{path}: {refusal.line()}"[:300], source="serve",
                details={"reason": refusal.reason, "origin": origin, "path": path,
                         "uid": None if cred is None else cred.uid, "held_back": held})
        except SlurmguardError as exc:  # the refusal stands; the ledger row is evidence only
            log.warning("security event not recorded: %s", exc.message)

    def _count(self, reason: str, path: str) -> None:
        try:
            self.metrics.auth_refusals.labels(reason=reason, path=path).inc()
        except Exception:  # metrics never break serving
            log.exception("refusal metric failed")

    # -- Slurm's tables, cached
    def _origin_map(self, origin: str) -> dict[str, frozenset[str]]:
        with self._lock:
            at, table = self._origins
            age = time.monotonic() - at
            if age >= self.node_cache_s or (origin not in table and age >= _RETRY_UNKNOWN):
                try:
                    rows = [(n.name, str(n.raw.get("NodeAddr", "")), str(n.raw.get("NodeHostName", "")))
                            for n in self.slurm.nodes()]
                    # NodeAddr is where slurmctld reaches the node: the address Slurm itself
                    # trusts. NodeHostname only where a node has no NodeAddr.
                    table = identity.origin_map(((name, addr, "" if addr else host)
                                                 for name, addr, host in rows), self.resolve)
                except SlurmguardError as exc:
                    log.warning("node table for identity checks: %s", exc.message)
                self._origins = (time.monotonic(), table)
            return table

    def _node_uids(self) -> frozenset[int]:
        """root and the SlurmUser (read once from ``scontrol show config``)."""
        if self._uids is None:
            uids = {0}
            try:
                user = self.slurm.show_config().get("SlurmUser", "")
                if user.endswith(")") and "(" in user:
                    uids.add(int(user.rsplit("(", 1)[1][:-1]))
                self._uids = frozenset(uids)
            except (SlurmguardError, ValueError) as exc:
                log.warning("SlurmUser unknown (only root may write): %s", exc)
                return frozenset(uids)
        return self._uids

    def _job_allocation(self, job: str) -> tuple[frozenset[str] | None, int | None]:
        """(the job's nodes, its owner's uid) from one cached ``squeue --json``; (None, None)
        when no running job has that id."""
        base = job.split("+")[0]
        with self._lock:
            at, jobs = self._jobs
            age = time.monotonic() - at
            if age >= self.job_cache_s or (base not in jobs and age >= min(_RETRY_UNKNOWN, 0.5)):
                try:
                    jobs = {}
                    for j in self.slurm.jobs():
                        raw = j.raw if isinstance(j.raw, dict) else {}
                        jobs[j.job_id] = (j, raw)
                        if raw.get("array_task_id") not in (None, "", {}):
                            jobs[f"{raw.get('array_job_id')}_{_number(raw.get('array_task_id'))}"] = (j, raw)
                except SlurmguardError as exc:
                    log.warning("job table for /suspect: %s", exc.message)
                self._jobs = (time.monotonic(), jobs)
        hit = jobs.get(base)
        if hit is None or hit[0].state not in ("RUNNING", "COMPLETING", "SUSPENDED") or not hit[0].nodes:
            return None, None
        j, raw = hit
        try:
            nodes = frozenset(expand(j.nodes, source="squeue nodes"))
        except SlurmguardError:
            return None, None
        uid = raw.get("user_id")
        return nodes, int(uid) if isinstance(uid, int) else None


def _number(v: Any) -> Any:
    return v.get("number") if isinstance(v, dict) else v


def _named_nodes(path: str, body: Any) -> list[str]:
    """The nodes a node's request speaks for: each record's node, or the node a permit or a
    state question names."""
    if path in ("/permit", "/nodestate"):
        node = body.get("node") if isinstance(body, dict) else None
        return [node] if isinstance(node, str) else []
    raw = body.get("records") if isinstance(body, dict) and "records" in body else body
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list):
        return []
    return [r["node"] for r in raw if isinstance(r, dict) and isinstance(r.get("node"), str)]
