"""Who may write for which node: the pure decision (serve/identity.py), table- and
property-tested, and the MUNGE adapter against the real munged (docs/security.md)."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.helpers import require

from slurmguard.adapters.munge import Credential
from slurmguard.serve import identity

NOW = 1_800_000_000.0
BODY = b'{"records":[{"node":"n1"}]}'
ORIGINS = {"10.0.0.1": frozenset({"n1"}), "10.0.0.2": frozenset({"n2"}),
           "10.0.0.9": frozenset({"m1", "m2"})}  # one host running two slurmd


def cred(*, uid: int = 0, origin: str = "10.0.0.1", body: bytes = BODY, age: float = 1.0,
         ttl: int = 300) -> Credential:
    return Credential(uid=uid, gid=0, origin=origin, encode_time=int(NOW - age), ttl=ttl,
                      payload=identity.body_digest(body).encode())


NODE_TABLE = [
    # (what, credential, body, named nodes, reason or None)
    ("own record", cred(), BODY, ["n1"], None),
    ("another node's record", cred(), BODY, ["n2"], "other-node"),
    ("own and another's in one request", cred(), BODY, ["n1", "n2"], "other-node"),
    ("multi-slurmd host for its own nodes", cred(origin="10.0.0.9"), BODY, ["m1", "m2"], None),
    ("multi-slurmd host for a node elsewhere", cred(origin="10.0.0.9"), BODY, ["m1", "n1"],
     "other-node"),
    ("address Slurm does not know", cred(origin="10.0.0.7"), BODY, ["n1"], "unknown-origin"),
    ("a user, not root or SlurmUser", cred(uid=1000), BODY, ["n1"], "wrong-uid"),
    ("the SlurmUser", cred(uid=64030), BODY, ["n1"], None),
    ("body swapped under the credential", cred(), BODY + b" ", ["n1"], "body-mismatch"),
    ("credential past its TTL", cred(age=301), BODY, ["n1"], "expired"),
    ("no node named (a permit without a node)", cred(), BODY, [], None),
]


@pytest.mark.parametrize("what,c,body,named,reason", NODE_TABLE, ids=[r[0] for r in NODE_TABLE])
def test_node_request_table(what: str, c: Credential, body: bytes, named: list[str],
                            reason: str | None) -> None:
    got = identity.node_request(c, body, named, ORIGINS, {0, 64030}, NOW)
    assert (got.reason if got else None) == reason, got
    if got is not None:
        assert got.reason in identity.REASONS and "\n" not in got.line()


@given(name=st.text(max_size=400))
def test_a_refusal_is_one_line_whatever_the_request_named(name: str) -> None:
    """Seen in the hostile-request suite (node-key): a permit naming "...\\n..." was refused
    with the name, newline and all, in the answer's one line."""
    got = identity.node_request(cred(), BODY, ["x" + name], ORIGINS, {0}, NOW)  # never n1
    assert got is not None and got.reason == "other-node"
    line = got.line()
    assert line.isprintable() and len(line) < 400, line


JOB_TABLE = [
    ("owner names nodes of its job", cred(uid=1000), ["n1"], frozenset({"n1", "n2"}), 1000, None),
    ("owner names a node outside its job", cred(uid=1000), ["n3"], frozenset({"n1", "n2"}), 1000,
     "outside-job"),
    ("another user", cred(uid=1001), ["n1"], frozenset({"n1"}), 1000, "wrong-uid"),
    ("root may report for a job", cred(uid=0), ["n1"], frozenset({"n1"}), 1000, None),
    ("job not running", cred(uid=1000), ["n1"], None, None, "unknown-job"),
]


@pytest.mark.parametrize("what,c,named,nodes,owner,reason", JOB_TABLE, ids=[r[0] for r in JOB_TABLE])
def test_job_request_table(what: str, c: Credential, named: list[str], nodes: frozenset[str] | None,
                           owner: int | None, reason: str | None) -> None:
    got = identity.job_request(c, BODY, named, nodes, owner, {0}, NOW, job="7")
    assert (got.reason if got else None) == reason, got


