"""Slurm's configuration as slurmguard needs it: `scontrol show config` (the live config of
the running slurmctld) and the slurm.conf file itself (when no controller answers).

Both parsers are pure and return one mapping with lower-case keys, so callers ask
``conf.get("prologepilogtimeout")`` whatever the source. Used by `slurmguard doctor`
(does slurm.conf run our hooks?) and `slurmguard setup` (SlurmUser, PluginDir, PlugStackConfig).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping

from slurmguard.errors import ParseError

DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
# Lines of slurm.conf that describe records (one node, one partition), not global settings.
_RECORDS = {"nodename", "partitionname", "nodeset", "frontendname", "downnodes", "switchname"}
_SHOW_LINE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9_\[\]()]*)\s+=\s?(?P<value>.*)$")


def slurm_conf_path(env: Mapping[str, str] | None = None) -> str:
    """$SLURM_CONF, else /etc/slurm/slurm.conf (what every Slurm command reads)."""
    env = os.environ if env is None else env
    return env.get("SLURM_CONF") or DEFAULT_SLURM_CONF


_INDEXED = re.compile(r"^(?P<base>[A-Za-z][A-Za-z0-9_]*)\[(?P<i>\d+)\]$")


def parse_show_config(text: str) -> dict[str, str]:
    """`scontrol show config` -> {lower-case key: value}; ``(null)`` becomes ``""``.

    Keys that hold several scripts print one line per script on 24.11 (``Prolog[0] = ...``,
    ``Epilog[1] = ...``; 22.05 prints ``Prolog = ...``): they come back under the plain key
    too, comma-separated in index order, as slurm.conf writes them (``prolog``, and
    ``prolog[0]`` as printed; 22.05's ``SlurmctldHost[0]`` likewise gives ``slurmctldhost``).
    """
    out: dict[str, str] = {}
    indexed: dict[str, dict[int, str]] = {}
    for line in text.splitlines():
        m = _SHOW_LINE.match(line.rstrip())
        if not m:
            continue
        value = m.group("value").strip()
        value = "" if value == "(null)" else value
        key = m.group("key")
        many = _INDEXED.match(key)
        if many and value:
            indexed.setdefault(many["base"].lower(), {})[int(many["i"])] = value
        out[key.lower()] = value
    for key, values in indexed.items():
        out.setdefault(key, ",".join(values[i] for i in sorted(values)))
    if not out:
        raise ParseError("scontrol show config: no 'Key = value' lines in the output")
    return out


def parse_slurm_conf(text: str, *, base_dir: str = "/etc/slurm", _depth: int = 0) -> dict[str, str]:
    """slurm.conf text -> {lower-case key: value} of its global settings (the last one wins).

    Follows ``include FILE`` lines (relative to ``base_dir``); record lines (NodeName=...,
    PartitionName=...) are skipped; keys are case-insensitive as in Slurm.
    """
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.lower().startswith("include "):
            if _depth >= 8:
                raise ParseError(f"slurm.conf: include nested too deep at {line!r}")
            target = line.split(None, 1)[1].strip()
            path = target if target.startswith("/") else os.path.join(base_dir, target)
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    out.update(parse_slurm_conf(fh.read(), base_dir=base_dir, _depth=_depth + 1))
            except OSError as exc:
                raise ParseError(f"slurm.conf: include {path}: {exc.strerror}") from None
            continue
        try:
            tokens = shlex.split(line)
        except ValueError:
            tokens = line.split()
        first = tokens[0].split("=", 1)[0].lower() if tokens else ""
        if first in _RECORDS:
            continue
        for tok in tokens:
            key, sep, value = tok.partition("=")
            if sep:
                out[key.strip().lower()] = value.strip()
    return out


def read_slurm_conf(path: str) -> dict[str, str]:
    """Read and parse a slurm.conf file; ParseError with the path when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError as exc:
        raise ParseError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_slurm_conf(text, base_dir=os.path.dirname(os.path.abspath(path)))


def scheduler_parameters(conf: Mapping[str, str]) -> list[str]:
    return [p.strip().lower() for p in conf.get("schedulerparameters", "").split(",") if p.strip()]


def slurm_user(conf: Mapping[str, str]) -> str:
    """SlurmUser without scontrol's ``(uid)`` suffix; ``root`` when unset."""
    return (conf.get("slurmuser") or "root").split("(", 1)[0].strip() or "root"


def plugstack_path(conf: Mapping[str, str], slurm_conf: str) -> str:
    """PlugStackConfig, else plugstack.conf beside slurm.conf (Slurm's own default)."""
    value = conf.get("plugstackconfig", "")
    if value:
        return value if value.startswith("/") else os.path.join(os.path.dirname(slurm_conf), value)
    return os.path.join(os.path.dirname(slurm_conf), "plugstack.conf")


def timeout_seconds(value: str, key: str = "PrologEpilogTimeout") -> float | None:
    """A hook time limit (``60``, ``60 sec``) as seconds; None for no limit (unset, 65534 =
    INFINITE16, N/A). ``key`` names the setting in the error."""
    v = value.strip().lower()
    if v in ("", "n/a", "65534", "unlimited", "infinite"):
        return None
    m = re.match(r"^(\d+)", v)
    if not m:
        raise ParseError(f"{key}: expected seconds, got {value!r}")
    return float(m.group(1))
