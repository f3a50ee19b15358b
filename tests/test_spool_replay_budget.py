"""Spool replay has its own budget (``hooks.replay_timeout``), inside the hook's: with a real
serve that is slow but up (every request held 1 s on its way, as at 128 nodes after an
outage), a backlog of 400 records replays fully in one delivery, where what the send left of
``report_timeout`` (2 s) replayed none; and replay never runs past the hook's end."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
from support.acceptloop import AcceptLoop
from support.sgserve import Serve, new_port, new_store, write_config

from slurmguard import config
from slurmguard.adapters import spool as spool_files
from slurmguard.contract import CheckResult, Health
from slurmguard.node import delivery
from slurmguard.node.record import make_record
from slurmguard.store import Store

DELAY, BACKLOG = 1.0, 400  # 2 replay batches of 200, each held DELAY on its way


class SlowLink:
    """A TCP relay to serve that holds each new connection ``delay`` seconds before passing
    it on: a slow network or a loaded serve, with the real serve behind it."""

    def __init__(self, target: int, delay: float) -> None:
        self.port, self.target, self.delay = new_port(), target, delay
        self.loop = AcceptLoop(socket.create_server(("127.0.0.1", self.port)), lambda conn:
                               threading.Thread(target=self._relay, args=(conn,),
                                                daemon=True).start())

    def _relay(self, conn: socket.socket) -> None:
        time.sleep(self.delay)
        try:
            up = socket.create_connection(("127.0.0.1", self.target))
        except OSError:  # serve stopped at teardown: the client sees the connection close
            conn.close()
            return
        with conn, up:
            def pipe(a: socket.socket, b: socket.socket) -> None:
                try:
                    while data := a.recv(65536):
                        b.sendall(data)
                    b.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
            t = threading.Thread(target=pipe, args=(up, conn), daemon=True)
            t.start()
            pipe(conn, up)
            t.join(30)

    def stop(self) -> None:
        self.loop.close()


def _rec(node: str) -> dict:
    return make_record(node, "prolog", [CheckResult("gpu-count", Health.HEALTHY)], "pass", "")


@pytest.fixture
def slow_serve(tmp_path: Path):
    url = new_store(tmp_path)
    port = new_port()
    serve = Serve(write_config(tmp_path, store_url=url, port=port), port, "--no-policy").start()
    link = SlowLink(port, DELAY)

    def cfg(**hooks: float) -> config.Config:
        extra = "".join(f"{k} = {v}\n" for k, v in hooks.items())
        path = write_config(tmp_path, store_url=url, port=port, report_timeout=2.0,
                            extra=extra)
        text = path.read_text().replace(f"127.0.0.1:{port}/ingest", f"127.0.0.1:{link.port}/ingest")
        path.write_text(text)
        return config.load(str(path), env={})

    spool = tmp_path / "spool"
    spool.mkdir(mode=0o700)
    for i in range(BACKLOG):
        spool_files.write(_rec(f"n{i % 9}"), str(spool), 100000)
    yield cfg, str(spool), url
    link.stop()
    serve.stop()


def test_backlog_replays_fully_when_serve_is_slow_but_up(slow_serve) -> None:
    cfg, spool, url = slow_serve
    t0 = time.monotonic()
    assert delivery.deliver(_rec("n1"), cfg(replay_timeout=30.0)) == "sent"
    took = time.monotonic() - t0
    left = len(spool_files.pending(spool))
    print(f"\none delivery with {BACKLOG} spooled, every request held {DELAY} s: "
          f"{BACKLOG - left} replayed in {took:.1f} s")
    assert left == 0
    store = Store.open(url=url)
    assert store.counts()["runs"] == BACKLOG + 1  # each once
    store.close()


def test_replay_stops_at_the_hooks_end_and_zero_turns_it_off(slow_serve) -> None:
    cfg, spool, _ = slow_serve
    assert delivery.deliver(_rec("n1"), cfg(replay_timeout=0.0)) == "sent"
    assert len(spool_files.pending(spool)) == BACKLOG  # no replay at all
    t0 = time.monotonic()
    until = t0 + DELAY + 0.5  # the send (DELAY) and half a second: the hook's budget ends
    assert delivery.deliver(_rec("n2"), cfg(replay_timeout=15.0), until=until) == "sent"
    over = time.monotonic() - until
    assert over < 0.5, over  # one POST's timeout is cut to what is left, not replay_timeout
    assert len(spool_files.pending(spool)) == BACKLOG  # nothing settled in that half second
