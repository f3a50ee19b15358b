"""MUNGE credentials: mint one over a request body (the node), decode one (serve).

MUNGE is what Slurm itself authenticates every RPC with, so every Slurm site runs ``munged``
on every node already. A credential carries the sender's uid and gid, the *origin address*
(the address the encoding host's munged chose at start, ``munged --origin``), the encode time
and a TTL, and a payload, all sealed with the site's key: a node cannot forge another's
origin address or another uid.

Two ways in, one result type:

* libmunge through ctypes (``libmunge.so.2``, Debian package libmunge2): one round trip to
  the local munged over its unix socket, tens of microseconds. The resident agent and serve
  load it once.
* the ``munge``/``unmunge`` tools through slurmguard.proc: a fork and exec per credential,
  milliseconds; used only when the library cannot be loaded.

The caller binds the credential to the body it sends: the payload is the body's SHA-256 hex
digest (serve recomputes it, so a credential cannot be reused for another body).
"""

from __future__ import annotations

import ctypes
from typing import NamedTuple

from slurmguard.errors import CommandError, SlurmguardError

LIBRARY = "libmunge.so.2"
MUNGE = "/usr/bin/munge"
UNMUNGE = "/usr/bin/unmunge"
_TIMEOUT = 5.0

# munge.h: munge_opt_t and the munge_err_t values serve tells apart.
_OPT_TTL = 4
_OPT_ADDR4 = 5
_OPT_ENCODE_TIME = 6
_OPT_SOCKET = 8
EXPIRED, REWOUND, REPLAYED = 15, 16, 17
_STATUS_WORDS = {EXPIRED: "expired", REWOUND: "rewound", REPLAYED: "replayed"}


class MungeError(SlurmguardError):
    """A credential could not be minted or decoded; ``status`` is munge's error number
    (15 expired, 16 rewound, 17 replayed, 0 when the cause is not munge's)."""

    def __init__(self, message: str, status: int = 0, credential: Credential | None = None) -> None:
        super().__init__(message)
        self.status = status
        # An expired, rewound or replayed credential is still authentic: munged returns what it
        # says, so serve can name whose credential it was.
        self.credential = credential

    @property
    def word(self) -> str:
        """One word for metrics and the ledger: expired, rewound, replayed or invalid."""
        return _STATUS_WORDS.get(self.status, "invalid")


class Credential(NamedTuple):  # a NamedTuple: dataclasses and socket cost a prolog 80 ms
    """What a decoded credential says, as munged vouches for it."""

    uid: int
    gid: int
    origin: str  # dotted IPv4 address of the encoding host's munged
    encode_time: int  # seconds since the epoch
    ttl: int
    payload: bytes


class _Lib:
    """libmunge, loaded once; None where it cannot be. (Two threads loading it at once
    both get the same library: no lock needed.)"""

    _lib: ctypes.CDLL | None = None
    _tried = False

    @classmethod
    def get(cls) -> ctypes.CDLL | None:
        if not cls._tried:
            try:
                lib = ctypes.CDLL(LIBRARY)
                lib.munge_ctx_create.restype = ctypes.c_void_p
                lib.munge_ctx_destroy.argtypes = [ctypes.c_void_p]
                lib.munge_ctx_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p]
                lib.munge_ctx_get.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
                lib.munge_encode.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p,
                                             ctypes.c_char_p, ctypes.c_int]
                lib.munge_decode.argtypes = [
                    ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                    ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_uint32),
                    ctypes.POINTER(ctypes.c_uint32)]
                lib.munge_strerror.restype = ctypes.c_char_p
                # The process's own symbols hold libc's free (ctypes.util.find_library
                # would run ldconfig: 150 ms at a prolog's first credential).
                libc = ctypes.CDLL(None)
                libc.free.argtypes = [ctypes.c_void_p]
                lib.sg_free = libc.free  # type: ignore[attr-defined]
                cls._lib = lib
            except (OSError, AttributeError):
                cls._lib = None
            cls._tried = True
        return cls._lib


def library_available() -> bool:
    """Whether libmunge loads here (else the tools are used)."""
    return _Lib.get() is not None


def encode(payload: bytes, *, sock: str = "", use_library: bool = True) -> str:
    """A credential carrying ``payload``, from the local munged (or the one at ``sock``)."""
    lib = _Lib.get() if use_library else None
    if lib is None:
        return _encode_tool(payload, sock)
    ctx = lib.munge_ctx_create()
    try:
        if sock and lib.munge_ctx_set(ctx, _OPT_SOCKET, sock.encode()) != 0:
            raise MungeError(f"munge: cannot use socket {sock}")
        out = ctypes.c_char_p()
        err = lib.munge_encode(ctypes.byref(out), ctx, payload, len(payload))
        if err != 0:
            raise MungeError(f"munge: {lib.munge_strerror(err).decode(errors='replace')}", err)
        try:
            return (out.value or b"").decode("ascii")
        finally:
            lib.sg_free(out)
    finally:
        lib.munge_ctx_destroy(ctx)


