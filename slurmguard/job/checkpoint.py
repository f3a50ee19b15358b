"""Find the newest *complete* checkpoint under a directory; write and verify slurmguard manifests.

A job that resumes from a torn checkpoint (a shard missing, a file half written when the node
died) either crashes on load or, worse, trains on garbage. Each framework has its own "this
save finished" marker, written last; a finder trusts a checkpoint only when that marker says
so, and skips the rest with a log line, so the previous complete one is used:

- slurmguard manifest: ``.slurmguard-manifest.json`` in the checkpoint directory, written last
  and atomically, listing every file with its size and sha256; every entry is verified.
- PyTorch DCP: a directory of ``*.distcp`` shards is complete when its ``.metadata`` exists
  (DCP's coordinator writes it after every rank finished).
- DeepSpeed: ``latest`` names the last finished tag; tags older than it are complete, tags
  newer than it (or the one it names, when missing) are not.
- Megatron: ``latest_checkpointed_iteration.txt`` names the last finished ``iter_NNNNNNN``; the
  same rule.
- NeMo: a save in progress is marked by ``<name>-unfinished`` (``.ckpt`` stripped) beside it.

Everything here is pure file reading; hostile input (symlinks that leave the directory, garbage
tracker files, absurd step numbers) becomes a ``skipped`` entry with a reason, never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from slurmguard.atomic import write_atomic
from slurmguard.errors import InputError

log = logging.getLogger("slurmguard.job.checkpoint")

MANIFEST_NAME = ".slurmguard-manifest.json"
MANIFEST_VERSION = 1
MAX_STEP = 2**63 - 1  # what a C int64 (Slurm, torch) can hold; larger is garbage
_MAX_TRACKER_BYTES = 4096  # a tracker file is one short line; refuse to read a huge one
_MAX_MANIFEST_BYTES = 64 * 1024 * 1024
LAYOUTS = ("manifest", "dcp", "deepspeed", "megatron", "nemo")


@dataclass(frozen=True)
class Checkpoint:
    """One complete checkpoint: where it is, its step (None when unknown), its layout."""

    path: str
    step: int | None
    layout: str
    mtime: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "step": self.step, "layout": self.layout}


@dataclass(frozen=True)
class Skipped:
    """A checkpoint candidate that is torn, partial or hostile, and why."""

    path: str
    layout: str
    reason: str
    step: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "layout": self.layout, "reason": self.reason, "step": self.step}


@dataclass
class Scan:
    """Everything found under a directory: complete checkpoints (newest first) and skipped ones."""

    directory: str
    complete: list[Checkpoint] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def latest(self) -> Checkpoint | None:
        return self.complete[0] if self.complete else None

    def to_dict(self) -> dict[str, object]:
        return {
            "directory": self.directory,
            "latest": self.latest.to_dict() if self.latest else None,
            "complete": [c.to_dict() for c in self.complete],
            "skipped": [s.to_dict() for s in self.skipped],
        }


# ---------------------------------------------------------------------------------------------
# helpers


def parse_step(text: str) -> int | None:
    """The step number in a name like ``step-000120``, ``iter_0000100``, ``global_step7``,
    ``epoch=1-step=300.ckpt``; None when there is none. Raises InputError beyond int64."""
    m = re.search(r"step[=_-]?(\d+)", text) or re.search(r"iter[=_-]?(\d+)", text)
    if not m:
        m = re.search(r"(\d+)(?!.*\d)", text)
    if not m:
        return None
    digits = m.group(1)
    if len(digits) > 19 or int(digits) > MAX_STEP:
        raise InputError(f"step number out of range in {text!r}")
    return int(digits)


def _inside(root: Path, p: Path) -> bool:
    """Whether ``p`` (symlinks resolved) stays inside ``root`` (resolved)."""
    try:
        p.resolve(strict=False).relative_to(root)
        return True
    except (ValueError, OSError, RuntimeError):  # RuntimeError: a symlink loop
        return False


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def _read_small(p: Path, limit: int) -> str:
    """Read a small text file; InputError when missing, too big or not text."""
    try:
        with open(p, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise InputError(f"{p}: cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputError(f"{p}: larger than {limit} bytes, not a tracker file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{p}: not UTF-8 text") from None


def sha256_file(p: Path, bufsize: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as fh:
        while chunk := fh.read(bufsize):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# slurmguard manifest


def write_manifest(ckpt_dir: str | os.PathLike[str], step: int,
                   files: Iterable[str] | None = None) -> Path:
    """Write ``.slurmguard-manifest.json`` in ``ckpt_dir``: call it *after* every file is
    written and closed. Lists each file (all regular files below the directory when ``files``
    is None) with size and sha256; written to a temporary file, fsynced, renamed into place and
    the directory fsynced, so a reader sees either no manifest or a whole one."""
    root = Path(ckpt_dir)
    if not root.is_dir():
        raise InputError(f"checkpoint directory {root} does not exist")
    if not isinstance(step, int) or step < 0 or step > MAX_STEP:
        raise InputError(f"step: expected an integer 0..2^63-1, got {step!r}")
    if files is None:
        names = sorted(
            str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and not p.is_symlink() and p.name != MANIFEST_NAME
            and not p.name.startswith(MANIFEST_NAME + ".")
        )
    else:
        names = sorted(files)
    entries = []
    for name in names:
        p = root / name
        if not _inside(root.resolve(), p) or not p.is_file():
            raise InputError(f"manifest entry {name!r} is not a regular file inside {root}")
        with open(p, "rb") as fh:
            os.fsync(fh.fileno())  # the data must be on disk before the manifest says it is
        entries.append({"path": name, "size": p.stat().st_size, "sha256": sha256_file(p)})
    doc = {"version": MANIFEST_VERSION, "step": step, "created": time.time(), "files": entries}
    # Durable (file and directory fsynced); the temporary name starts with MANIFEST_NAME + "."
    # so a listing taken meanwhile leaves it out.
    write_atomic(root / MANIFEST_NAME, json.dumps(doc, indent=1))
    return root / MANIFEST_NAME


def verify_manifest(ckpt_dir: str | os.PathLike[str], *, checksums: bool = True) -> int:
    """Verify a manifest checkpoint; returns its step or raises InputError saying what is torn."""
    root = Path(ckpt_dir)
    mpath = root / MANIFEST_NAME
    if not mpath.is_file():
        raise InputError(f"{root}: no {MANIFEST_NAME}")
    text = _read_small(mpath, _MAX_MANIFEST_BYTES)
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{mpath}: not valid JSON ({exc.msg})") from None
    if not isinstance(doc, dict) or doc.get("version") != MANIFEST_VERSION:
        raise InputError(f"{mpath}: not a version {MANIFEST_VERSION} slurmguard manifest")
    step = doc.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise InputError(f"{mpath}: step: expected an integer 0..2^63-1, got {step!r}")
    files = doc.get("files")
    if not isinstance(files, list):
        raise InputError(f"{mpath}: files: expected a list")
    real_root = root.resolve()
    for i, ent in enumerate(files):
        if not isinstance(ent, dict):
            raise InputError(f"{mpath}: files[{i}]: expected an object")
        name, size, digest = ent.get("path"), ent.get("size"), ent.get("sha256")
        if not isinstance(name, str) or not name or os.path.isabs(name) or ".." in Path(name).parts:
            raise InputError(f"{mpath}: files[{i}].path: expected a relative path, got {name!r}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InputError(f"{mpath}: files[{i}].size: expected a size, got {size!r}")
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise InputError(f"{mpath}: files[{i}].sha256: expected 64 hex digits")
        p = root / name
        if not _inside(real_root, p):
            raise InputError(f"{root}: {name} leads outside the checkpoint directory")
        try:
            st = p.stat()
        except OSError:
            raise InputError(f"{root}: {name} is missing") from None
        if not p.is_file():
            raise InputError(f"{root}: {name} is not a regular file")
        if st.st_size != size:
            raise InputError(f"{root}: {name} has {st.st_size} bytes, manifest says {size}")
        if checksums and sha256_file(p) != digest:
            raise InputError(f"{root}: {name} checksum differs from the manifest")
    return step


# ---------------------------------------------------------------------------------------------
# finders: each yields Checkpoint or Skipped for the candidates of its layout under ``root``


def _subdirs(root: Path, real_root: Path, out: Scan) -> list[Path]:
    """Sub-directories of ``root``; one that a symlink takes outside it is skipped (once)."""
    dirs = []
    try:
        entries = sorted(root.iterdir())
    except OSError as exc:
        raise InputError(f"{root}: cannot list: {exc.strerror or exc}") from None
    for p in entries:
        if p.is_dir():
            if not _inside(real_root, p):
                out.skipped.append(Skipped(str(p), "-", "symlink leads outside the directory"))
                continue
            dirs.append(p)
    return dirs


def _find_manifest(root: Path, dirs: list[Path], out: Scan, checksums: bool) -> set[Path]:
    seen: set[Path] = set()
    for d in [root, *dirs]:
        if not (d / MANIFEST_NAME).exists():
            continue
        seen.add(d)
        try:
            step = verify_manifest(d, checksums=checksums)
        except InputError as exc:
            out.skipped.append(Skipped(str(d), "manifest", exc.message, _step_or_none(d.name)))
            continue
        out.complete.append(Checkpoint(str(d), step, "manifest", _mtime(d / MANIFEST_NAME)))
    return seen


def _step_or_none(name: str) -> int | None:
    try:
        return parse_step(name)
    except InputError:
        return None


def _named_step(d: Path, layout: str, out: Scan) -> tuple[bool, int | None]:
    try:
        return True, parse_step(d.name)
    except InputError as exc:
        out.skipped.append(Skipped(str(d), layout, exc.message))
        return False, None


def _find_dcp(root: Path, dirs: list[Path], real_root: Path, out: Scan, done: set[Path]) -> None:
    for d in [root, *dirs]:
        if d in done:
            continue
        try:
            has_shards = any(p.suffix == ".distcp" for p in d.iterdir())
        except OSError:
            continue
        meta = d / ".metadata"
        if not has_shards and not meta.exists():
            continue
        ok, step = _named_step(d, "dcp", out)
        if not ok:
            continue
        if not meta.is_file() or not _inside(real_root, meta):
            out.skipped.append(Skipped(str(d), "dcp", "no .metadata: the save did not finish", step))
        elif meta.stat().st_size == 0:
            out.skipped.append(Skipped(str(d), "dcp", ".metadata is empty", step))
        else:
            out.complete.append(Checkpoint(str(d), step, "dcp", _mtime(meta)))


def _tracked(root: Path, dirs: list[Path], real_root: Path, out: Scan, layout: str,
             tracker: str, dir_re: str,
             parse_tracker: Callable[[str, Path], tuple[Path, int | None]]) -> None:
    """DeepSpeed and Megatron: a tracker file names the last finished directory."""
    tpath = root / tracker
    cands: list[tuple[int, Path]] = []
    for d in dirs:
        if re.fullmatch(dir_re, d.name):
            ok, step = _named_step(d, layout, out)
            if ok and step is not None:
                cands.append((step, d))
    if not tpath.exists():
        for step, d in cands:
            out.skipped.append(Skipped(str(d), layout, f"no {tracker}: cannot tell it finished", step))
        return
    try:
        if not _inside(real_root, tpath):
            raise InputError(f"{tpath}: symlink leads outside the directory")
        target = parse_tracker(_read_small(tpath, _MAX_TRACKER_BYTES).strip(), tpath)
    except InputError as exc:
        out.skipped.append(Skipped(str(tpath), layout, exc.message))
        for step, d in cands:
            out.skipped.append(Skipped(str(d), layout, f"{tracker} unusable: cannot tell it finished", step))
        return
    tdir, tstep = target
    if not tdir.is_dir() or not _inside(real_root, tdir):
        out.skipped.append(Skipped(str(tdir), layout, f"{tracker} names a missing directory",
                                   tstep if tstep is not None and tstep >= 0 else None))
    else:
        out.complete.append(Checkpoint(str(tdir), tstep if tstep is not None and tstep >= 0 else None,
                                       layout, _mtime(tpath)))
    for step, d in cands:
        if d == tdir:
            continue
        if tstep is not None and step < tstep:
            # Saved before the tracker moved past it, so that save had finished.
            out.complete.append(Checkpoint(str(d), step, layout, _mtime(d)))
        else:
            out.skipped.append(Skipped(str(d), layout,
                                       f"not older than what {tracker} names: the save did not finish", step))


def _deepspeed_tracker(text: str, tpath: Path) -> tuple[Path, int | None]:
    if not re.fullmatch(r"[A-Za-z0-9_.=-]{1,200}", text) or text in (".", ".."):
        raise InputError(f"{tpath}: expected a tag name, got {text[:60]!r}")
    step = parse_step(text)
    return tpath.parent / text, step if step is not None else -1


def _megatron_tracker(text: str, tpath: Path) -> tuple[Path, int | None]:
    if text == "release":
        return tpath.parent / "release", None
    if not re.fullmatch(r"\d{1,19}", text) or int(text) > MAX_STEP:
        raise InputError(f"{tpath}: expected an iteration number or 'release', got {text[:60]!r}")
    it = int(text)
    return tpath.parent / f"iter_{it:07d}", it


def _find_nemo(root: Path, real_root: Path, out: Scan, done: set[Path]) -> None:
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return
    names = {p.name for p in entries}
    for p in entries:
        n = p.name
        if p in done or n.endswith("-unfinished") or not (n.endswith(".ckpt") or n.endswith(".nemo") or "step=" in n):
            continue
        if not _inside(real_root, p):
            out.skipped.append(Skipped(str(p), "nemo", "symlink leads outside the directory"))
            continue
        ok, step = _named_step(p, "nemo", out)
        if not ok:
            continue
        base = n[: -len(".ckpt")] if n.endswith(".ckpt") else n
        if base + "-unfinished" in names:
            out.skipped.append(Skipped(str(p), "nemo", f"{base}-unfinished marker: the save did not finish", step))
        else:
            out.complete.append(Checkpoint(str(p), step, "nemo", _mtime(p)))


# ---------------------------------------------------------------------------------------------


def scan(directory: str | os.PathLike[str], layouts: Iterable[str] = LAYOUTS, *,
         checksums: bool = True) -> Scan:
    """Every checkpoint under ``directory``: complete ones newest first, torn ones skipped.

    Raises InputError when the directory itself is missing or unreadable."""
    root = Path(directory)
    if not root.is_absolute():
        raise InputError(f"checkpoint directory must be an absolute path, got {str(directory)!r}")
    if not root.is_dir():
        raise InputError(f"checkpoint directory {root} does not exist or is not a directory")
    real_root = root.resolve()
    layouts = set(layouts)
    if unknown := layouts - set(LAYOUTS):
        raise InputError(f"unknown checkpoint layout {sorted(unknown)[0]!r}; known: {', '.join(LAYOUTS)}")
    out = Scan(str(root))
    done: set[Path] = set()
    dirs = _subdirs(root, real_root, out)
    if "manifest" in layouts:
        done |= _find_manifest(root, dirs, out, checksums)
    if "dcp" in layouts:
        _find_dcp(root, dirs, real_root, out, done)
    if "deepspeed" in layouts:
        _tracked(root, dirs, real_root, out, "deepspeed", "latest", r"global_step\d+",
                 _deepspeed_tracker)
    if "megatron" in layouts:
        _tracked(root, dirs, real_root, out, "megatron", "latest_checkpointed_iteration.txt",
                 r"iter_\d+", _megatron_tracker)
    if "nemo" in layouts:
        _find_nemo(root, real_root, out, done)
    # A path some finder calls torn is torn (e.g. a Megatron iter dir whose DCP .metadata exists
    # but whose tracker was never advanced); a path two finders accept counts once.
    torn = {s.path for s in out.skipped}
    unique: dict[str, Checkpoint] = {}
    for c in out.complete:
        if c.path not in torn:
            unique.setdefault(c.path, c)
    out.complete = list(unique.values())
    # Newest first: by step, then by when its marker was written; unknown steps last.
    out.complete.sort(key=lambda c: (c.step is not None, c.step or 0, c.mtime), reverse=True)
    return out


def find_latest(directory: str | os.PathLike[str], layouts: Iterable[str] = LAYOUTS, *,
                checksums: bool = True) -> Checkpoint | None:
    """The newest complete checkpoint, logging one line for each torn one newer than it."""
    result = scan(directory, layouts, checksums=checksums)
    best = result.latest
    for s in result.skipped:
        if best is None or s.step is None or best.step is None or s.step >= best.step:
            log.warning("skipping checkpoint %s (%s): %s", s.path, s.layout, s.reason)
    return best
