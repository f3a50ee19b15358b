"""The one error hierarchy of slurmguard.

Every expected failure is a :class:`SlurmguardError` subclass with a one-line message and an
exit code; the CLI turns it into ``slurmguard: error: <message>`` and that code in one place
(``slurmguard.cli``). Exit codes are part of the documented contract (docs/cli.md).
"""

from __future__ import annotations

from collections.abc import Sequence

# Exit codes, documented in docs/cli.md and docs/hooks.md.
EXIT_OK = 0
EXIT_UNHEALTHY = 1  # a node fault was found (and, in hooks, the node was drained)
EXIT_USAGE = 2  # bad command line (click's own code)
EXIT_CONFIG = 3  # malformed or unreadable configuration
EXIT_EXTERNAL = 4  # an external command (scontrol, ssh, ...) failed or timed out
EXIT_STORE = 5  # the node-state store is unreachable or of an unknown schema
EXIT_INPUT = 6  # bad input: garbage from a tool, a torn checkpoint, a hostile name, an unknown node, job or state, a node set over the bound
EXIT_REFUSED = 7  # an action was refused by policy (e.g. resume of a lemon without --force, a user outside admin.groups)
EXIT_CHECKER = 8  # slurmguard itself failed (never a node fault)


class SlurmguardError(Exception):
    """Base class: an expected failure with a one-line message."""

    exit_code = EXIT_CHECKER

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ConfigError(SlurmguardError):
    """Configuration that cannot be read or does not validate; names the key path."""

    exit_code = EXIT_CONFIG


class CommandError(SlurmguardError):
    """An external command failed: carries argv, return code and stderr."""

    exit_code = EXIT_EXTERNAL

    def __init__(
        self,
        argv: Sequence[str],
        rc: int | None,
        stderr: str = "",
        *,
        timed_out: bool = False,
        timeout: float | None = None,
    ) -> None:
        self.argv = list(argv)
        self.rc = rc
        self.stderr = stderr
        self.timed_out = timed_out
        self.timeout = timeout
        tool = self.argv[0] if self.argv else "?"
        if timed_out:
            msg = f"{tool}: timed out after {timeout:g}s"
        elif rc is None:
            msg = f"{tool}: could not start: {stderr.strip()}"
        else:
            last = stderr.strip().splitlines()[-1] if stderr.strip() else "no error output"
            msg = f"{tool}: exited {rc}: {last}"
        super().__init__(msg)


class ParseError(SlurmguardError):
    """Output of an external tool (or another input) that cannot be understood."""

    exit_code = EXIT_INPUT


class InputError(SlurmguardError):
    """Bad user input: a hostile node name, a reason too long, a torn checkpoint."""

    exit_code = EXIT_INPUT


class StoreError(SlurmguardError):
    """The node-state store is down, unreadable, or of a newer schema.

    ``transient``: True when trying again later may succeed (locked, down, unreachable),
    False for bad data or a bug (serve then writes the requests of a failed batch one by one).
    """

    exit_code = EXIT_STORE
    transient = False


class RefusedError(SlurmguardError):
    """An action refused by policy or ownership rules."""

    exit_code = EXIT_REFUSED


class Unsupported(SlurmguardError):
    """A data source does not exist on this node (no NVML library, no InfiniBand).

    Checks reading such a source report ``unsupported``, never ``unhealthy``.
    """

    exit_code = EXIT_OK
