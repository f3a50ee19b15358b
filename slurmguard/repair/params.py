"""The ``[repair]`` config section, declared here once, and read once into RepairParams.

A **ladder** maps a drain's cause to an ordered list of rungs. The cause is the blast-radius
guard's cause key (:func:`slurmguard.policy.blast.cause_key`): a check name (``gpu-lost``),
an Xid class (``gpu-xid:79``; plain ``gpu-xid`` is every Xid without a ladder of its own), or
a burn-in cause (``burnin-gpu-matmul``, as burn-in's drains name it; plain ``burnin`` is every
burn-in drain). A rung is
one of :data:`RUNGS`; ``restart-service NAME`` names the systemd unit. A ladder naming an
unknown rung or cause is refused at config load with one line naming the key and the value.

Standard library only: config imports it at load.
"""

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from slurmguard.fieldtypes import Bool, Choice, Field, Float, Int, Schema, StrList

RUNGS = ("reset-gpu", "restart-service", "reboot", "power-cycle", "ticket")
# Rungs that restart the whole node: proven by a new boot id and slurmd registering again,
# and counted against repair.reboots_per_hour.
REBOOTS = ("reboot", "power-cycle")
_SERVICE = re.compile(r"[A-Za-z0-9][A-Za-z0-9@._-]{0,127}")
_METRIC = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_XID = re.compile(r"gpu-xid:[0-9]{1,4}")

# Why each default: docs/repair.md, "The default ladders". Xid classes follow NVIDIA's Xid
# catalogue: 79 fallen off the bus and 119/120 GSP errors need the node restarted; 48/63/64/
# 94/95 (ECC, row remap) and 74 (NVLink) are cleared by a GPU reset once no job holds it.
DEFAULT_LADDERS: Mapping[str, str] = MappingProxyType({
    "gpu-xid:79": "reboot, power-cycle, ticket",
    "gpu-xid:48": "reset-gpu, reboot, ticket",
    "gpu-xid:63": "reset-gpu, reboot, ticket",
    "gpu-xid:64": "reset-gpu, reboot, ticket",
    "gpu-xid:74": "reset-gpu, reboot, ticket",
    "gpu-xid:94": "reset-gpu, reboot, ticket",
    "gpu-xid:95": "reset-gpu, reboot, ticket",
    "gpu-xid:119": "reboot, power-cycle, ticket",
    "gpu-xid:120": "reboot, power-cycle, ticket",
    "gpu-xid": "reboot, ticket",
    "gpu-lost": "reboot, power-cycle, ticket",
    "gpu-count": "reboot, power-cycle, ticket",
    "gpu-ecc": "reset-gpu, reboot, ticket",
    "gpu-remap": "reset-gpu, reboot, ticket",
    "gpu-nvlink": "restart-service nvidia-fabricmanager, reboot, ticket",
    "gpu-persistence": "restart-service nvidia-persistenced, reboot, ticket",
    "ib-link": "reboot, ticket",
    "host-munge": "restart-service munge, reboot, ticket",
    "host-daemons": "reboot, ticket",
    "host-leftover-procs": "reboot, ticket",
    "gpu-thermal": "ticket",
    "host-memory": "ticket",
    "host-edac": "ticket",
    "burnin": "reboot, ticket",
})


class Rung(NamedTuple):
    name: str  # one of RUNGS
    arg: str = ""  # the service of restart-service

    def __str__(self) -> str:
        return f"{self.name} {self.arg}" if self.arg else self.name


def known_cause(cause: str) -> bool:
    """A cause a ladder may name: a check, ``gpu-xid:N``, ``burnin`` or ``burnin-METRIC``."""
    from slurmguard.checks import ALL_CHECKS  # light: check modules import no adapter

    if cause in {c.name for c in ALL_CHECKS} or cause == "burnin" or _XID.fullmatch(cause):
        return True
    return cause.startswith("burnin-") and bool(_METRIC.fullmatch(cause[len("burnin-"):]))


def parse_ladder(text: str) -> tuple[Rung, ...]:
    """``"reset-gpu, restart-service munge, reboot"`` -> rungs; ValueError names the bad one."""
    rungs: list[Rung] = []
    for item in (p.strip() for p in text.split(",")):
        name, _, arg = item.partition(" ")
        arg = arg.strip()
        if name not in RUNGS:
            raise ValueError(f"unknown rung {item!r} (rungs: {', '.join(RUNGS)})")
        if (name == "restart-service") != bool(arg) or (arg and not _SERVICE.fullmatch(arg)):
            raise ValueError(f"rung {item!r}: restart-service takes one unit name, the others none")
        rungs.append(Rung(name, arg))
    if not rungs:
        raise ValueError("an empty ladder")
    return tuple(rungs)


def _check_ladders(value: Mapping[str, str]) -> str | None:
    for cause, text in value.items():
        if not known_cause(cause):
            return (f"unknown cause {cause!r} (a check name, gpu-xid:N, burnin or "
                    "burnin-METRIC)")
        try:
            parse_ladder(text)
        except ValueError as exc:
            return f"cause {cause!r}: {exc}"
    return None


def _check_template(value: list[str]) -> str | None:
    if value and not value[0].startswith("/"):
        return "the command must start with an absolute path"
    return None


