"""Pure parts of triage collect: node-name validation, host maps, the IB view of sysfs."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.helpers import sg_env

from slurmguard.errors import InputError
from slurmguard.nodeset import expand, validate_node_name
from slurmguard.triage.collect import (
    CollectOptions,
    _ib_ports,
    parse_host_map,
    resolve_targets,
    split_address,
)


def test_expand_nodes_in_order() -> None:
    assert expand("gpu[001-003],cpu7") == ["cpu7", "gpu001", "gpu002", "gpu003"]


@given(st.text(min_size=1, max_size=30))
def test_accepted_names_are_path_and_shell_safe(name: str) -> None:
    try:
        validate_node_name(name)
    except InputError as exc:
        assert "node name" in exc.message
        return
    assert not set(name) & set("/ ;$`&|<>'\"\\\n\t*?") and name[0] not in "-." and ".." not in name


@pytest.mark.parametrize("address,host,port", [
    ("gpu7", "gpu7", 22), ("127.0.0.1:2222", "127.0.0.1", 2222),
    ("[::1]:2200", "::1", 2200), ("[fe80::1]", "fe80::1", 22), ("n1.cluster", "n1.cluster", 22),
])
def test_split_address(address: str, host: str, port: int) -> None:
    assert split_address(address, 22) == (host, port)


@pytest.mark.parametrize("address", ["h:0", "h:70000", "h:x", "", "a b", "[::1]x", "-oProxy"])
def test_split_address_rejects(address: str) -> None:
    with pytest.raises(InputError, match="host address"):
        split_address(address, 22)


def test_host_map_patterns_first_match_wins() -> None:
    hm = parse_host_map(["n[1-2]=127.0.0.1:2000", "n[2-3]=10.0.0.1"])
    opts = CollectOptions(host_map=hm, port=2022, user="admin")
    t = {x.node: (x.host, x.port, x.user) for x in resolve_targets(["n1", "n2", "n3", "n4"], opts)}
    assert t == {"n1": ("127.0.0.1", 2000, "admin"), "n2": ("127.0.0.1", 2000, "admin"),
                 "n3": ("10.0.0.1", 2022, "admin"), "n4": ("n4", 2022, "admin")}
    with pytest.raises(InputError, match="NODESET=HOST"):
        parse_host_map(["n1"])


def test_ib_ports_view() -> None:
    tree = {"mlx5_0/ports/1/state": "4: ACTIVE", "mlx5_0/ports/1/counters/symbol_error": "7",
            "mlx5_0/ports/1/gids/0": "fe80::", "mlx5_0/node_guid": "abcd"}
    assert _ib_ports(tree) == {"present": True, "ports": {
        "mlx5_0/1": {"state": "4: ACTIVE", "counters/symbol_error": "7"}}}
    assert _ib_ports(None) == {"present": False, "ports": {}}


def test_cli_import_stays_light() -> None:
    """Loading the triage command (e.g. for --help) must not pull in paramiko/tqdm/tabulate."""
    code = ("import sys, slurmguard.cli.triage, slurmguard.triage.bundle; "
            "print(sorted(m for m in ('paramiko','tqdm','tabulate') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], env=sg_env(), capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "[]"
