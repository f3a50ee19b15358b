"""gpu-count's expected count from the node's Gres in Slurm, when the config sets none.

The Gres shapes are parsed in a table and by property; the hook path runs for real: the
healthcheck (which asks Slurm anyway) reads the node's Gres from a stand-in sinfo printing the
record real `sinfo -h -N -n NAME -O` prints for it (the hooks' one-node read), judges the
stand-in NVML's GPUs against it and saves it; the prolog afterwards, which does not ask Slurm,
judges against the saved count. A stand-in scontrol logs the drain.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from fakehw.nvml import build_fake_nvml, default_config, nvml_env
from fakehw.nvml import write_config as write_nvml
from hypothesis import given, settings
from hypothesis import strategies as st
from support.helpers import sg_argv, sg_env

from slurmguard.adapters.slurm.gres import gpu_count
from slurmguard.adapters.slurm.parse import node_info_from_show, parse_show_node_oneliner


@pytest.mark.parametrize("gres,count", [
    ("gpu:8", 8), ("gpu:h100:8", 8), ("gpu:a100:4(S:0-1)", 4), ("gpu:a100:2(S:0,1)", 2),
    ("gpu:h100:4(S:0),gpu:a100:4(S:1)", 8), ("gpu:8,nvme:1", 8), ("nvme:2,gpu:h100:8(S:0-1)", 8),
    ("gpu:h100:no_consume:8", 8), ("mps:400,gpu:2", 2), ("shard:16", 0), ("(null)", 0), ("", 0),
    ("gpu", 1), ("gpu:1k", 1024), ("gpu:h100:x", None), ("gpu:(S:0", None), ("gpu:8)", None),
])
def test_gres_shapes(gres: str, count: int | None) -> None:
    assert gpu_count(gres) == count


_type = st.from_regex(r"[a-z][a-z0-9_]{0,9}", fullmatch=True).filter(lambda t: t != "gpu")
_item = st.tuples(st.sampled_from(["gpu", "nvme", "mps", "shard"]),
                  st.one_of(st.none(), _type), st.integers(0, 64),
                  st.one_of(st.none(), st.sampled_from(["(S:0)", "(S:0-1)", "(S:0,1)"])))


@given(items=st.lists(_item, min_size=1, max_size=4))
@settings(max_examples=300, deadline=None)
def test_gres_sum_of_gpu_items(items: list[tuple[str, str | None, int, str | None]]) -> None:
    text = ",".join(f"{name}{':' + t if t else ''}:{n}{sockets or ''}"
                    for name, t, n, sockets in items)
    assert gpu_count(text) == sum(n for name, _, n, _ in items if name == "gpu")


@given(st.text(max_size=60))
@settings(max_examples=300, deadline=None)
def test_gres_parser_never_raises(text: str) -> None:
    assert gpu_count(text) is None or gpu_count(text) >= 0


def test_show_node_record_carries_gres() -> None:
    line = ("NodeName=gpu017 Arch=x86_64 CoresPerSocket=56 CPUAlloc=0 CPUTot=224 "
            "Gres=gpu:h100:8(S:0-1) NodeAddr=gpu017 State=IDLE Partitions=gpu\n")
    (n,) = [node_info_from_show(f) for f in parse_show_node_oneliner(line)]
    assert n.gres == "gpu:h100:8(S:0-1)" and gpu_count(n.gres) == 8


SHOW = ("NodeName=n1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.01 "
        "AvailableFeatures=(null) ActiveFeatures=(null) Gres={gres} NodeAddr=n1 NodeHostName=n1 "
        "Version=24.11.5 OS=Linux 6.1.0 #1 SMP RealMemory=1000 AllocMem=0 State={state} "
        "Partitions=gpu CfgTRES=cpu=2,mem=1000M,billing=2 {reason}\n")


def _site(tmp: Path, gres: str, gpus: int, state: str = "IDLE", reason: str = "") -> dict[str, str]:
    """Config, stand-in sinfo (prints the node's ``-O`` record), stand-in scontrol (prints
    SHOW, logs updates) and stand-in NVML with ``gpus``."""
    tmp.mkdir(parents=True, exist_ok=True)
    show = tmp / "show.txt"
    show.write_text(SHOW.format(gres=gres, state=state, reason=reason))
    scontrol = tmp / "scontrol"
    scontrol.write_text(f"#!/bin/sh\nif [ \"$1\" = show ]; then cat {show}; else "
                        f"echo \"$@\" >>{tmp / 'updates.log'}; fi\n")
    scontrol.chmod(0o755)
    record = tmp / "sinfo.txt"
    record.write_text(f"n1|{state.lower()}|Unknown|Unknown|{gres}|gpu|(null)|(null)|"
                      f"{reason or 'none'}\n")
    sinfo = tmp / "sinfo"
    sinfo.write_text(f"#!/bin/sh\ncat {record}\n")
    sinfo.chmod(0o755)
    nvml = write_nvml(tmp / "nvml.json", default_config(gpus))
    cfg = tmp / "sg.toml"
    cfg.write_text(f"""
[hooks]
state_dir = "{tmp / 'state'}"
log_file = "{tmp / 'hooks.log'}"
spool_dir = "{tmp / 'spool'}"
healthcheck = ["gpu-count"]
prolog = ["gpu-count"]
[slurm]
scontrol = "{scontrol}"
sinfo = "{sinfo}"
""")
    return sg_env(SLURMGUARD_CONFIG=str(cfg), SLURMD_NODENAME="n1",
                  **nvml_env(build_fake_nvml(tmp / "lib"), nvml))


def _hook(hook: str, env: dict[str, str]) -> dict:
    out = subprocess.run(sg_argv(hook, "--json"), env=env, capture_output=True, text=True,
                         timeout=60)
    record = json.loads(out.stdout)
    (r,) = [c for c in record["results"] if c["name"] == "gpu-count"]
    return r


def test_missing_gpu_against_slurm_gres_then_prolog_from_saved_count(tmp_path: Path) -> None:
    env = _site(tmp_path, "gpu:h100:8(S:0-1)", gpus=7)
    hc = _hook("healthcheck", env)
    assert (hc["health"], hc["reason"]) == ("unhealthy", "found 7 of 8 GPUs")
    assert hc["details"]["expected_from"] == "slurm gres"
    assert "state=drain" in (tmp_path / "updates.log").read_text()
    # the prolog does not ask Slurm (scontrol gone): the saved Gres count still holds
    (tmp_path / "scontrol").unlink()
    pro = _hook("prolog", env)
    assert (pro["health"], pro["reason"]) == ("unhealthy", "found 7 of 8 GPUs")


def test_full_node_healthy_and_no_gres_not_checked(tmp_path: Path) -> None:
    full = _hook("healthcheck", _site(tmp_path / "a", "gpu:8", gpus=8))
    assert full["health"] == "healthy" and full["details"]["expected"] == 8
    r = _hook("healthcheck", _site(tmp_path / "b", "(null)", gpus=7))
    assert r["health"] == "healthy" and r["details"]["expected"] is None
