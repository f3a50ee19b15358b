"""What the in-process hook path imports, measured the way the issue asks (-X importtime):
no ClusterShell for the common [[group]] patterns, no socket, no uuid, and no pynvml even
when it reads 8 (stand-in) GPUs: the gather binds NVML itself (adapters/nvml_lib.py)."""

from __future__ import annotations

import uuid

from fakehw.nvml import build_fake_nvml, default_config, write_config
from helpers import run_sg, sg_env

from slurmguard.record import uuid4_hex

TRIMMED = ("ClusterShell", "socket", "uuid", "click", "sqlalchemy", "pynvml")


def test_prolog_with_groups_imports_no_clustershell_socket_or_uuid(tmp_path):
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f"""
[hooks]
state_dir = "{tmp_path}/s"
prolog = ["gpu-count", "host-cpus", "fs-mount"]
[[group]]
nodes = "n[1-4],gpu[001-064]"
checks.gpu.expected_count = 0
""")
    libdir = build_fake_nvml(tmp_path / "lib")
    write_config(tmp_path / "nvml.json", default_config(8))
    env = sg_env(SLURMD_NODENAME="n3", SLURMGUARD_CONFIG=str(cfg), PYTHONPROFILEIMPORTTIME="1",
                 LD_LIBRARY_PATH=str(libdir), FAKE_NVML_CONFIG=str(tmp_path / "nvml.json"))
    p = run_sg("prolog", "--json", env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in p.stderr.splitlines()
                if line.startswith("import time:")}
    assert "slurmguard.hooks" in imported
    assert sorted(m for m in imported if m.split(".")[0] in TRIMMED) == []
    assert "slurmguard.adapters.nvml_lib" in imported  # NVML was read, without pynvml
    import json

    gpu = {r["name"]: r for r in json.loads(p.stdout)["results"]}["gpu-count"]
    assert gpu["details"]["count"] == 8, gpu  # the 8 stand-in GPUs were read
    assert gpu["details"]["expected"] == 0  # and the [[group]] applied to n3


def test_record_ids_are_uuid4_hex():
    ids = {uuid4_hex() for _ in range(2000)}
    assert len(ids) == 2000
    for h in list(ids)[:200]:
        u = uuid.UUID(hex=h)
        assert u.version == 4 and u.variant == uuid.RFC_4122 and u.hex == h
