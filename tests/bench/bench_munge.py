"""What a node identity costs: one MUNGE credential per POST (docs/security.md).

Run by hand: `python tests/bench/bench_munge.py [ROUNDS]` (default 300). Interleaved, so
machine load hits every variant alike; prints the median of each, in microseconds:

* sign, libmunge:   what a node pays per POST when libmunge2 is installed (the agent and
                    serve hold the library loaded): SHA-256 of a 1 KiB body + munge_encode
* sign, fallback:   the same through the ``munge`` tool (fork + exec), libmunge missing
* sign, first:      a fresh interpreter's first credential (import the munge module, load
                    libmunge, encode): what a prolog without the agent pays once more
* decode, libmunge: serve's munge_decode + the identity decision, per request
* decode, fallback: the same through ``unmunge``
"""

from __future__ import annotations

import hashlib
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from slurmguard.adapters import munge  # noqa: E402
from slurmguard.adapters.serve_client import munge_signer  # noqa: E402
from slurmguard.serve import identity  # noqa: E402

BODY = b'{"records":[' + b"x" * 1000 + b"]}"
# What a prolog has imported by the time it delivers (the hook, the HTTP client, ctypes for
# NVML); timed: the munge module, loading libmunge and the first credential.
FIRST = ("import ctypes, time, slurmguard.node.hooks, slurmguard.node.delivery; "
         "from slurmguard.adapters.serve_client import munge_signer; t = time.perf_counter(); "
         "munge_signer()(b'x'); print((time.perf_counter() - t) * 1e6)")


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    sign = munge_signer()
    origins = {"127.0.0.1": frozenset({"n1"})}
    t: dict[str, list[float]] = {k: [] for k in ("sign, libmunge", "sign, fallback", "sign, first",
                                                 "decode, libmunge", "decode, fallback")}
    digest = hashlib.sha256(BODY).hexdigest().encode()
    for i in range(rounds):
        a = time.perf_counter()
        header = sign(BODY)
        t["sign, libmunge"].append(time.perf_counter() - a)
        a = time.perf_counter()
        cred = munge.decode(header[6:])
        assert identity.node_request(cred, BODY, ["n1"], origins, {0}, time.time()) is None
        t["decode, libmunge"].append(time.perf_counter() - a)
        a = time.perf_counter()
        tool = munge.encode(digest, use_library=False)
        t["sign, fallback"].append(time.perf_counter() - a)
        a = time.perf_counter()
        munge.decode(tool, use_library=False)
        t["decode, fallback"].append(time.perf_counter() - a)
        if i % 10 == 0:
            out = subprocess.run([sys.executable, "-c", FIRST], capture_output=True, text=True,
                                 cwd=REPO, check=True)
            t["sign, first"].append(float(out.stdout) / 1e6)
    for name, xs in t.items():
        print(f"{name:<18} median {statistics.median(xs) * 1e6:9.0f} us  ({len(xs)} runs)")


if __name__ == "__main__":
    main()