names = st.sampled_from(["n1", "n2", "n3", "m1", "m2", "x"])


@given(origin=st.sampled_from(sorted(ORIGINS) + ["10.0.0.7"]), named=st.lists(names, max_size=6),
       uid=st.sampled_from([0, 64030, 1000]))
def test_a_request_stands_only_for_the_senders_own_nodes(origin: str, named: list[str],
                                                         uid: int) -> None:
    got = identity.node_request(cred(uid=uid, origin=origin), BODY, named, ORIGINS, {0, 64030}, NOW)
    allowed = uid in (0, 64030) and origin in ORIGINS and set(named) <= ORIGINS[origin]
    assert (got is None) == allowed, got


@given(body=st.binary(max_size=64), other=st.binary(max_size=64))
def test_a_credential_carries_only_its_own_body(body: bytes, other: bytes) -> None:
    got = identity.node_request(cred(body=body), other, ["n1"], ORIGINS, {0}, NOW)
    assert (got is None) == (body == other)


def test_origin_map_puts_every_node_at_its_address() -> None:
    table = {"n1": ["10.0.0.1"], "n2": ["10.0.0.2"], "node-h": ["10.0.0.5"], "gone": []}
    m = identity.origin_map([("n1", "n1", ""), ("n2", "10.0.0.2", "n2"), ("a", "node-h", ""),
                             ("b", "node-h", ""), ("lost", "gone", "")],
                            lambda ref: table.get(ref, [ref] if ref[0].isdigit() else []))
    assert m == {"10.0.0.1": {"n1"}, "10.0.0.2": {"n2"}, "10.0.0.5": {"a", "b"}}


def test_event_limit_writes_one_event_per_sender_and_reason_a_minute() -> None:
    lim = identity.EventLimit(60.0)
    key = ("10.0.0.1", "other-node")
    got = [lim.allow(key, NOW + i) for i in range(1000)]  # a flood: 1,000 refusals in 1,000 s
    written = [held for ok, held in got if ok]
    assert len(written) == 17 and written[0] == 0 and written[1] == 59  # 1 + 16 later minutes
    assert lim.allow(("10.0.0.2", "other-node"), NOW + 1)[0]  # another sender has its own slot
    assert lim.allow(("10.0.0.1", "replayed"), NOW + 1)[0]  # and another reason


def test_event_limit_forgets_the_stalest_sender_at_its_bound() -> None:
    lim = identity.EventLimit(60.0, max_keys=3)
    for i in range(10):
        assert lim.allow((f"10.0.0.{i}", "invalid"), NOW + i)[0]
    assert len(lim._last) == 3


# -- the adapter against the real munged ---------------------------------------------------------

def _munged() -> None:
    from slurmguard.adapters import munge

    require(munge.library_available(), "libmunge.so.2 (libmunge2) is not installed")
    try:
        munge.encode(b"probe")
    except munge.MungeError as exc:
        require(False, f"munged does not answer: {exc}")


@pytest.mark.parametrize("use_library", [True, False], ids=["libmunge", "tools"])
def test_munge_round_trip_carries_uid_origin_time_and_payload(use_library: bool) -> None:
    from slurmguard.adapters import munge

    _munged()
    c = munge.encode(b"digest-0123", use_library=use_library)
    got = munge.decode(c, use_library=use_library)
    assert got.payload == b"digest-0123" and got.uid == 0 and got.ttl > 0
    assert abs(got.encode_time - time.time()) < 60 and got.origin.count(".") == 3
    with pytest.raises(munge.MungeError) as exc:  # munged remembers what it decoded
        munge.decode(c, use_library=not use_library)
    assert exc.value.word == "replayed"
    with pytest.raises(munge.MungeError) as exc:
        munge.decode(c[:40] + ("A" if c[40] != "A" else "B") + c[41:], use_library=use_library)
    assert exc.value.word == "invalid"
