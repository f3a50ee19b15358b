"""What `slurmguard setup` does, as a list of steps that each know whether they would change
anything: a file with its content, mode and owner; a directory; an action (db upgrade).

Applying a step that is already satisfied does nothing, so a second `setup` changes nothing
(idempotent), and `--dry-run` is the same walk with the writes left out.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

from slurmguard.atomic import write_atomic


@dataclass(frozen=True)
class Owner:
    """uid/gid with the names they were looked up from (for messages)."""

    uid: int = 0
    gid: int = 0
    user: str = "root"
    group: str = "root"

    def __str__(self) -> str:
        return f"{self.user}:{self.group}"


ROOT = Owner()


@dataclass(frozen=True)
class FileStep:
    path: str
    content: bytes
    mode: int
    owner: Owner = ROOT
    keep_existing: bool = False  # a secret or a site's file: create it once, never rewrite
    what: str = ""


@dataclass(frozen=True)
class DirStep:
    path: str
    mode: int
    owner: Owner = ROOT
    what: str = ""


@dataclass(frozen=True)
class ActionStep:
    """Something that is not a file: ``probe()`` says what it would do (None: nothing),
    ``run()`` does it and says what it did."""

    what: str
    probe: Callable[[], str | None]
    run: Callable[[], str]


Step = FileStep | DirStep | ActionStep


@dataclass
class Outcome:
    step: Step
    status: str  # created, updated, unchanged, ran, skipped
    detail: str = ""
    diff: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.status in ("created", "updated", "ran")


def _can_chown() -> bool:
    return os.geteuid() == 0


def _file_state(step: FileStep) -> tuple[str, list[str]]:
    """('create'|'update'|'ok', what differs) for a file step, without writing."""
    try:
        st = os.lstat(step.path)
    except FileNotFoundError:
        return "create", []
    if not stat.S_ISREG(st.st_mode):
        return "update", ["not a regular file"]
    if step.keep_existing:
        return "ok", []
    diffs = []
    with open(step.path, "rb") as fh:
        if fh.read() != step.content:
            diffs.append("content")
    if stat.S_IMODE(st.st_mode) != step.mode:
        diffs.append(f"mode {stat.S_IMODE(st.st_mode):04o} -> {step.mode:04o}")
    if _can_chown() and (st.st_uid, st.st_gid) != (step.owner.uid, step.owner.gid):
        diffs.append(f"owner {st.st_uid}:{st.st_gid} -> {step.owner}")
    return ("update" if diffs else "ok"), diffs


def _dir_state(step: DirStep) -> tuple[str, list[str]]:
    try:
        st = os.stat(step.path)
    except FileNotFoundError:
        return "create", []
    if not stat.S_ISDIR(st.st_mode):
        return "update", ["exists and is not a directory"]
    diffs = []
    if stat.S_IMODE(st.st_mode) != step.mode:
        diffs.append(f"mode {stat.S_IMODE(st.st_mode):04o} -> {step.mode:04o}")
    if _can_chown() and (st.st_uid, st.st_gid) != (step.owner.uid, step.owner.gid):
        diffs.append(f"owner {st.st_uid}:{st.st_gid} -> {step.owner}")
    return ("update" if diffs else "ok"), diffs


def _write_file(step: FileStep) -> None:
    parent = os.path.dirname(step.path)
    os.makedirs(parent, mode=0o755, exist_ok=True)
    owner = (step.owner.uid, step.owner.gid) if _can_chown() else None
    # atomic: a hook never sees half a script; durable: setup runs once, then the node may reboot
    write_atomic(step.path, step.content, mode=step.mode, owner=owner)


def apply(steps: list[Step], *, dry_run: bool) -> list[Outcome]:
    """Bring every step about (or, with ``dry_run``, only say what would change).

    An OS error (not root, a read-only file system) stops at that step with one line naming
    the path; the steps before it are done and a rerun carries on from there."""
    from slurmguard.errors import SlurmguardError

    done: list[Outcome] = []
    try:
        return _apply(steps, dry_run, done)
    except OSError as exc:
        where = exc.filename or "?"
        hint = " (run setup as root, or choose --prefix DIR)" if exc.errno in (1, 13, 30) else ""
        raise SlurmguardError(f"setup: {where}: {exc.strerror or exc}{hint}; "
                              f"{sum(o.changed for o in done)} change(s) were made before it") from None


def _apply(steps: list[Step], dry_run: bool, out: list[Outcome]) -> list[Outcome]:
    from slurmguard.errors import SlurmguardError

    for step in steps:
        if isinstance(step, FileStep):
            state, diffs = _file_state(step)
            if state == "ok":
                out.append(Outcome(step, "unchanged"))
                continue
            if state == "update" and "not a regular file" in diffs:
                raise SlurmguardError(f"setup: {step.path} exists and is not a regular file; "
                                      "move it away and run setup again")
            if not dry_run:
                _write_file(step)
            out.append(Outcome(step, "created" if state == "create" else "updated", diff=diffs))
        elif isinstance(step, DirStep):
            state, diffs = _dir_state(step)
            if state == "ok":
                out.append(Outcome(step, "unchanged"))
                continue
            if "exists and is not a directory" in diffs:
                raise SlurmguardError(f"setup: {step.path} exists and is not a directory")
            if not dry_run:
                os.makedirs(step.path, mode=step.mode, exist_ok=True)
                os.chmod(step.path, step.mode)
                if _can_chown():
                    os.chown(step.path, step.owner.uid, step.owner.gid)
            out.append(Outcome(step, "created" if state == "create" else "updated", diff=diffs))
        else:
            would = step.probe()
            if would is None:
                out.append(Outcome(step, "unchanged"))
            elif dry_run:
                out.append(Outcome(step, "ran", would))
            else:
                out.append(Outcome(step, "ran", step.run()))
    return out
