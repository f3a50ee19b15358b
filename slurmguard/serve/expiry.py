"""serve's expiry thread: on the leader, every ``store.retention.interval`` seconds, delete
what ``store.retention`` no longer keeps (slurmguard/store/retention.py).

One replica expires (the leader, like the policy pass), in small transactions with pauses
between them, so that ingest on every replica goes on while it runs; a pass stops between
transactions when serve stops or the replica loses leadership, and the next leader's pass
picks up where the rows stand (expiry keeps no state of its own).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from slurmguard.errors import SlurmguardError

log = logging.getLogger("slurmguard.serve")
FIRST_DELAY = 60.0  # seconds after start before the first pass: serve's start comes first


class Expiry:
    def __init__(self, store: Any, policy: Any, leader: Any) -> None:
        self.store, self.policy, self.leader = store, policy, leader
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0
        self.last: dict[str, Any] | None = None  # the last pass's ExpiryStats.as_dict()

    def start(self, first_delay: float = FIRST_DELAY) -> None:
        self._thread = threading.Thread(target=self._loop, args=(first_delay,),
                                        name="sg-expiry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _loop(self, delay: float) -> None:
        while not self._stop.wait(delay):
            delay = self.policy.interval
            if not self.leader.is_leader:
                continue
            try:
                st = self.store.retention.expire(self.policy, stop=self._stop,
                                                 go_on=lambda: self.leader.is_leader)
            except SlurmguardError as exc:  # a store fault: try again next interval
                log.warning("retention: expiry failed: %s", exc)
                continue
            self.passes += 1
            self.last = st.as_dict()
            if st.deleted or st.stopped:
                log.info("retention: %s", self.last)