def _command(doc: str, default: list[str] | None = None) -> Field:
    return Field("list[str]", list(default or []), doc, validate=_check_template)


SECTION: Schema = {
    "mode": Choice("observe", ["observe", "act"], "observe: record what repair would do and do "
                   "nothing; act: repair (per node group with [[group]] nodes = ...)"),
    "ladders": Field("table", dict(DEFAULT_LADDERS), "cause = \"rung, rung, ...\" (rungs: "
                     + ", ".join(RUNGS) + "); a site's entries replace the defaults' of the "
                     "same cause", validate=_check_ladders),
    "max_nodes": Int(4, "nodes in repair at once, fleet-wide, at most", minimum=1),
    "max_percent": Float(5.0, "... and at most this percent of any partition or policy group "
                         "(at least 1 node)", minimum=0.0),
    "reboots_per_hour": Int(4, "reboots and power cycles started per hour, fleet-wide, at most",
                            minimum=0),
    "attempts": Int(3, "rungs taken per drain episode at most (then ticket)", minimum=1),
    "lemon_repairs": Int(1, "a node repaired this many times ...", minimum=1),
    "lemon_window": Float(7 * 86400.0, "... within this many seconds is a lemon: no more "
                          "repairs until a person returns it", minimum=60.0),
    "shared_hold": Float(86400.0, "a cause with a fleet alert (a shared cause) updated within "
                         "this many seconds is not repaired node by node", minimum=0.0),
    "settle": Float(900.0, "seconds a reboot or power cycle may take to show a new boot id "
                    "and slurmd registered (then: a transient failure)", minimum=1.0),
    "verify_burnin": Bool(True, "verify a repaired node with a quick burn-in too (`burnin "
                          "worker --level quick` in the node's repair reservation, judged "
                          "against its peers as the nightly burn-in judges): it returns only "
                          "when its health checks and the burn-in pass"),
    "burnin_timeout": Float(900.0, "seconds the quick burn-in may take from submission to "
                            "verdict (its sbatch --deadline; --time is half of it; then: a "
                            "transient failure)", minimum=120.0),
    "command_timeout": Float(300.0, "seconds a rung or ticket command may run before it is "
                             "killed (a transient failure)", minimum=1.0),
    "evidence_dir": Field("path", "/var/lib/slurmguard/repair", "evidence bundles, one "
                          "directory per repair, collected before the first rung"),
    "reset_gpu": _command("argv of the GPU reset, run from serve's host; {node} and {gpus} "
                          "(e.g. 0,3) are filled in; empty: the rung is skipped as unavailable"),
    "restart_service": _command("argv of a service restart on the node; {node} and {service}",
                                ["/usr/bin/ssh", "{node}", "/usr/bin/systemctl", "restart",
                                 "{service}"]),
    "power_cycle": _command("argv of a power cycle (IPMI, Redfish); {node}; empty: skipped"),
    "ticket": _command("argv that hands the node to people; {node}, {cause}, {history}, "
                       "{evidence}; empty: the ticket is the ledger event only"),
    "pause_file": Field("path", "/var/lib/slurmguard/repair.paused", "`slurmguard repair "
                        "pause` creates it, `resume` removes it; while it exists no rung starts"),
    "partitions": StrList([], "repair only nodes of these partitions (empty: all)"),
}


def _default(key: str) -> Any:
    return SECTION[key].default  # type: ignore[union-attr]


class RepairParams(NamedTuple):
    """The limits and ladders the pure plan needs (commands stay in the section)."""

    ladders: Mapping[str, tuple[Rung, ...]]
    max_nodes: int = _default("max_nodes")
    max_percent: float = _default("max_percent")
    reboots_per_hour: int = _default("reboots_per_hour")
    attempts: int = _default("attempts")
    lemon_repairs: int = _default("lemon_repairs")
    lemon_window: float = _default("lemon_window")
    settle: float = _default("settle")
    verify_burnin: bool = _default("verify_burnin")
    burnin_timeout: float = _default("burnin_timeout")

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> "RepairParams":
        ladders = {c: parse_ladder(t) for c, t in (section.get("ladders") or {}).items()}
        names = set(cls._fields) - {"ladders"}
        return cls(MappingProxyType(ladders), **{k: v for k, v in section.items() if k in names})

    def ladder(self, cause: str) -> tuple[Rung, ...]:
        """The ladder of ``cause``: its own, else its family's (``gpu-xid``, ``burnin``)."""
        if cause in self.ladders:
            return self.ladders[cause]
        return self.ladders.get(family(cause), ())


def available_rungs(section: Mapping[str, Any]) -> frozenset[str]:
    """The rungs this config can take: reboot and ticket always; a command rung when its
    argv is set (``repair.reset_gpu``, ``restart_service``, ``power_cycle``)."""
    have = {"reboot", "ticket"}
    for rung, key in (("reset-gpu", "reset_gpu"), ("restart-service", "restart_service"),
                      ("power-cycle", "power_cycle")):
        if section.get(key):
            have.add(rung)
    return frozenset(have)


def family(cause: str) -> str:
    """``gpu-xid:79`` -> ``gpu-xid``, ``burnin-gpu-matmul`` -> ``burnin``; a check: itself."""
    if cause.startswith("burnin-"):
        return "burnin"
    return cause.partition(":")[0]
