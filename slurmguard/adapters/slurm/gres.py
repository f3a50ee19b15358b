"""The GPU count in a node's Gres, as Slurm prints it (pure; no I/O).

Shapes seen in ``scontrol show node`` (``Gres=``), ``scontrol --json show nodes`` (``gres``)
and ``sinfo --json`` (``gres.total``)::

    gpu:8                      gpu:h100:8                  gpu:a100:4(S:0-1)
    gpu:h100:4(S:0),gpu:a100:4(S:1)    gpu:8,nvme:1        gpu:h100:no_consume:8
    (null)                     ""                          gpu:a100:2(S:0,1)

Items are separated by commas outside parentheses; an item is ``name[:type][:flag...]:count``
with an optional ``(S:...)`` socket list, and the count may carry a K/M/G suffix (Slurm
accepts ``gpu:1k`` for huge counts; nobody has 1000 GPUs in a node, but it must not be
misread). Every ``gpu`` item adds up; other gres (nvme, mps, shard) are not GPUs.
"""

from __future__ import annotations

from slurmguard.lazyre import LazyPattern

_ITEM_RE = LazyPattern(r"^(?P<name>[A-Za-z0-9_\-]+)(?::[^:()]*)*?:(?P<count>\d+)(?P<suffix>[kKmMgG]?)"
                       r"(?:\([^()]*\))?$")
_BARE_RE = LazyPattern(r"^(?P<name>[A-Za-z0-9_\-]+)(?:\([^()]*\))?$")
_MULT = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def _items(text: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [i.strip() for i in out if i.strip()]


def gpu_count(gres: str) -> int | None:
    """GPUs in a Gres string; 0 when it names none, None when it cannot be read."""
    text = (gres or "").strip()
    if text.lower() in ("", "(null)", "none"):
        return 0
    total = 0
    for item in _items(text):
        m = _ITEM_RE.match(item)
        if m is None:
            bare = _BARE_RE.match(item)
            if bare is None:
                return None
            total += 1 if bare["name"] == "gpu" else 0  # `gpu` alone is one GPU
            continue
        if m["name"] == "gpu":
            total += int(m["count"]) * _MULT[m["suffix"].lower()]
    return total
