"""Nodes list several ingest URLs (``hooks.report_urls``, serve replicas): the real
``deliver()`` and drain permit try ``report_url`` then each of ``report_urls`` in order, each
with its share of ``hooks.report_timeout``, against a real serve; a bad URL in the list is a
one-line config error naming the key and the value.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from support.replicas import big_partition
from support.sgserve import Serve, new_port, new_store, write_config

from slurmguard import config
from slurmguard.contract import CheckResult, Health
from slurmguard.errors import ConfigError
from slurmguard.node.delivery import deliver
from slurmguard.node.record import make_record
from slurmguard.store import Store


def _record(node: str = "n1") -> dict:
    return make_record(node, "prolog", [CheckResult("fs-mount", Health.HEALTHY, "")], "pass", "")


def _hanging() -> socket.socket:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s


def _dead_url() -> str:
    return f"http://127.0.0.1:{new_port()}/ingest"  # nobody listens: refused at once


def _setup(tmp_path: Path, first: str, timeout: float = 2.0):  # noqa: ANN202
    url = new_store(tmp_path)
    port = new_port()
    cfg_path = write_config(tmp_path, store_url=url, port=port, report_timeout=timeout,
                            extra=f'report_urls = ["http://127.0.0.1:{port}/ingest"]')
    text = cfg_path.read_text().replace(f'report_url = "http://127.0.0.1:{port}/ingest"',
                                        f'report_url = "{first}"')
    cfg_path.write_text(text)
    serve = Serve(cfg_path, port, env={"SLURM_CONF": str(tmp_path / "none")}).start()
    return url, config.load(str(cfg_path), env={}), serve


def test_a_dead_first_replica_hands_the_record_to_the_next(tmp_path: Path) -> None:
    url, cfg, serve = _setup(tmp_path, _dead_url())
    try:
        rec = _record()
        assert deliver(rec, cfg) == "sent"
        store = Store.open(url=url)
        try:
            assert store.counts()["runs"] == 1
        finally:
            store.close()
        assert not list((tmp_path / "spool").glob("*.json"))
    finally:
        serve.stop()


def test_a_hanging_first_replica_gets_only_its_share_of_the_timeout(tmp_path: Path) -> None:
    hang = _hanging()
    try:
        url, cfg, serve = _setup(tmp_path, f"http://127.0.0.1:{hang.getsockname()[1]}/ingest")
        try:
            t0 = time.monotonic()
            assert deliver(_record(), cfg) == "sent"
            took = time.monotonic() - t0
            assert 0.9 <= took < 2.0, took  # 1 s (half of 2 s) on the hanging one, then sent
        finally:
            serve.stop()
    finally:
        hang.close()


def test_every_replica_down_spools(tmp_path: Path) -> None:
    url, cfg, serve = _setup(tmp_path, _dead_url())
    serve.stop()
    assert deliver(_record(), cfg) == "spooled"
    assert len(list((tmp_path / "spool").iterdir())) >= 1


def test_a_bad_url_in_the_list_is_a_one_line_config_error(tmp_path: Path) -> None:
    f = tmp_path / "sg.toml"
    f.write_text('[hooks]\nreport_urls = ["http://ctl1:8742/ingest", "ctl2:8742"]\n')
    with pytest.raises(ConfigError) as exc:
        config.load(str(f), env={})
    msg = str(exc.value)
    assert "hooks.report_urls" in msg and "'ctl2:8742'" in msg and "\n" not in msg


@pytest.mark.slurm
def test_the_drain_permit_asks_the_next_replica(slurm_cluster_factory, tmp_path: Path) -> None:
    from slurmguard.drainguard import ServePermit

    conf = big_partition(slurm_cluster_factory)
    url = new_store(tmp_path)
    port = new_port()
    cfg_path = write_config(tmp_path, store_url=url, port=port,
                            extra=f'report_urls = ["http://127.0.0.1:{port}/ingest"]')
    cfg_path.write_text(cfg_path.read_text().replace(
        f'report_url = "http://127.0.0.1:{port}/ingest"', f'report_url = "{_dead_url()}"'))
    serve = Serve(cfg_path, port, env={"SLURM_CONF": conf}).start()
    try:
        permit = ServePermit(config.load(str(cfg_path), env={}))
        assert permit.ask("m001", "fs-mount", "slurmguard: fs-mount: gone") == (True, "allowed")
        store = Store.open(url=url)
        try:
            assert [e.node for e in store.nodes.events(kinds=["permit"])] == ["m001"]
        finally:
            store.close()
    finally:
        serve.stop()
