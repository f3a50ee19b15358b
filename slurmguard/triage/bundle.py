"""The evidence bundle of `triage collect`: one directory per node plus ``manifest.json``.

Layout (format ``slurmguard-triage-bundle``, version 1; documented in docs/triage.md)::

    BUNDLE/manifest.json          every node: status, error, steps, facts, files + sha256
    BUNDLE/<node>/check.json      `slurmguard check --json` run on the node (or check.out)
    BUNDLE/<node>/xid.log         kernel-log lines with "NVRM: Xid"
    BUNDLE/<node>/nvidia-smi.txt  `nvidia-smi -q` (absent when the node has no such tool)
    BUNDLE/<node>/ib.json         InfiniBand ports from sysfs
    BUNDLE/<node>/results.json    recent results from the store (when one is configured)

With ``--tar FILE`` the same tree is written as a gzip'd tarball whose top directory is the
file's stem. Existing output is never overwritten.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmguard import __version__
from slurmguard.atomic import AtomicFile
from slurmguard.errors import InputError

FORMAT = "slurmguard-triage-bundle"
VERSION = 1


@dataclass
class NodeEvidence:
    """What was gathered from one node, in memory until the bundle writes it."""

    node: str
    host: str
    port: int
    error_kind: str | None = None
    error: str | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    duration: float = 0.0

    @property
    def status(self) -> str:
        """failed (no evidence from the node), partial (some steps failed) or ok."""
        if self.error_kind:
            return "failed"
        if any(s.get("error") for s in self.steps.values()):
            return "partial"
        return "ok"

    def fail(self, kind: str, message: str) -> None:
        self.error_kind, self.error = kind, message

    def step(self, name: str, res: Any) -> None:
        self.steps[name] = {"rc": res.rc, "duration": round(res.duration, 3),
                            "timed_out": res.timed_out, "truncated": res.truncated}

    def step_failed(self, name: str, why: str) -> None:
        self.steps.setdefault(name, {})["error"] = why

    def add_text(self, name: str, text: str) -> None:
        self.files[name] = text.encode()

    def add_json(self, name: str, data: Any) -> None:
        self.files[name] = (json.dumps(data, indent=2, sort_keys=True, default=str) + "\n").encode()


def _check_own_empty_dir(path: Path) -> None:
    """--out may name an existing directory only if it is empty, ours, not a symlink and not
    writable by others: otherwise someone else could plant files or symlinks in it."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise InputError(f"--out {path}: is a symlink (not followed)")
    if not stat.S_ISDIR(st.st_mode) or any(path.iterdir()):
        raise InputError(f"--out {path}: exists and is not an empty directory")
    if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise InputError(f"--out {path}: owned by uid {st.st_uid} or writable by others "
                         f"(mode {stat.S_IMODE(st.st_mode):04o}); give a new directory")


def _write_new(path: Path, data: bytes) -> None:
    """Create ``path`` (never an existing file, never through a symlink) and write ``data``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


class Bundle:
    """Writes evidence into a fresh directory, or a tarball once finished. Thread-safe."""

    def __init__(self, out_dir: str | None = None, tar_file: str | None = None) -> None:
        if bool(out_dir) == bool(tar_file):
            raise InputError("give exactly one of --out DIR or --tar FILE")
        self.tar_file = Path(tar_file) if tar_file else None
        if self.tar_file is not None:
            if self.tar_file.exists():
                raise InputError(f"--tar {self.tar_file}: already exists (not overwritten)")
            if not self.tar_file.parent.is_dir():
                raise InputError(f"--tar {self.tar_file}: no such directory {self.tar_file.parent}")
            self._staging = Path(tempfile.mkdtemp(prefix=".sg-triage-", dir=self.tar_file.parent))
            name = self.tar_file.name
            for suffix in (".tar.gz", ".tgz", ".tar"):
                if name.endswith(suffix):
                    name = name[: -len(suffix)]
                    break
            self.root = self._staging / (name or "bundle")
            self.root.mkdir()
        else:
            self.root = Path(str(out_dir))
            if os.path.lexists(self.root):
                _check_own_empty_dir(self.root)
            else:
                self.root.mkdir(parents=True, mode=0o755)
        self.created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self._nodes: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def add(self, ev: NodeEvidence) -> None:
        """Write one node's files and remember its manifest entry."""
        files: dict[str, dict[str, Any]] = {}
        if "/" in ev.node or ev.node in ("", ".", "..") or "\0" in ev.node:
            raise InputError(f"node name {ev.node!r}: not usable as a directory name")
        if ev.files:
            node_dir = self.root / ev.node  # node names were validated: no "/" or ".."
            node_dir.mkdir(exist_ok=True)
            for name, data in sorted(ev.files.items()):
                _write_new(node_dir / name, data)
                files[f"{ev.node}/{name}"] = {"bytes": len(data),
                                              "sha256": hashlib.sha256(data).hexdigest()}
        entry = {"status": ev.status, "host": ev.host, "port": ev.port,
                 "error_kind": ev.error_kind, "error": ev.error, "duration": round(ev.duration, 3),
                 "steps": ev.steps, "facts": ev.facts, "files": files}
        with self._lock:
            self._nodes[ev.node] = entry

    def manifest(self) -> dict[str, Any]:
        nodes = dict(sorted(self._nodes.items()))
        summary = {k: sum(1 for n in nodes.values() if n["status"] == k)
                   for k in ("ok", "partial", "failed")}
        return {"format": FORMAT, "version": VERSION, "created": self.created,
                "slurmguard_version": __version__, "summary": summary, "nodes": nodes}

    def finish(self) -> dict[str, Any]:
        """Write manifest.json; for --tar, pack the tree and remove the staging directory."""
        manifest = self.manifest()
        _write_new(self.root / "manifest.json",
                   (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
        if self.tar_file is not None:
            # A fresh, unpredictable name in the target's directory, then a hard link to the
            # final name, which fails rather than replace anything that appeared there
            # meanwhile (a planted file or symlink): slurmguard.atomic, exclusive.
            try:
                with (AtomicFile(self.tar_file, mode=0o644, exclusive=True, durable=False) as fh,
                      tarfile.open(fileobj=fh, mode="w:gz") as tar):
                    tar.add(self.root, arcname=self.root.name)
            except FileExistsError:
                raise InputError(f"--tar {self.tar_file}: appeared while collecting "
                                 "(not overwritten)") from None
            finally:
                shutil.rmtree(self._staging, ignore_errors=True)
        return manifest

    @property
    def location(self) -> str:
        return str(self.tar_file if self.tar_file is not None else self.root)
