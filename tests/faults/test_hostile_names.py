"""Node names (and other words) with `/`, `..`, shell metacharacters, option dashes, NUL and
unicode never reach a path or a remote command unquoted.

- Hypothesis over every node-name gate (slurmguard.nodeset, the store's records, the triage
  bundle): whatever is accepted is a plain word that cannot leave a directory, start an
  option or mean anything to a shell.
- A real sshd (tests/support/sshserver.py): hostile words go through SSHSession.run to a remote
  `printf '%s\\n'` and come back byte for byte, and `$(touch ...)` / backticks / `;` run
  nothing on the node.
- The real `slurmguard triage collect` CLI refuses hostile node sets before any connection,
  and the real `slurmguard prolog` with a hostile SLURMD_NODENAME drains nothing and writes
  nothing outside its own directories.
"""

from __future__ import annotations

import os
import re
import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import sshserver
from support.helpers import REPO, require, run_sg, sg_env
from support.reliability import record, setting

from slurmguard.errors import InputError
from slurmguard.nodeset import expand, is_node_name, validate_node_name
from slurmguard.store.records import validate_node

EXAMPLES = int(setting("hostile_examples", 150, 3000))
SHELL = set(" \t\n\r;&|$`'\"\\<>()*?[]{}!#~%=^,:@")
NAMES = st.one_of(
    st.text(max_size=30),
    st.text(alphabet=string.ascii_letters + string.digits + "._-/;$`'\" \n\x00*?[](){}~", max_size=20),
    st.sampled_from(["../etc", "..", ".", "n1/../../x", "n1;reboot", "$(touch /tmp/x)", "`id`",
                     "-oProxyCommand=touch x", "--help", "n1 n2", "n1\n", "n1\x00", "ｎ１", "\ud800",
                     "n" * 129, "a..b", "n1'", "~root", "n1#", "n1|sh"]),
)
COUNTS = {"names": 0}
HOSTILE_CLI = ["n1;reboot", "../etc", "-oProxyCommand=x", "n 1", "n1/x", "$(id)", "`id`", "a..b",
               "n1\x01", "n1'"]


def _plain(name: str) -> bool:
    return (bool(name) and not (set(name) & SHELL) and "/" not in name and ".." not in name
            and not name.startswith(("-", ".")) and name.isascii() and name.isprintable())


@settings(max_examples=EXAMPLES * 4, deadline=None)
@given(name=NAMES)
def test_every_node_name_gate_accepts_only_plain_words(name: str) -> None:
    COUNTS["names"] += 1
    gates = []
    for gate in (validate_node_name, validate_node):
        try:
            gate(name)
            gates.append(True)
        except InputError as exc:
            assert "\n" not in exc.message
            gates.append(False)
    assert gates[0] == gates[1] == is_node_name(name)
    if is_node_name(name):
        assert _plain(name), name
        assert len(name) <= 128
    try:
        names = expand(name)
    except InputError:
        return
    assert all(_plain(n) for n in names), names


@settings(max_examples=EXAMPLES, deadline=None)
@given(name=NAMES)
def test_bundle_never_writes_outside_its_directory(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    from slurmguard.triage.bundle import Bundle, NodeEvidence

    root = tmp_path_factory.mktemp("b")
    b = Bundle(out_dir=str(root / "out"))
    ev = NodeEvidence(name, "h", 22)
    ev.add_text("xid.log", "x\n")
    try:
        b.add(ev)
    except (InputError, OSError, ValueError):
        pass
    outside = [p for p in root.rglob("*") if not str(p).startswith(str(root / "out"))]
    assert outside == [], outside
    for p in (root / "out").rglob("*"):
        assert p.resolve().is_relative_to((root / "out").resolve())


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory):
    ok, why = sshserver.available()
    require(ok, why)
    server = sshserver.start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


WORDS = st.text(alphabet=st.characters(blacklist_characters="\x00\n", blacklist_categories=("Cs",)),
                max_size=25)
