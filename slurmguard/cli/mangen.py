"""Generate the man page slurmguard(1) (roff) from every command's ``--help``, like docgen.

    python -m slurmguard.cli.mangen > docs/slurmguard.1

tests/test_cli_docs.py fails when docs/slurmguard.1 differs from this output. `slurmguard
setup` installs the same page as /usr/local/share/man/man1/slurmguard.1 (`man slurmguard`).
The page has no date, so the same slurmguard always renders the same bytes.
"""

from __future__ import annotations

from slurmguard import __version__
from slurmguard.cli import docgen

REGENERATE = "python -m slurmguard.cli.mangen > docs/slurmguard.1"

FILES = [
    ("/etc/slurmguard/slurmguard.toml", "the config file (conf.d/*.toml beside it); "
     "etc/slurmguard.toml.example lists every key with its default"),
    ("/etc/default/slurmguard", "what the entry scripts and units run (SLURMGUARD, "
     "SLURMGUARD_CONFIG); written by slurmguard setup"),
    ("/usr/lib/slurmguard/prolog/, /usr/lib/slurmguard/epilog/", "the entry scripts named "
     "in slurm.conf"),
    ("/var/lib/slurmguard/", "per-check state, the SQLite store, hook-unrunnable.log"),
    ("/var/spool/slurmguard/", "results waiting for slurmguard serve"),
]


def _roff(text: str) -> str:
    out = []
    for line in text.replace("\\", "\\e").splitlines():
        line = line.replace("-", "\\-")
        if line.startswith((".", "'")):
            line = "\\&" + line
        out.append(line)
    return "\n".join(out)


def render() -> str:
    """The whole man page."""
    commands = list(docgen.walk())
    _, root, root_ctx = commands[0]
    parts = [
        f'.TH SLURMGUARD 1 "" "slurmguard {__version__}" "slurmguard manual"',
        ".SH NAME",
        "slurmguard \\- node health checks, fleet policy and checkpoint\\-aware requeue for "
        "GPU Slurm clusters",
        ".SH SYNOPSIS",
        ".B slurmguard",
        "[\\fB\\-c\\fR \\fIPATH\\fR] [\\fB\\-v\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...",
        ".SH DESCRIPTION",
        ".nf",
        _roff(root.get_help(root_ctx).rstrip()),
        ".fi",
        ".SH COMMANDS",
    ]
    for path, cmd, ctx in commands[1:]:
        parts += [f'.SS "{path}"', ".nf", _roff(cmd.get_help(ctx).rstrip()), ".fi"]
    parts.append(".SH EXIT STATUS")
    for code, name, meaning in docgen.exit_codes():
        parts += [".TP", f"\\fB{code}\\fR", _roff(f"{name}: {meaning}")]
    parts.append(".SH FILES")
    for path, what in FILES:
        parts += [".TP", f"\\fI{_roff(path)}\\fR", _roff(what)]
    parts += [
        ".SH ENVIRONMENT",
        ".TP", "\\fBSLURMGUARD_CONFIG\\fR", "the config file (as \\fB\\-c\\fR)",
        ".TP", "\\fBSLURM_CONF\\fR", "the slurm.conf that Slurm commands and slurmguard doctor read",
        ".SH SEE ALSO",
        "\\fBslurm.conf\\fR(5), \\fBscontrol\\fR(1), \\fBspank\\fR(8); docs/install.md and "
        "docs/cli.md in the slurmguard sources",
    ]
    return "\n".join(parts) + "\n"


def main() -> None:
    print(render(), end="")


if __name__ == "__main__":
    main()
