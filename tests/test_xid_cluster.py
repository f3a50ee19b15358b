"""Kernel-log fault shapes on a real Slurm cluster: the prolog that slurmd runs reads each
node's kernel-log fixture and drains the node with a reason naming the device.

- n1: a fatal NVSwitch SXid -> `slurmguard: gpu-xid: NVSwitch 3 (PCI 0000:c6:00) SXid 20034 ...`
- n2: a bare "GPU has fallen off the bus" line (no Xid) -> `... GPU 5 (PCI 0000:ab:00): ...`
- n3: nothing -> runs the job, stays up.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from fakehw.kmsg import DEFAULT_GPUS, append_kmsg, write_gpu_tree
from fakehw.nvml import build_fake_nvml, default_config, write_config
from support.helpers import REPO, sg_argv
from support.slurmcluster import write_hook_script

pytestmark = pytest.mark.slurm
NODES = ("n1", "n2", "n3")


def test_sxid_and_bare_bus_lines_drain_their_nodes(slurm_cluster_factory, tmp_path: Path) -> None:
    root = tmp_path / "fleet"
    libdir = build_fake_nvml(tmp_path / "fakenvml")
    (root / "nvml").mkdir(parents=True)
    gpus = write_gpu_tree(root / "gpus")
    groups = []
    for n in NODES:
        write_config(root / "nvml" / f"{n}.json", default_config(8))
        (root / f"{n}.boot_id").write_text(str(uuid.uuid4()) + "\n")
        (root / f"{n}.kmsg").write_text("")
        groups.append(f'[[group]]\nnodes = "{n}"\nhooks.state_dir = "{root}/state/{n}"\n'
                      f'checks.xid.file = "{root}/{n}.kmsg"\n'
                      f'checks.xid.boot_id_path = "{root}/{n}.boot_id"\n')
    cfg = root / "slurmguard.toml"
    cfg.write_text(f'[hooks]\nbudget = 15.0\nlog_file = "{root}/hooks.log"\n'
                   f'[checks.gpu]\nexpected_count = 8\n'
                   f'[checks.xid]\nsource = "file"\nnvidia_proc_root = "{gpus}"\n'
                   + "\n".join(groups))
    env = {"PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}", "SLURMGUARD_CONFIG": str(cfg),
           "LD_LIBRARY_PATH": str(libdir), "FAKE_NVML_CONFIG": str(root / "nvml"),
           "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    c = slurm_cluster_factory(nodes=3, prolog=write_hook_script(root / "prolog", sg_argv("prolog"), env))

    append_kmsg(root / "n1.kmsg", "nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 20034, Fatal, "
                                  "Link 31 LTSSM Fault Up")
    append_kmsg(root / "n2.kmsg", f"NVRM: GPU {DEFAULT_GPUS[5]}: GPU has fallen off the bus.")
    jobs = {n: c.sbatch("#!/bin/sh\ntrue\n", "-w", n, "--output=/dev/null") for n in NODES}
    want = {
        "n1": "slurmguard: gpu-xid: NVSwitch 3 (PCI 0000:c6:00) SXid 20034: NVLink LTSSM fault (fatal)",
        "n2": "slurmguard: gpu-xid: GPU 5 (PCI 0000:ab:00): GPU has fallen off the bus",
    }
    for n, reason in want.items():
        info = c.wait_node(n, lambda i: i.drained, timeout=120, what=f"{n} drained")
        assert info.reason.startswith(reason), (n, info.reason)
    assert c.wait_job(jobs["n3"], timeout=120)["JobState"] == "COMPLETED"
    assert not c.node("n3").drained
    for n in ("n1", "n2"):
        c.run("scancel", jobs[n], check=False)