FIXED_WORDS = ["$(touch CANARY)", "`touch CANARY`", "; touch CANARY", "&& touch CANARY",
               "| touch CANARY", "'; touch CANARY; '", "\"$(touch CANARY)\"", "$HOME", "~", "*",
               "-n", "--", "a b", "\\", "'", "\"", "\t", "%s%n", "../../..", "ｎ１", "🔥", ""]


def test_remote_words_arrive_exactly(sshd: sshserver.SSHServer, tmp_path: Path) -> None:
    from slurmguard.adapters.ssh import SSHTarget, connect

    canary = tmp_path / "CANARY"
    sent = [w.replace("CANARY", str(canary)) for w in FIXED_WORDS]
    batches = []

    @settings(max_examples=max(3, EXAMPLES // 30), deadline=None)
    @given(words=st.lists(WORDS, min_size=20, max_size=60))
    def batch(words: list[str]) -> None:
        batches.append(words)

    batch()
    target = SSHTarget("n1", sshd.host, sshd.port, sshd.user)
    total = 0
    with connect(target, identity=str(sshd.identity), known_hosts=[str(sshd.known_hosts)],
                 timeout=30) as session:
        for words in [sent, *batches]:
            res = session.run(["/usr/bin/printf", "%s\\n", *words], timeout=30)
            assert res.rc == 0, res.stderr
            # printf's own escapes are in the FORMAT only; each word comes back as sent.
            assert res.stdout.split("\n")[:-1] == words, (words, res.stdout)
            total += len(words)
        res = session.run(["/bin/ls", str(tmp_path)], timeout=30)
    assert not canary.exists() and "CANARY" not in res.stdout
    COUNTS["ssh"] = total


def test_cli_and_hook_refuse_hostile_names(tmp_path: Path) -> None:
    for nodeset in HOSTILE_CLI:
        out = tmp_path / "bundle"
        p = run_sg("triage", "collect", "--out", str(out), "--", nodeset, timeout=60)
        assert p.returncode == 6, (nodeset, p.returncode, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and not out.exists()
    # The prolog on a node whose SLURMD_NODENAME is hostile: nothing drained, nothing written
    # outside its state dir, its record refused by name (it never becomes a path or an argv).
    calls = tmp_path / "scontrol-calls"
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f"#!/bin/sh\necho \"$@\" >> '{calls}'\nexit 1\n")
    scontrol.chmod(0o755)
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f'[slurm]\nscontrol = "{scontrol}"\n[hooks]\nstate_dir = "{tmp_path}/state"\n'
                   'prolog = ["fault-value"]\n[checks]\nsite_modules = ["support.faultsite"]\n')
    before = set(os.listdir(tmp_path))
    for node in ("../../x", "n1;touch x", "$(touch x)"):
        env = sg_env(SLURMGUARD_CONFIG=str(cfg), SLURMD_NODENAME=node, FAULT_VALUE="bad")
        env["PYTHONPATH"] = env["PYTHONPATH"] + os.pathsep + str(REPO / "tests")
        p = run_sg("prolog", env=env, timeout=60)
        assert p.returncode in (0, 1), p.stderr
        assert "Traceback" not in p.stderr
    after = set(os.listdir(tmp_path)) - before
    assert after <= {"state"}, after
    if calls.exists():  # Slurm may be asked about the node only through validated argv
        for line in calls.read_text().splitlines():
            assert not re.search(r"\.\./|;|\$\(", line), line
    record("hostile-names", faults="-",
           bad_inputs=(f"{COUNTS['names']} Hypothesis node names through every name gate, "
                       f"{COUNTS.get('ssh', 0)} hostile words over real SSH, "
                       f"{len(HOSTILE_CLI)} node sets to triage collect, 3 hostile SLURMD_NODENAME"),
           figures=("accepted names are plain words (no /, .., shell or option characters); SSH "
                    "words arrive byte for byte and run nothing; triage exits 6 before connecting; "
                    "bundles never write outside --out"))
