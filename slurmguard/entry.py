"""Console entry point with a fast path for the hooks.

`slurmguard prolog|epilog|healthcheck` runs on every job start on every node, and `slurmguard
check` is what sites run by hand and from their own health tooling. Their few options are
parsed here without importing click (about 20 ms of the hook's budget); anything else,
`--help`, `-v` and `check --forget` included, goes to the full click CLI in slurmguard.cli.
`slurmguard run` (the job wrapper, before every job's first step) is parsed the same way by
slurmguard.job.launch.
"""

from __future__ import annotations

import os
import sys

_FAST = ("prolog", "epilog", "healthcheck", "check")


def _parse_fast(argv: list[str]) -> dict | None:
    """Options of a hook command, or None when click should handle the command line."""
    opts: dict = {"config_path": os.environ.get("SLURMGUARD_CONFIG") or None, "node": None,
                  "as_json": False, "dry_run": False, "hook": None, "only": ()}
    it = iter(argv)
    for arg in it:
        if arg in _FAST and opts["hook"] is None:
            opts["hook"] = arg
        elif arg in ("-c", "--config") and opts["hook"] is None:
            opts["config_path"] = next(it, None)
            if opts["config_path"] is None:
                return None
        elif arg == "--node" and opts["hook"] is not None:
            opts["node"] = next(it, None)
            if opts["node"] is None:
                return None
        elif arg == "--json" and opts["hook"] is not None:
            opts["as_json"] = True
        elif arg == "--dry-run" and opts["hook"] not in (None, "check"):
            opts["dry_run"] = True
        elif arg == "--only" and opts["hook"] == "check":
            value = next(it, None)
            if value is None:
                return None
            opts["only"] += (value,)
        else:
            return None
    return opts if opts["hook"] else None


def _as_cli_does(run_opts: dict) -> int:
    """`slurmguard run`'s exit code, its errors said as the click CLI says them."""
    from slurmguard.errors import EXIT_CHECKER, SlurmguardError
    from slurmguard.job.launch import launch

    try:
        return launch(**run_opts)
    except SlurmguardError as exc:
        sys.stdout.flush()
        print(f"slurmguard: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug in slurmguard: one line, a distinct code
        sys.stdout.flush()
        print(f"slurmguard: internal error: {type(exc).__name__}: {exc} (run with -v for "
              "the traceback)", file=sys.stderr)
        return EXIT_CHECKER


def main() -> None:
    if "gate" in sys.argv[1:4]:  # PrologSlurmctld: once per job, so skip click as well
        from slurmguard.gate.answer import fast_argv

        code = fast_argv(sys.argv[1:])
        if code is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    if "run" in sys.argv[1:4]:  # the job wrapper: every job start on every node (launch.py)
        from slurmguard.job.launch import parse_fast

        run_opts = parse_fast(sys.argv[1:], os.environ)
        if run_opts is not None:
            sys.exit(_as_cli_does(run_opts))
    opts = _parse_fast(sys.argv[1:])
    if opts is None:
        from slurmguard.cli import main as cli_main

        cli_main()
        return
    from slurmguard.node.hooks import run_hook

    try:
        code = run_hook(opts["hook"], node_flag=opts["node"], config_path=opts["config_path"],
                        only=opts["only"], as_json=opts["as_json"], dry_run=opts["dry_run"])
    except Exception as exc:  # `check` raises on a bad config: said as the click CLI says it
        if opts["hook"] != "check":
            raise
        from slurmguard.errors import EXIT_CHECKER, SlurmguardError

        sys.stdout.flush()
        if isinstance(exc, SlurmguardError):
            print(f"slurmguard: error: {exc.message}", file=sys.stderr)
            code = exc.exit_code
        else:
            print(f"slurmguard: internal error: {type(exc).__name__}: {exc} (run with -v for "
                  "the traceback)", file=sys.stderr)
            code = EXIT_CHECKER
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