def decode(cred: str, *, sock: str = "", use_library: bool = True) -> Credential:
    """Decode ``cred`` with the local munged. MungeError (with munge's status) when it is
    invalid, expired, rewound or replayed (munged remembers what it decoded within the TTL)."""
    lib = _Lib.get() if use_library else None
    if lib is None:
        return _decode_tool(cred, sock)
    raw = cred.encode("ascii", "replace")
    ctx = lib.munge_ctx_create()
    try:
        if sock and lib.munge_ctx_set(ctx, _OPT_SOCKET, sock.encode()) != 0:
            raise MungeError(f"unmunge: cannot use socket {sock}")
        buf, length = ctypes.c_void_p(), ctypes.c_int()
        uid, gid = ctypes.c_uint32(), ctypes.c_uint32()
        err = lib.munge_decode(raw, ctx, ctypes.byref(buf), ctypes.byref(length),
                               ctypes.byref(uid), ctypes.byref(gid))
        try:
            payload = ctypes.string_at(buf, length.value) if buf.value else b""
        finally:
            if buf.value:
                lib.sg_free(buf)
        cred_ok = err in (0, EXPIRED, REWOUND, REPLAYED)
        found = None
        if cred_ok:
            addr = ctypes.create_string_buffer(4)
            when, ttl = ctypes.c_long(), ctypes.c_int()
            lib.munge_ctx_get(ctx, _OPT_ADDR4, addr)
            lib.munge_ctx_get(ctx, _OPT_ENCODE_TIME, ctypes.byref(when))
            lib.munge_ctx_get(ctx, _OPT_TTL, ctypes.byref(ttl))
            found = Credential(uid=uid.value, gid=gid.value, origin=".".join(map(str, addr.raw)),
                               encode_time=when.value, ttl=ttl.value, payload=payload)
        if err != 0:
            raise MungeError(f"unmunge: {lib.munge_strerror(err).decode(errors='replace')}", err,
                             found)
        assert found is not None
        return found
    finally:
        lib.munge_ctx_destroy(ctx)


def _sock_args(sock: str) -> list[str]:
    return ["--socket", sock] if sock else []


def _encode_tool(payload: bytes, sock: str) -> str:
    from slurmguard.proc import run_command

    try:
        res = run_command([MUNGE, *_sock_args(sock), "--string", payload.decode("latin-1")],
                          timeout=_TIMEOUT)
    except CommandError as exc:
        raise MungeError(f"munge: {exc.message}") from None
    return res.stdout.strip()


def _decode_tool(cred: str, sock: str) -> Credential:
    """``unmunge`` prints ``KEY: value`` lines, a blank line, then the payload."""
    from slurmguard.proc import run_command

    try:
        res = run_command([UNMUNGE, *_sock_args(sock)], timeout=_TIMEOUT, input=cred, check=False)
    except CommandError as exc:
        raise MungeError(f"unmunge: {exc.message}") from None
    head, _, payload = res.stdout.partition("\n\n")
    meta = {}
    for line in head.splitlines():
        key, _, value = line.partition(":")
        meta[key.strip()] = value.strip()
    status = meta.get("STATUS", res.stderr.strip() or "no answer")
    code = _in_parens(status)
    found = None
    if code in (0, EXPIRED, REWOUND, REPLAYED):
        try:
            origin = meta["ENCODE_HOST"].rsplit("(", 1)[1].rstrip(")")
            if len([int(x) for x in origin.split(".") if 0 <= int(x) < 256]) != 4:
                raise ValueError(origin)
            found = Credential(uid=_in_parens(meta["UID"]), gid=_in_parens(meta["GID"]),
                               origin=origin, encode_time=_in_parens(meta["ENCODE_TIME"]),
                               ttl=int(meta["TTL"]), payload=payload.encode("latin-1"))
        except (KeyError, IndexError, ValueError):
            if code == 0:
                raise MungeError(f"unmunge: unreadable answer: {res.stdout[:120]!r}") from None
    if res.rc != 0 or code != 0 or found is None:
        raise MungeError(f"unmunge: {status}", code if code > 0 else 0, found)
    return found


def _in_parens(text: str) -> int:
    """The number in the last parentheses of ``root (0)``; -1 when there is none."""
    try:
        return int(text.rsplit("(", 1)[1].rstrip(")"))
    except (IndexError, ValueError):
        return -1


__all__ = ["Credential", "MungeError", "decode", "encode", "library_available"]
