"""What TLS costs a node: one record POST over a fresh connection (as every prolog makes it),
plain HTTP against HTTPS, against a real `slurmguard serve`; and the whole `slurmguard prolog`
process with an http:// and an https:// report_url. Prints medians (docs/serve.md "TLS").

    python tests/bench/bench_tls.py [-n 200] [--prologs 21]

The certificate is ECDSA P-256 from a test CA (tests/support/testca.py). The import cost is measured with -X importtime:
``http.client`` imports ``ssl`` whether or not the URL is https.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from support.helpers import sg_argv, sg_env  # noqa: E402
from support.sgserve import TOKEN, Serve, new_port, new_store, write_config  # noqa: E402
from support.testca import TestCA  # noqa: E402

from slurmguard.adapters import serve_client  # noqa: E402
from slurmguard.node.record import make_record  # noqa: E402


def _posts(url: str, ca: str, n: int) -> list[float]:
    out = []
    for i in range(n):
        rec = make_record(f"b{i % 50}", "prolog", [], "pass", "", job_id=None,
                          started=time.time(), duration=0.01)
        t = time.perf_counter()
        serve_client.post_records(url, TOKEN, [rec], 5, ca=ca)
        out.append((time.perf_counter() - t) * 1000)
    return out


def _prologs(cfg: Path, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        p = subprocess.run(sg_argv("prolog"), env=sg_env(SLURMGUARD_CONFIG=str(cfg),
                                                         SLURMD_NODENAME="b1"),
                           capture_output=True, text=True, timeout=60)
        out.append((time.perf_counter() - t) * 1000)
        assert "report spooled" not in p.stderr, p.stderr
    return out


def _connects(port: int, ca: str, n: int) -> tuple[list[float], list[float]]:
    """TCP connect alone, and TCP connect + TLS handshake (verified), each n times."""
    import socket

    from slurmguard.adapters.tls import client_context

    tcp, tls = [], []
    ctx = client_context(ca)
    for _ in range(n):
        t = time.perf_counter()
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            tcp.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost"):
                tls.append((time.perf_counter() - t) * 1000)
    return tcp, tls


def _memory_handshakes(crt: Path, key: Path, ca: Path, n: int) -> list[float]:
    """Both ends of a verified handshake in this process, no network: the CPU it costs."""
    from slurmguard.adapters.tls import _handshake, client_context, server_context

    server, client = server_context(str(crt), str(key)), client_context(str(ca))
    out = []
    for _ in range(n):
        t = time.perf_counter()
        _handshake(server, client, "localhost")
        out.append((time.perf_counter() - t) * 1000)
    return out


def _import_ssl_ms() -> float:
    p = subprocess.run([sys.executable, "-X", "importtime", "-c", "import http.client"],
                       capture_output=True, text=True)
    for line in p.stderr.splitlines():
        if line.split("|")[-1].strip() == "ssl":
            return int(line.split("|")[1]) / 1000  # cumulative us
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--prologs", type=int, default=21)
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="sg-bench-tls-"))
    ca = TestCA(d / "ca")
    crt, key = ca.issue("serve", ["localhost"])
    port = new_port()
    cfg = write_config(d, store_url=new_store(d), port=port,
                       serve_extra=f'tls_cert = "{crt}"\ntls_key = "{key}"\n'
                                   f'tls_ca = "{ca.ca_file}"')
    cfg.write_text(cfg.read_text().replace("[hooks]\n", '[hooks]\nprolog = ["host-cpus"]\n', 1))
    tls_cfg = d / "tls.toml"
    tls_cfg.write_text(cfg.read_text().replace('report_url = "http://127.0.0.1:',
                                               'report_url = "https://localhost:'))
    plain_port = new_port()
    (d / "plain").mkdir()
    plain_cfg = write_config(d / "plain", store_url=new_store(d / "plain"), port=plain_port)
    plain_cfg.write_text(plain_cfg.read_text().replace(
        "[hooks]\n", '[hooks]\nprolog = ["host-cpus"]\n', 1))
    mem = _memory_handshakes(crt, key, ca.ca_file, args.n)
    print(f"in-memory handshake, both ends' CPU, median of {args.n}: {statistics.median(mem):.2f} ms")
    tls = Serve(cfg, port, "--no-policy", tls_ca=ca.ca_file).start()
    plain = Serve(plain_cfg, plain_port, "--no-policy").start()
    try:
        tcp, hs = _connects(port, str(ca.ca_file), args.n)
        print(f"connect, median of {args.n}: TCP {statistics.median(tcp):.2f} ms, TCP + TLS 1.3 "
              f"handshake (verified) {statistics.median(hs):.2f} ms")
        h = _posts(f"http://127.0.0.1:{plain_port}/ingest", "", args.n)
        s = _posts(f"https://localhost:{port}/ingest", str(ca.ca_file), args.n)
        print(f"one record, fresh connection, median of {args.n}: http {statistics.median(h):.2f} ms,"
              f" https (ECDSA P-256, TLS 1.3) {statistics.median(s):.2f} ms")
        ph = _prologs(plain_cfg, args.prologs)
        ps = _prologs(tls_cfg, args.prologs)
        print(f"`slurmguard prolog` process, median of {args.prologs}: http report_url "
              f"{statistics.median(ph):.0f} ms, https {statistics.median(ps):.0f} ms")
    finally:
        tls.stop()
        plain.stop()
    print(f"import ssl (inside import http.client, -X importtime, cumulative): "
          f"{_import_ssl_ms():.1f} ms, paid with http and https alike")


if __name__ == "__main__":
    main()
