"""Small pure parts of the admin commands: who is acting, --since, --reason."""

from __future__ import annotations

import pwd

import pytest

from slurmguard.cli._common import ago, parse_since
from slurmguard.errors import InputError
from slurmguard.triage.admin import admin_name, check_reason

NOW = 1_800_000_000.0


def test_admin_name_prefers_sudo_user() -> None:
    assert admin_name({"SUDO_USER": "alice"}) == "alice"
    me = admin_name({})
    assert me and me != "alice"
    # sudo from root itself is still root's login name, not "root" from SUDO_USER
    assert admin_name({"SUDO_USER": "root"}) == me
    assert me in {p.pw_name for p in pwd.getpwall()} or me.startswith("uid")


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("30m", 1800), ("1h", 3600),
                                          ("7d", 7 * 86400), ("2w", 14 * 86400), ("1.5h", 5400)])
def test_since_durations(text: str, seconds: float) -> None:
    assert parse_since(text, NOW) == NOW - seconds


def test_since_iso() -> None:
    assert parse_since("2027-01-15T08:00:00Z") == parse_since("2027-01-15T08:00:00")
    assert parse_since("2027-01-15T09:00:00+01:00") == parse_since("2027-01-15T08:00:00")
    with pytest.raises(InputError, match="--since"):
        parse_since("last tuesday")


def test_reason_is_one_short_line() -> None:
    assert check_reason("  fan\n swap ") == "fan swap"
    for bad in ("", "   ", "x" * 201, "bell\x07"):
        with pytest.raises(InputError, match="--reason"):
            check_reason(bad)


def test_ago() -> None:
    assert ago(None) == "-"
    assert ago(NOW - 42, NOW) == "42s ago" and ago(NOW - 7200, NOW) == "2h ago"
