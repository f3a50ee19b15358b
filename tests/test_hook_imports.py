"""What the in-process hook path imports, measured the way the issue asks (-X importtime):
no ClusterShell for the common [[group]] patterns, no socket, no uuid."""

from __future__ import annotations

import uuid

from helpers import run_sg, sg_env

from slurmguard.record import uuid4_hex

TRIMMED = ("ClusterShell", "socket", "uuid", "click", "sqlalchemy", "inspect_never")


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
    env = sg_env(SLURMD_NODENAME="n3", SLURMGUARD_CONFIG=str(cfg), PYTHONPROFILEIMPORTTIME="1")
    p = run_sg("prolog", "--json", env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in p.stderr.splitlines()
                if line.startswith("import time:")}
    assert "slurmguard.hooks" in imported
    assert sorted(m for m in imported if m.split(".")[0] in TRIMMED) == []
    assert '"expected_count": 0' not in p.stdout  # the group applied: gpu-count had nothing to expect
    assert "gpu-count" in p.stdout


def test_record_ids_are_uuid4_hex():
    ids = {uuid4_hex() for _ in range(2000)}
    assert len(ids) == 2000
    for h in list(ids)[:200]:
        u = uuid.UUID(hex=h)
        assert u.version == 4 and u.variant == uuid.RFC_4122 and u.hex == h
