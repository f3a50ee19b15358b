"""Atomic file writes (slurmguard/atomic.py): the old file or the whole new one, exact mode,
no temporary file left behind, never through a planted symlink, and ``exclusive`` never
overwrites."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from slurmguard.atomic import AtomicFile, temp_name, write_atomic


def _leftovers(d) -> list[str]:
    return sorted(n for n in os.listdir(d) if n.endswith(".tmp"))


def test_write_replaces_with_the_exact_mode_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("old")
    old = os.umask(0o077)  # an exact mode must not depend on the caller's umask
    try:
        write_atomic(path, "new", mode=0o644)
    finally:
        os.umask(old)
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("durable", [True, False])
def test_a_failure_inside_keeps_the_old_file(tmp_path, durable):
    path = tmp_path / "f"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), AtomicFile(path, durable=durable) as fh:
        fh.write(b"half of the ne")
        raise RuntimeError("disk full")
    assert path.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


def test_exclusive_never_overwrites(tmp_path):
    path = tmp_path / "bundle.tar.gz"
    write_atomic(path, b"first", exclusive=True)
    with pytest.raises(FileExistsError):
        write_atomic(path, b"second", exclusive=True)
    assert path.read_bytes() == b"first"
    assert _leftovers(tmp_path) == []


def test_a_planted_symlink_is_replaced_or_refused_never_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    link = tmp_path / "metrics.prom"
    os.symlink(victim, link)
    with pytest.raises(FileExistsError):
        write_atomic(link, "x", exclusive=True)
    write_atomic(link, "mine", durable=False)  # rename replaces the link itself
    assert victim.read_text() == "precious"
    assert not link.is_symlink() and link.read_text() == "mine"


def test_temporary_names_are_hidden_beside_the_target_and_unpredictable(tmp_path):
    names = {temp_name(tmp_path / "a.json") for _ in range(100)}
    assert len(names) == 100
    for n in names:
        assert os.path.dirname(n) == str(tmp_path)
        assert os.path.basename(n).startswith(".a.json.") and n.endswith(".tmp")
    # a dot-file keeps its own name as the prefix (the checkpoint manifest's listing skips it)
    assert os.path.basename(temp_name("/d/.manifest")).startswith(".manifest.")


def test_text_mode_and_owner(tmp_path):
    path = tmp_path / "t"
    me = (os.geteuid(), os.getegid())
    with AtomicFile(path, text=True, owner=me, mode=0o600) as fh:
        fh.write("é\n")
    assert path.read_bytes() == "é\n".encode()
    st = path.stat()
    assert (st.st_uid, st.st_gid) == me and stat.S_IMODE(st.st_mode) == 0o600


def test_importing_it_costs_the_hook_path_nothing_beyond_os_and_typing():
    code = ("import sys, typing; before = set(sys.modules); import slurmguard.atomic; "
            "print(sorted(set(sys.modules) - before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert eval(out) == ["slurmguard", "slurmguard.atomic"]
