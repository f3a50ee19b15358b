"""Atomic file writes: a reader sees the old file or the whole new one, never half of one.

One recipe for every file slurmguard replaces or publishes (spool records, check state,
metrics textfiles, the checkpoint manifest, installed hooks, ...):

1. a temporary file in the *same directory* (a rename is atomic only within one file
   system), named ``.<name>.<random>.tmp`` and opened ``O_EXCL|O_NOFOLLOW``: never through a
   symlink someone planted in a shared directory, never another writer's file; readers that
   skip dot files or look for a suffix never see it;
2. its mode (and owner) set on the open file before it has a public name;
3. with ``durable`` (the default), the data fsynced before the rename and the directory
   fsynced after it, so a power loss leaves the old file or the new one. Callers pass
   ``durable=False`` where the file is rewritten on the next run anyway and an fsync would
   cost a hook its budget on a busy disk (metrics textfiles, check state, caches);
4. published with ``rename`` (replaces), or with ``exclusive`` by a hard link that fails
   with FileExistsError rather than replace a file that must not be overwritten;
5. on any failure the temporary file is removed and the error raised.

Standard library (``os``, ``contextlib``: loaded at every interpreter start): the hook
path imports it. tests/test_atomic.py.
"""

from __future__ import annotations

import os
from contextlib import suppress
from typing import IO, Any

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def temp_name(path: str | os.PathLike[str]) -> str:
    """An unpredictable dot-file name beside ``path``: ``dir/.name.<12 hex>.tmp``."""
    d, name = os.path.split(os.fspath(path))
    hidden = name if name.startswith(".") else "." + name
    return os.path.join(d, f"{hidden}.{os.urandom(6).hex()}.tmp")


class AtomicFile:
    """``with AtomicFile(path) as fh: fh.write(...)``: published only when the block ends
    without an exception. ``text`` gives a UTF-8 text file object, else binary."""

    def __init__(self, path: str | os.PathLike[str], *, mode: int = 0o600, durable: bool = True,
                 exclusive: bool = False, owner: tuple[int, int] | None = None,
                 text: bool = False) -> None:
        self.path = os.fspath(path)
        self.mode = mode
        self.durable = durable
        self.exclusive = exclusive
        self.owner = owner
        self.text = text
        self.tmp = temp_name(self.path)
        self._fh: IO[Any] | None = None

    def __enter__(self) -> IO[Any]:
        fd = os.open(self.tmp, _FLAGS, 0o600)
        try:
            os.fchmod(fd, self.mode)  # exact: the umask must not change an installed file's mode
            if self.owner is not None:
                os.fchown(fd, *self.owner)
            self._fh = os.fdopen(fd, "w", encoding="utf-8") if self.text else os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            _unlink(self.tmp)
            raise
        return self._fh

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        fh, self._fh = self._fh, None
        assert fh is not None
        try:
            if exc_type is None:
                fh.flush()
                if self.durable:
                    os.fsync(fh.fileno())
            fh.close()
            if exc_type is None:
                self._publish()
        except BaseException:
            _unlink(self.tmp)
            raise
        if exc_type is not None:
            _unlink(self.tmp)

    def _publish(self) -> None:
        if self.exclusive:
            os.link(self.tmp, self.path)  # FileExistsError: something is there; leave it
            _unlink(self.tmp)
        else:
            os.replace(self.tmp, self.path)
        if self.durable:
            fsync_dir(os.path.dirname(self.path) or ".")


def write_atomic(path: str | os.PathLike[str], data: bytes | str, **options: Any) -> None:
    """Write ``data`` to ``path`` atomically; ``options`` as for :class:`AtomicFile`."""
    raw = data.encode() if isinstance(data, str) else data
    with AtomicFile(path, **{**options, "text": False}) as fh:
        fh.write(raw)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename or unlink in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    with suppress(OSError):  # already gone, or never made
        os.unlink(path)
