"""Moved (issue 15): this module only re-exports the old names for branches still using them.

- the result record: :mod:`slurmguard.record` (``make_record``, ``RECORD_VERSION``)
- send-or-spool: :mod:`slurmguard.delivery` (``deliver``, ``replay_spool``)
- HTTP to serve: :mod:`slurmguard.adapters.serve_client` (``drain_permit``, ``post_records``,
  ``read_token``, ``DeliveryError``)
- the spool files: :mod:`slurmguard.adapters.spool` (``write`` was ``spool``, ``pending`` was
  ``spooled``)

Import from those modules in new code; this file goes once no branch needs it.
"""

from __future__ import annotations

from slurmguard.adapters.serve_client import DeliveryError, drain_permit, post_records, read_token
from slurmguard.adapters.spool import pending as spooled
from slurmguard.adapters.spool import write as spool
from slurmguard.delivery import deliver, replay_spool
from slurmguard.record import RECORD_VERSION, make_record

__all__ = ["RECORD_VERSION", "DeliveryError", "deliver", "drain_permit", "make_record",
           "post_records", "read_token", "replay_spool", "spool", "spooled"]
