"""TLS on serve: a real `slurmguard serve` with a certificate from a test CA, and the node's
own client (adapters/serve_client.py) verifying it. What must hold: records arrive over
TLS, keep-alive and large bodies work through the dispatcher's non-blocking TLS, a client with
a CA that does not match or a URL whose host is not among the certificate's names refuses to
send (nothing reaches the store), a plain-HTTP client is refused by a TLS serve which keeps
serving, and a key that does not belong to the certificate stops serve at start in one line."""

from __future__ import annotations

import http.client
import json
import os
import ssl
import subprocess
import time

import pytest
from support.helpers import run_sg, sg_argv, sg_env
from support.sgserve import TOKEN, Serve, new_port, new_store, write_config
from support.testca import TestCA
from support.wait import wait_for

from slurmguard.adapters import serve_client
from slurmguard.node.record import make_record


@pytest.fixture(scope="module")
def tls_serve(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    ca = TestCA(d / "ca")
    crt, key = ca.issue("serve", ["localhost", "127.0.0.1"])
    port = new_port()
    cfg = write_config(d, store_url=new_store(d), port=port,
                       serve_extra=f'tls_cert = "{crt}"\ntls_key = "{key}"\n'
                                   f'tls_ca = "{ca.ca_file}"')
    s = Serve(cfg, port, "--no-policy", tls_ca=ca.ca_file).start()
    yield s, ca, d
    s.stop()


def _record(node: str) -> dict:
    return make_record(node, "healthcheck", [], "pass", "", job_id=None, started=time.time(),
                       duration=0.01)


def _stored(s: Serve) -> int:
    return int(s.healthz()["runs"])


def test_records_arrive_over_tls(tls_serve):
    s, ca, _ = tls_serve
    before = _stored(s)
    answer = serve_client.post_records(f"https://localhost:{s.port}/ingest", TOKEN,
                                       [_record("n1"), _record("n2")], 5, ca=str(ca.ca_file))
    assert len(answer["stored"]) == 2, answer
    assert _stored(s) == before + 2
    assert "listening on https://" in s.log.read_text()


def test_keep_alive_and_a_large_body_over_tls(tls_serve):
    """One TLS connection, three requests of 1 MiB each (64 TLS records per body) read by the
    dispatcher without blocking, answered by a worker, the connection kept for the next."""
    s, ca, _ = tls_serve
    conn = http.client.HTTPSConnection("localhost", s.port, timeout=10,
                                       context=ssl.create_default_context(cafile=str(ca.ca_file)))
    recs = [_record(f"k{i}") for i in range(3)]
    for rec in recs:
        body = json.dumps({"records": [rec]}).encode() + b" " * (1 << 20)
        conn.request("POST", "/ingest", body=body, headers={
            "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        assert json.loads(resp.read())["stored"] == [rec["id"]]
    sock = conn.sock
    assert isinstance(sock, ssl.SSLSocket) and sock.version() in ("TLSv1.2", "TLSv1.3")
    conn.close()


def test_a_ca_that_does_not_match_refuses_to_send(tls_serve, tmp_path):
    s, _, _ = tls_serve
    other = TestCA(tmp_path / "other", "another CA")
    before = _stored(s)
    with pytest.raises(serve_client.DeliveryError) as err:
        serve_client.post_records(f"https://localhost:{s.port}/ingest", TOKEN,
                                  [_record("n3")], 5, ca=str(other.ca_file))
    assert err.value.tls
    assert "TLS: serve's certificate refused: unable to get local issuer certificate" \
        in str(err.value)
    assert "\n" not in str(err.value)
    assert _stored(s) == before


def test_a_url_whose_host_is_not_among_the_names_is_refused(tmp_path):
    ca = TestCA(tmp_path / "ca")
    crt, key = ca.issue("wrong", ["ctl.example.org"])
    port = new_port()
    cfg = write_config(tmp_path, store_url=new_store(tmp_path), port=port,
                       serve_extra=f'tls_cert = "{crt}"\ntls_key = "{key}"')
    s = Serve(cfg, port, "--no-policy")  # started by hand: its /healthz check would be refused
    logf = open(s.log, "a")
    s.proc = subprocess.Popen(sg_argv("-c", str(cfg), "serve", "--no-policy"), env=sg_env(),
                              stdout=logf, stderr=logf, text=True, start_new_session=True)
    logf.close()
    try:
        wait_for(lambda: "listening on https://" in s.log.read_text(), 30, what="serve up")
        with pytest.raises(serve_client.DeliveryError) as err:
            serve_client.post_records(f"https://localhost:{port}/ingest", TOKEN,
                                      [_record("n4")], 5, ca=str(ca.ca_file))
        assert err.value.tls and "Hostname mismatch" in str(err.value), str(err.value)
        with pytest.raises(serve_client.DeliveryError) as err:
            serve_client.post_records(f"https://127.0.0.1:{port}/ingest", TOKEN,
                                      [_record("n4")], 5, ca=str(ca.ca_file))
        assert err.value.tls and "IP address mismatch" in str(err.value), str(err.value)
    finally:
        s.stop()


def test_plain_http_to_a_tls_serve_is_refused_and_serve_goes_on(tls_serve):
    s, ca, _ = tls_serve
    refused = s.metric("slurmguard_http_connection_events_total", event="tls_refused")
    with pytest.raises(serve_client.DeliveryError) as err:
        serve_client.post_records(f"http://127.0.0.1:{s.port}/ingest", TOKEN,
                                  [_record("n5")], 5)
    assert not err.value.tls  # the client spoke plain HTTP: to it the server just hung up
    assert s.metric("slurmguard_http_connection_events_total", event="tls_refused") \
        == refused + 1
    assert serve_client.post_records(f"https://localhost:{s.port}/ingest", TOKEN,
                                     [_record("n5")], 5, ca=str(ca.ca_file))["stored"]


def test_a_key_that_is_not_the_certificates_stops_serve_in_one_line(tmp_path):
    ca = TestCA(tmp_path / "ca")
    crt, _ = ca.issue("serve", ["localhost"])
    _, other_key = ca.issue("other", ["localhost"])
    port = new_port()
    cfg = write_config(tmp_path, store_url=new_store(tmp_path), port=port,
                       serve_extra=f'tls_cert = "{crt}"\ntls_key = "{other_key}"')
    r = run_sg("-c", str(cfg), "serve", "--no-policy", timeout=60)
    assert r.returncode == 3, r.stderr
    assert r.stderr.strip() == (f"slurmguard: error: serve.tls_key: {other_key} is not the key "
                                f"of serve.tls_cert {crt}")


def test_a_missing_ca_file_is_a_tls_delivery_error(tls_serve, tmp_path):
    s, _, _ = tls_serve
    with pytest.raises(serve_client.DeliveryError) as err:
        serve_client.post_records(f"https://localhost:{s.port}/ingest", TOKEN, [], 5,
                                  ca=str(tmp_path / "nope.pem"))
    assert err.value.tls and "serve.tls_ca" in str(err.value) and "nope.pem" in str(err.value)


def test_a_replaced_ca_file_is_read_again(tmp_path):
    """The resident agent builds its TLS context once per version of serve.tls_ca."""
    from slurmguard.adapters.tls import client_context

    first, second = TestCA(tmp_path / "a", "CA one"), TestCA(tmp_path / "b", "CA two")
    ca = tmp_path / "ca.pem"
    ca.write_bytes(first.ca_file.read_bytes())
    one = client_context(str(ca))
    assert client_context(str(ca)) is one
    ca.write_bytes(second.ca_file.read_bytes())
    os.utime(ca, ns=(time.time_ns(), time.time_ns() + 10**9))  # a later version of the file
    two = client_context(str(ca))
    assert two is not one
    names = [c["subject"][0][0][1] for c in two.get_ca_certs()]
    assert names == ["CA two"]
