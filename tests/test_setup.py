"""`slurmguard setup node|controller` into a prefix: what it writes, --dry-run, idempotence,
and the package data it installs from (prolog/, epilog/ and spank/ themselves: the package's
data/ links to them, and a built wheel carries the files)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support.helpers import REPO, require, run_sg

from slurmguard.install.plan import HOOK_SCRIPTS, data_dir
from slurmguard.store.version import HEAD

PACKAGED = [("prolog", n) for n in (*HOOK_SCRIPTS["prolog"], "slurm.conf.snippet", "Makefile",
                                     "sg_agent_client.c", "sg_gate_client.c",
                                     "sg_client_common.h")] + \
           [("epilog", n) for n in (*HOOK_SCRIPTS["epilog"], "slurm.conf.snippet")]
VENV_SG = str(Path(sys.executable).parent / "slurmguard")


def _require_console_script() -> None:
    # the venv's console script (pip install -e .): what an admin runs; under CI=true its
    # absence fails the test
    require(os.access(VENV_SG, os.X_OK), f"{VENV_SG}: slurmguard is not installed beside this interpreter")


def setup(prefix: Path, role: str, *extra: str) -> subprocess.CompletedProcess[str]:
    # The console script, as an admin runs it: setup records its own absolute path.
    return subprocess.run([VENV_SG, "setup", role, "--prefix", str(prefix), *extra],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, str, str]:
    """One prefix with `setup node` then `setup controller` (and their outputs)."""
    _require_console_script()
    prefix = tmp_path_factory.mktemp("root")
    node = setup(prefix, "node")
    assert node.returncode == 0, node.stderr
    ctl = setup(prefix, "controller")
    assert ctl.returncode == 0, ctl.stderr
    return prefix, node.stdout, ctl.stdout


@pytest.mark.parametrize("sub,name", PACKAGED)
def test_package_data_is_the_repo_entry_script(sub: str, name: str) -> None:
    repo, pkg = REPO / sub / name, data_dir() / "hooks" / sub / name
    assert pkg.read_bytes() == repo.read_bytes(), f"{pkg} differs from {repo}"


@pytest.mark.parametrize("name", ["slurmguard_spank.c", "Makefile", "plugstack.conf"])
def test_package_data_is_the_repo_spank_source(name: str) -> None:
    assert (data_dir() / "spank" / name).read_bytes() == (REPO / "spank" / name).read_bytes()


@pytest.mark.parametrize("link,target", [("hooks/prolog", "prolog"), ("hooks/epilog", "epilog"),
                                         ("spank", "spank")])
def test_hook_and_spank_sources_exist_once(link: str, target: str) -> None:
    """The package's data/ holds links to the repository's prolog/, epilog/ and spank/: one
    copy to edit (a build follows the links; test_the_built_package_carries_what_setup_installs)."""
    pkg = REPO / "slurmguard" / "data" / link
    assert pkg.is_symlink(), f"{pkg}: must be a link to {target}/, not a copy"
    assert pkg.resolve() == (REPO / target).resolve()


def test_setup_writes_a_working_installation(installed) -> None:
    prefix, out, _ = installed
    defaults = (prefix / "etc/default/slurmguard").read_text()
    assert f"SLURMGUARD={VENV_SG}\n" in defaults
    assert f"SLURMGUARD_CONFIG={prefix}/etc/slurmguard/slurmguard.toml\n" in defaults
    prolog = prefix / "usr/lib/slurmguard/prolog/slurmguard-prolog"
    assert stat.S_IMODE(prolog.stat().st_mode) == 0o755
    assert f"SLURMGUARD_DEFAULTS={prefix}/etc/default/slurmguard\n" in prolog.read_text()
    assert stat.S_IMODE((prefix / "var/lib/slurmguard").stat().st_mode) == 0o770
    assert stat.S_IMODE((prefix / "var/spool/slurmguard").stat().st_mode) == 0o700
    # The installed script, with the empty environment slurmd gives, runs this slurmguard.
    r = subprocess.run(["/bin/sh", "-c", f'. {prefix}/etc/default/slurmguard; "$SLURMGUARD" --version'],
                       env={}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "slurmguard" in r.stdout, r.stderr
    assert f"Prolog={prolog}" in out and "nohold_on_prolog_fail" in out
    assert (prefix / "usr/local/share/man/man1/slurmguard.1").read_text().startswith(".TH SLURMGUARD 1")
    completion = prefix / "usr/share/bash-completion/completions/slurmguard"
    assert "_SLURMGUARD_COMPLETE=bash_complete" in completion.read_text()


def test_bash_completion_completes_commands_and_roles() -> None:
    import os as _os

    def complete(words: str, cword: int) -> str:
        env = dict(_os.environ, COMP_WORDS=words, COMP_CWORD=str(cword),
                   _SLURMGUARD_COMPLETE="bash_complete")
        return subprocess.run([VENV_SG], env=env, capture_output=True, text=True, timeout=60).stdout

    assert "plain,doctor" in complete("slurmguard do", 1).splitlines()
    assert complete("slurmguard setup ", 2).splitlines() == ["plain,node", "plain,controller"]


def test_setup_controller_units_token_and_store(installed) -> None:
    prefix, _, out = installed
    units = sorted(p.name for p in (prefix / "etc/systemd/system").iterdir())
    assert {"slurmguard-serve.service", "slurmguard-reconcile.service",
            "slurmguard-requeue-watch.service"} <= set(units)
    serve = (prefix / "etc/systemd/system/slurmguard-serve.service").read_text()
    assert f"ExecStart={VENV_SG} serve\n" in serve and "@SLURMGUARD@" not in serve
    token = prefix / "etc/slurmguard/token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and len(token.read_text().strip()) >= 32
    assert "db upgrade:" in out and f"-> {HEAD}" in out
    r = run_sg("-c", str(prefix / "etc/slurmguard/slurmguard.toml"), "db", "current")
    assert r.returncode == 0, r.stderr
    assert "systemctl enable --now" in out


@pytest.mark.parametrize("role", ["node", "controller"])
def test_second_setup_changes_nothing(installed, role: str) -> None:
    prefix, _, _ = installed
    token = (prefix / "etc/slurmguard/token").read_text()
    r = setup(prefix, role)
    assert r.returncode == 0, r.stderr
    assert "\n0 changes;" in r.stdout, r.stdout
    changed = [ln for ln in r.stdout.splitlines() if ln.startswith("  ") and "unchanged" not in ln
               and not ln.startswith("    ") and not ln.startswith("  - ")]
    assert changed == []
    assert (prefix / "etc/slurmguard/token").read_text() == token  # a secret is never rewritten


def test_setup_repairs_drift_and_keeps_the_sites_config(installed) -> None:
    prefix, _, _ = installed
    cfg = prefix / "etc/slurmguard/slurmguard.toml"
    cfg.write_text(cfg.read_text() + "\n# site change\n")
    (prefix / "var/spool/slurmguard").chmod(0o777)
    script = prefix / "usr/lib/slurmguard/epilog/slurmguard-epilog"
    script.write_text("#!/bin/sh\nexit 0\n")
    r = setup(prefix, "node")
    assert r.returncode == 0, r.stderr
    assert f"updated       {prefix}/var/spool/slurmguard" in r.stdout
    assert f"updated       {script}" in r.stdout
    assert stat.S_IMODE((prefix / "var/spool/slurmguard").stat().st_mode) == 0o700
    assert "HOOK=epilog" in script.read_text()
    assert cfg.read_text().endswith("# site change\n")  # the config is created once, never rewritten


def test_dry_run_prints_every_file_and_writes_nothing(tmp_path) -> None:
    _require_console_script()
    r = setup(tmp_path / "root", "controller", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "root").exists()
    for path in ("usr/lib/slurmguard/prolog/slurmguard-prolog", "etc/default/slurmguard",
                 "etc/systemd/system/slurmguard-serve.service", "etc/slurmguard/token",
                 "etc/slurmguard/slurmguard.toml"):
        assert f"would create  {tmp_path}/root/{path}" in r.stdout, path
    assert f"      | SLURMGUARD={VENV_SG}" in r.stdout  # contents are shown
    assert "      | <a new random token>" in r.stdout  # but not a secret
    assert "would run     db upgrade: create the store" in r.stdout


def test_setup_needs_a_role() -> None:
    r = run_sg("setup", "compute")
    assert r.returncode == 2 and "'compute' is not one of 'node', 'controller'" in r.stderr


def test_pyproject_package_data_carries_every_data_file() -> None:
    import tomllib

    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["slurmguard"]
    pkg = REPO / "slurmguard"
    missing = [str(p.relative_to(pkg)) for p in (pkg / "data").rglob("*") if p.is_file()
               and "__pycache__" not in p.parts
               and not any(p.relative_to(pkg).match(g) and len(p.relative_to(pkg).parts) == len(Path(g).parts)
                           for g in globs)]
    assert not missing, f"add a package-data glob to pyproject.toml for: {missing}"


def test_errors_of_a_missing_installation_name_the_setup_command(tmp_path) -> None:
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path}/var/lib/slurmguard/slurmguard.db"\n')
    r = run_sg("-c", str(cfg), "events")
    assert r.returncode == 5
    assert (f"directory {tmp_path}/var/lib/slurmguard does not exist; run: slurmguard setup "
            "controller") in r.stderr
    r = run_sg("-c", str(cfg), "requeue", "watch", "--once", "--state-file", f"{tmp_path}/no/s.json")
    assert r.returncode == 3 and "run: slurmguard setup controller" in r.stderr, r.stderr


def test_without_a_compiler_setup_says_how_to_get_the_plugin(tmp_path) -> None:
    _require_console_script()
    r = subprocess.run([VENV_SG, "setup", "node", "--prefix", str(tmp_path / "root"), "--dry-run"],
                       env={"PATH": str(tmp_path)}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "SPANK plugin not built: missing a C compiler (apt-get install gcc)" in r.stdout
    assert "slurmguard_spank.so" not in r.stdout.split("slurm.conf (")[0]  # no plugin file step
    assert f"SLURMGUARD_AGENT_CLIENT={tmp_path}" not in r.stdout  # no client built either


def test_setup_that_cannot_write_says_where_and_how(tmp_path) -> None:
    _require_console_script()
    blocker = tmp_path / "root"
    blocker.mkdir()
    (blocker / "usr").write_text("a file where setup needs a directory\n")
    r = setup(blocker, "node")
    assert r.returncode == 8, r.stdout + r.stderr
    line = r.stderr.strip()
    assert line.startswith(f"slurmguard: error: setup: {blocker}/usr") and "\n" not in line, line
    assert "change(s) were made before it" in line


def test_textfile_dir_of_the_config_reaches_the_entry_scripts(tmp_path) -> None:
    _require_console_script()
    prefix = tmp_path / "root"
    cfg = prefix / "etc/slurmguard/slurmguard.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(f'[hooks]\nstate_dir = "{prefix}/state"\nspool_dir = "{prefix}/spool"\n'
                   f'[metrics]\ntextfile_dir = "{prefix}/textfile"\n')
    r = setup(prefix, "node")
    assert r.returncode == 0, r.stderr
    defaults = (prefix / "etc/default/slurmguard").read_text()
    assert f"SLURMGUARD_TEXTFILE_DIR={prefix}/textfile\n" in defaults
    assert f"SLURMGUARD_STATE_DIR={prefix}/state\n" in defaults
    assert (prefix / "textfile").is_dir() and (prefix / "state").is_dir()


def test_the_built_package_carries_what_setup_installs(tmp_path) -> None:
    """setuptools' build_py (what a wheel is made of) copies the data files; setup run from
    that build, not from this checkout, installs the same entry scripts."""
    import shutil

    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "slurmguard", src / "slurmguard",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    build = tmp_path / "build"
    r = subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "-q",
                        "build_py", "--build-lib", str(build)], cwd=src, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for sub, name in PACKAGED:
        built = build / "slurmguard/data/hooks" / sub / name
        assert built.is_file() and not built.is_symlink(), built  # a real file in the build
    assert (build / "slurmguard/data/spank/slurmguard_spank.c").is_file()
    assert not list(build.glob("slurmguard/data/**/slurmguard-*-client")), "no built binary"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(build)}
    prefix = tmp_path / "root"
    r = subprocess.run([sys.executable, "-m", "slurmguard", "setup", "node", "--prefix",
                        str(prefix)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    where = subprocess.run([sys.executable, "-c", "import slurmguard; print(slurmguard.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True).stdout
    assert where.startswith(str(build))  # the build, not this checkout, ran setup
    for sub, name in PACKAGED:
        if name.startswith("slurmguard-"):
            got = (prefix / "usr/lib/slurmguard" / sub / name).read_text()
            assert got == (REPO / sub / name).read_text().replace(
                "SLURMGUARD_DEFAULTS=/etc/default/slurmguard",
                f"SLURMGUARD_DEFAULTS={prefix}/etc/default/slurmguard"), name
    if shutil.which("gcc"):  # both C clients compiled from the build's files (with their header)
        for client in ("slurmguard-agent-client", "slurmguard-gate-client"):
            assert os.access(prefix / "usr/lib/slurmguard/prolog" / client, os.X_OK), client


def test_setup_keeps_the_sites_defaults_and_their_overrides(tmp_path) -> None:
    _require_console_script()
    prefix = tmp_path / "root"
    defaults = prefix / "etc/default/slurmguard"
    defaults.parent.mkdir(parents=True)
    # A file written by hand before setup: a site variable, and an old SLURMGUARD path.
    defaults.write_text("SLURMGUARD=/opt/old/bin/slurmguard\nSLURM_CONF=/etc/slurm-gpu/slurm.conf\n")
    assert setup(prefix, "node").returncode == 0
    text = defaults.read_text()
    assert f"SLURMGUARD={VENV_SG}\n" in text and "/opt/old" not in text  # setup's own: rewritten
    head, site = text.split("# Site settings: ", 1)
    assert "SLURM_CONF=/etc/slurm-gpu/slurm.conf" in site  # the site's: kept
    # An admin override in the site section (never ask the agent) survives every rerun.
    defaults.write_text(text + "SLURMGUARD_AGENT_CLIENT=\n")
    r = setup(prefix, "node")
    assert "\n0 changes;" in r.stdout, r.stdout
    assert defaults.read_text().endswith("SLURM_CONF=/etc/slurm-gpu/slurm.conf\nSLURMGUARD_AGENT_CLIENT=\n")
    sourced = subprocess.run(["/bin/sh", "-c", f'. {defaults}; printf "[%s]" "$SLURMGUARD_AGENT_CLIENT"'],
                             env={}, capture_output=True, text=True, timeout=30).stdout
    assert sourced == "[]"  # the override wins over setup's line above it


def test_setup_writes_slurm_conf_for_the_hooks_when_not_the_default(tmp_path) -> None:
    # slurmd starts HealthCheckProgram without SLURM_CONF: a non-default one must be in the
    # defaults file the entry scripts source (and export).
    _require_console_script()
    for conf, written in (("/opt/slurm/etc/slurm.conf", True), ("/etc/slurm/slurm.conf", False)):
        prefix = tmp_path / ("custom" if written else "default")
        env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"} | {"SLURM_CONF": conf}
        r = subprocess.run([VENV_SG, "setup", "node", "--prefix", str(prefix)], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        text = (prefix / "etc/default/slurmguard").read_text()
        assert (f"\nSLURM_CONF={conf}\n" in text) is written, text
        if not written:
            assert "SLURM_CONF" not in text  # Slurm finds its default without help
