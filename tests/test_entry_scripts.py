"""The hook entry scripts in prolog/ and epilog/: valid sh, and fail open without slurmguard."""

from __future__ import annotations

import os
import subprocess

import pytest
from support.helpers import REPO

SCRIPTS = ["prolog/slurmguard-prolog", "prolog/slurmguard-healthcheck", "prolog/slurmguard-gate",
           "epilog/slurmguard-epilog"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_is_valid_executable_sh(script):
    path = REPO / script
    assert os.access(path, os.X_OK)
    assert subprocess.run(["/bin/sh", "-n", str(path)], capture_output=True).returncode == 0


@pytest.mark.parametrize("script", SCRIPTS)
def test_missing_slurmguard_never_fails_the_job(script, tmp_path):
    # No defaults file and nothing at the built-in path: the script as shipped, with both
    # paths moved into tmp_path so that this machine's own install cannot hide the case.
    gone = tmp_path / "usr-local-bin-slurmguard"
    text = (REPO / script).read_text()
    assert text.count("SLURMGUARD=/usr/local/bin/slurmguard\n") == 1
    text = text.replace("SLURMGUARD_DEFAULTS=/etc/default/slurmguard",
                        f"SLURMGUARD_DEFAULTS={tmp_path}/no-defaults").replace(
        "SLURMGUARD=/usr/local/bin/slurmguard\n", f"SLURMGUARD={gone}\n")
    path = tmp_path / Path(script).name
    path.write_text(text)
    path.chmod(0o755)
    (tmp_path / "state").mkdir()
    p = subprocess.run([str(path)], env={"SLURMGUARD_STATE_DIR": str(tmp_path / "state")},
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0
    assert f"{gone} is not executable" in p.stderr


def test_snippets_name_the_scripts():
    text = (REPO / "prolog/slurm.conf.snippet").read_text() + (REPO / "epilog/slurm.conf.snippet").read_text()
    assert SCRIPTS and [s for s in SCRIPTS if f"/usr/lib/slurmguard/{s}" not in text] == []


# --- Loud fail-open (docs/install.md "Loud fail-open") ---------------------------------------
import socket  # noqa: E402
from pathlib import Path  # noqa: E402

HOOKS = {"prolog/slurmguard-prolog": "prolog", "prolog/slurmguard-healthcheck": "healthcheck",
         "prolog/slurmguard-gate": "gate", "epilog/slurmguard-epilog": "epilog"}
BEGIN, END = "# --- fail-open:", "# --- end fail-open"


class SyslogSink:
    """A unix datagram socket standing in for /dev/log: `logger -u PATH` writes RFC 3164 here."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(10)

    def receive(self) -> str:
        return self.sock.recv(65536).decode(errors="replace")

    def close(self) -> None:
        self.sock.close()


def install(tmp: Path, script: str, defaults: str) -> Path:
    """The entry script as setup installs it: reading a defaults file in ``tmp``."""
    d = tmp / "default"
    d.write_text(defaults)
    text = (REPO / script).read_text().replace("SLURMGUARD_DEFAULTS=/etc/default/slurmguard",
                                               f"SLURMGUARD_DEFAULTS={d}")
    path = tmp / Path(script).name
    path.write_text(text)
    path.chmod(0o755)
    return path


def fake_slurmguard(tmp: Path, body: str) -> Path:
    p = tmp / "fake-slurmguard"
    p.write_text(body)
    p.chmod(0o755)
    return p


def test_fail_open_block_is_the_same_in_every_script() -> None:
    blocks = {s: (REPO / s).read_text().split(BEGIN, 1)[1].split(END, 1)[0] for s in HOOKS}
    first = blocks[SCRIPTS[0]]
    assert all(b == first for b in blocks.values()), "keep the fail-open block identical"


@pytest.mark.parametrize("script,hook", sorted(HOOKS.items()))
def test_unrunnable_slurmguard_is_loud(tmp_path, script: str, hook: str) -> None:
    state, textfile = tmp_path / "state", tmp_path / "textfile"
    state.mkdir()
    textfile.mkdir()
    sink = SyslogSink(tmp_path / "log.sock")
    try:
        path = install(tmp_path, script, f"SLURMGUARD={tmp_path}/gone/slurmguard\n"
                       f"SLURMGUARD_STATE_DIR={state}\nSLURMGUARD_TEXTFILE_DIR={textfile}\n"
                       f"SLURMGUARD_LOGGER_SOCKET={sink.path}\n")
        for _ in range(2):
            p = subprocess.run([str(path)], env={}, capture_output=True, text=True, timeout=30)
            assert p.returncode == 0, p.stderr  # the job runs: our fault is not the node's
            msg = sink.receive()
            assert "slurmguard:" in msg and f"{hook}: cannot run slurmguard" in msg, msg
            assert f"{tmp_path}/gone/slurmguard is not executable (SLURMGUARD in {tmp_path}/default, " \
                "written by slurmguard setup)" in msg
            assert msg.startswith("<27>")  # daemon.err
        assert "runs unchecked" in p.stderr
    finally:
        sink.close()
    lines = (state / "hook-unrunnable.log").read_text().splitlines()
    assert len(lines) == 2
    epoch, name, why = lines[0].split(" ", 2)
    assert int(epoch) > 1_700_000_000 and name == hook and "is not executable" in why
    prom = (textfile / "slurmguard_hook_unrunnable.prom").read_text()
    assert f'slurmguard_hook_unrunnable_total{{hook="{hook}"}} 2\n' in prom
    assert "# TYPE slurmguard_hook_unrunnable_total counter" in prom
    assert [f.name for f in textfile.iterdir()] == ["slurmguard_hook_unrunnable.prom"]  # no tmp left


def test_counter_keeps_every_hook(tmp_path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    defaults = f"SLURMGUARD=/nonexistent\nSLURMGUARD_STATE_DIR={state}\nSLURMGUARD_TEXTFILE_DIR={tmp_path}\n"
    for script in ("prolog/slurmguard-prolog", "epilog/slurmguard-epilog", "prolog/slurmguard-prolog"):
        p = subprocess.run([str(install(tmp_path, script, defaults))], env={}, capture_output=True,
                           timeout=30)
        assert p.returncode == 0
    prom = (tmp_path / "slurmguard_hook_unrunnable.prom").read_text()
    assert 'slurmguard_hook_unrunnable_total{hook="prolog"} 2' in prom
    assert 'slurmguard_hook_unrunnable_total{hook="epilog"} 1' in prom


@pytest.mark.parametrize("script,rc,want", [
    ("prolog/slurmguard-prolog", 0, 0), ("prolog/slurmguard-prolog", 1, 1),
    ("prolog/slurmguard-prolog", 8, 0), ("epilog/slurmguard-epilog", 1, 1),
    ("prolog/slurmguard-healthcheck", 1, 1), ("prolog/slurmguard-gate", 5, 5),
    ("prolog/slurmguard-gate", 1, 1), ("prolog/slurmguard-gate", 3, 0),
])
def test_exit_codes_pass_through_or_fail_open(tmp_path, script: str, rc: int, want: int) -> None:
    state = tmp_path / "state"
    state.mkdir()
    exe = fake_slurmguard(tmp_path, f'#!/bin/sh\necho "ran $1 config=$SLURMGUARD_CONFIG"\nexit {rc}\n')
    path = install(tmp_path, script, f"SLURMGUARD={exe}\nSLURMGUARD_CONFIG=/x.toml\n"
                   f"SLURMGUARD_STATE_DIR={state}\n")
    p = subprocess.run([str(path)], env={}, capture_output=True, text=True, timeout=30)
    assert p.returncode == want, p.stderr
    assert f"ran {HOOKS[script]} config=/x.toml" in p.stdout
    marker = state / "hook-unrunnable.log"
    assert marker.exists() == (want != rc or rc not in (0, 1, 5)), p.stderr
    if marker.exists():
        assert f"exited {rc}" in marker.read_text()


def test_broken_interpreter_and_bad_defaults_fail_open(tmp_path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    exe = fake_slurmguard(tmp_path, "#!/nonexistent/venv/bin/python\n")  # a removed venv
    p = subprocess.run([str(install(tmp_path, "prolog/slurmguard-prolog",
                                    f"SLURMGUARD={exe}\nSLURMGUARD_STATE_DIR={state}\n"))],
                       env={}, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "exited 127" in (state / "hook-unrunnable.log").read_text()
    p = subprocess.run([str(install(tmp_path, "prolog/slurmguard-prolog", "if then fi (\n"))],
                       env={}, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "does not parse as sh" in p.stderr


def test_unwritable_state_dir_still_exits_0(tmp_path) -> None:
    p = subprocess.run([str(install(tmp_path, "prolog/slurmguard-prolog",
                                    "SLURMGUARD=/nonexistent\nSLURMGUARD_STATE_DIR=/nonexistent/dir\n"
                                    "SLURMGUARD_TEXTFILE_DIR=/nonexistent/tf\n"))],
                       env={}, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "runs unchecked" in p.stderr




@pytest.mark.parametrize("script,hook", [("prolog/slurmguard-prolog", "prolog"),
                                         ("prolog/slurmguard-healthcheck", "healthcheck"),
                                         ("epilog/slurmguard-epilog", "epilog")])
@pytest.mark.parametrize("rc", [0, 1, 127])
def test_agent_client_is_asked_first_and_its_exit_is_judged_the_same(tmp_path, script, hook, rc) -> None:
    state = tmp_path / "state"
    state.mkdir()
    exe = fake_slurmguard(tmp_path, "#!/bin/sh\nexit 0\n")
    client = tmp_path / "client"
    client.write_text(f'#!/bin/sh\necho "client $*"\nexit {rc}\n')
    client.chmod(0o755)
    path = install(tmp_path, script, f"SLURMGUARD={exe}\nSLURMGUARD_STATE_DIR={state}\n"
                   f"SLURMGUARD_AGENT_CLIENT={client}\n")
    p = subprocess.run([str(path)], env={}, capture_output=True, text=True, timeout=30)
    assert p.stdout.strip() == f"client {hook} -- {exe} {hook}"
    assert p.returncode == (rc if rc in (0, 1) else 0)
    assert (state / "hook-unrunnable.log").exists() == (rc == 127)
    # An empty SLURMGUARD_AGENT_CLIENT never asks the agent.
    path = install(tmp_path, script, f"SLURMGUARD={exe}\nSLURMGUARD_STATE_DIR={state}\n"
                   "SLURMGUARD_AGENT_CLIENT=\n")
    p = subprocess.run([str(path)], env={}, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "client" not in p.stdout


@pytest.mark.parametrize("comment,marks", [("Comment=(null)", True), ("", True),
                                           ("Comment=slurmguard: hook-unrunnable: epilog: x", True),
                                           ("Comment=rack 7 fan swap", False)])
def test_first_failure_marks_the_node_comment_when_empty_or_ours(tmp_path, comment, marks) -> None:
    state = tmp_path / "state"
    state.mkdir()
    calls = tmp_path / "calls"
    scontrol = fake_slurmguard(tmp_path, f'#!/bin/sh\necho "$*" >>{calls}\n'
                               f'[ "$1" = show ] && echo "NodeName=n1 Arch=x86_64 {comment} State=IDLE"\n'
                               "exit 0\n")
    path = install(tmp_path, "prolog/slurmguard-prolog", f"SLURMGUARD=/nonexistent\n"
                   f"SLURMGUARD_STATE_DIR={state}\nSLURMGUARD_SCONTROL={scontrol}\n")
    for _ in range(3):  # only the first failure of a hook asks Slurm
        p = subprocess.run([str(path)], env={"SLURMD_NODENAME": "n1"}, capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 0
    lines = calls.read_text().splitlines()
    assert lines[0] == "show node -o n1"
    updates = [ln for ln in lines if ln.startswith("update")]
    assert updates == (["update nodename=n1 comment=slurmguard: hook-unrunnable: prolog: "
                        "/nonexistent is not executable (SLURMGUARD in "
                        f"{tmp_path}/default, written by slurmguard setup)"] if marks else [])
    assert len(lines) == 1 + len(updates)
