"""docs/cli.md is generated from --help and must not go stale; every command shows an example."""

from __future__ import annotations

from support.helpers import REPO, run_sg

from slurmguard.cli import docgen


def test_docs_cli_md_is_current() -> None:
    current = (REPO / "docs" / "cli.md").read_text() if (REPO / "docs" / "cli.md").exists() else ""
    fresh = docgen.render()
    if current != fresh:
        cur, new = current.splitlines(), fresh.splitlines()
        first = next((i for i, (a, b) in enumerate(zip(cur, new, strict=False)) if a != b),
                     min(len(cur), len(new)))
        got = cur[first] if first < len(cur) else "<end of file>"
        want = new[first] if first < len(new) else "<end of file>"
        raise AssertionError(
            "docs/cli.md is stale (a command or its --help changed). Regenerate it with:\n\n"
            f"    {docgen.REGENERATE}\n\nand commit it. First difference at line {first + 1}:\n"
            f"  docs/cli.md: {got!r}\n  --help:      {want!r}")


def test_every_command_help_has_an_example() -> None:
    missing = [path for path, cmd, ctx in docgen.walk() if "Example" not in cmd.get_help(ctx)]
    assert not missing, (
        "these commands' --help has no example; add a `\\b` block starting 'Example:' to the "
        f"docstring (see slurmguard/cli/triage.py), then run `{docgen.REGENERATE}`: {missing}")


def test_walk_covers_every_registered_command() -> None:
    from slurmguard.cli import COMMANDS

    paths = [p for p, _, _ in docgen.walk()]
    assert paths[0] == "slurmguard"
    assert [p.split()[1] for p in paths[1:] if len(p.split()) == 2] == list(COMMANDS)
    assert "slurmguard triage collect" in paths  # subcommands of groups too


def test_generator_runs_as_documented(tmp_path) -> None:
    r = run_sg("-h")  # the real CLI still answers
    assert r.returncode == 0
    import subprocess
    import sys

    from support.helpers import sg_env

    out = subprocess.run([sys.executable, "-m", "slurmguard.cli.docgen"], env=sg_env(),
                         capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert out == docgen.render() and "## slurmguard triage collect" in out


def test_man_page_is_current() -> None:
    from slurmguard.cli import mangen

    page = REPO / "docs" / "slurmguard.1"
    assert page.exists() and page.read_text() == mangen.render(), (
        f"docs/slurmguard.1 is stale (a command or its --help changed). Regenerate it with:\n\n"
        f"    {mangen.REGENERATE}\n")


def test_man_page_renders_every_command(tmp_path) -> None:
    import shutil
    import subprocess

    from slurmguard.cli import mangen

    text = mangen.render()
    paths = [path for path, _, _ in docgen.walk() if path != "slurmguard"]
    assert "slurmguard setup" in paths and "slurmguard check" in paths
    assert [p for p in paths if f'.SS "{p}"' not in text] == []
    if shutil.which("man"):
        page = tmp_path / "slurmguard.1"
        page.write_text(text)
        r = subprocess.run(["man", "-l", str(page)], capture_output=True, text=True, timeout=60,
                           env={"MANWIDTH": "100", "PATH": "/usr/bin:/bin"})
        assert r.returncode == 0 and "slurmguard setup" in r.stdout, r.stderr


def test_example_config_is_current() -> None:
    """Here too (land.sh always runs this file): a new config key must regenerate the example."""
    from slurmguard.install.config_example import REGENERATE, render

    example = REPO / "etc" / "slurmguard.toml.example"
    assert example.read_text() == render(), (
        f"etc/slurmguard.toml.example is stale (a config key changed). Regenerate it with:\n\n"
        f"    {REGENERATE}\n\nand commit it (tests/test_config_example.py has the details).")
