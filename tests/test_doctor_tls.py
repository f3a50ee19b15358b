"""doctor's TLS items, with certificates from a real test CA: on the controller the key, the
chain, the names against the report URLs' hosts and the expiry (warn under 30 days, fail once
expired); on a node a real handshake with a TLS serve, verified with the node's CA."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.helpers import run_sg
from support.sgserve import Serve, new_port, new_store, write_config
from support.testca import TestCA


def _config(d: Path, *, report_url: str, cert: Path | str = "", key: Path | str = "",
            ca: Path | str = "", host: str = "127.0.0.1") -> Path:
    cfg = d / "doctor.toml"
    cfg.write_text(f"""
[serve]
host = "{host}"
tls_cert = "{cert}"
tls_key = "{key}"
tls_ca = "{ca}"
[hooks]
report_url = "{report_url}"
state_dir = "{d}/state"
""")
    return cfg


def tls_items(cfg: Path, role: str) -> dict[str, dict]:
    r = run_sg("-c", str(cfg), "doctor", role, "--json", timeout=60)
    data = json.loads(r.stdout)
    return {i["name"]: i for i in data["items"] if i["name"].startswith("TLS")}


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("ca"))


def test_controller_a_good_certificate_passes(ca, tmp_path):
    crt, key = ca.issue("good", ["ctl1", "ctl1.cluster"])
    items = tls_items(_config(tmp_path, report_url="https://ctl1.cluster:8742/ingest",
                              cert=crt, key=key, ca=ca.ca_file), "controller")
    assert {n: i["status"] for n, i in items.items()} == {
        "TLS key": "pass", "TLS chain": "pass", "TLS names": "pass", "TLS expiry": "pass"}
    assert "ctl1.cluster is in ['ctl1', 'ctl1.cluster']" == items["TLS names"]["detail"]


def test_controller_names_that_miss_a_report_url_fail(ca, tmp_path):
    crt, key = ca.issue("names", ["ctl1"])
    items = tls_items(_config(tmp_path, report_url="https://ctl2:8742/ingest",
                              cert=crt, key=key, ca=ca.ca_file), "controller")
    assert items["TLS names"]["status"] == "FAIL"
    assert items["TLS names"]["detail"] == ("ctl2 (a report_url's host) is not among the "
                                            "certificate's names ['ctl1']")
    assert "subjectAltName" in items["TLS names"]["fix"]


@pytest.mark.parametrize("days,start,status", [(40, 20, "WARN"), (30, 40, "FAIL"),
                                               (400, 1, "pass")])
def test_controller_expiry(ca, tmp_path, days, start, status):
    crt, key = ca.issue(f"exp{days}", ["ctl1"], days=days, start_days_ago=start)
    items = tls_items(_config(tmp_path, report_url="https://ctl1:8742/ingest",
                              cert=crt, key=key, ca=ca.ca_file), "controller")
    assert items["TLS expiry"]["status"] == status, items
    if status == "WARN":
        assert "(20 days, under 30)" in items["TLS expiry"]["detail"]
    if status == "FAIL":
        assert "certificate has expired" in items["TLS expiry"]["detail"]
        assert "renew" in items["TLS expiry"]["fix"]


def test_controller_a_key_of_another_certificate_fails_in_one_line(ca, tmp_path):
    crt, _ = ca.issue("mine", ["ctl1"])
    _, other = ca.issue("theirs", ["ctl1"])
    items = tls_items(_config(tmp_path, report_url="https://ctl1:8742/ingest",
                              cert=crt, key=other, ca=ca.ca_file), "controller")
    assert items["TLS"]["status"] == "FAIL"
    assert items["TLS"]["detail"] == f"serve.tls_key: {other} is not the key of serve.tls_cert {crt}"


def test_controller_a_certificate_of_another_ca_fails(ca, tmp_path):
    other = TestCA(tmp_path / "other", "other CA")
    crt, key = other.issue("foreign", ["ctl1"])
    items = tls_items(_config(tmp_path, report_url="https://ctl1:8742/ingest",
                              cert=crt, key=key, ca=ca.ca_file), "controller")
    assert items["TLS chain"]["status"] == "FAIL"
    assert "unable to get local issuer certificate" in items["TLS chain"]["detail"]


def test_plain_http_off_the_host_is_a_warning(tmp_path):
    items = tls_items(_config(tmp_path, report_url="http://ctl1:8742/ingest", host="0.0.0.0"),
                      "controller")
    assert items["TLS"]["status"] == "WARN"
    assert items["TLS"]["detail"] == ("plain HTTP off this host: http://ctl1:8742/ingest, "
                                      "serve.host 0.0.0.0 without serve.tls_cert (the token "
                                      "and the records travel in clear)")
    assert items["TLS certificate"]["status"] == "skip"
    loop = tls_items(_config(tmp_path, report_url="http://127.0.0.1:8742/ingest"), "controller")
    assert "TLS" not in loop  # loopback: plain HTTP is fine


def test_node_handshakes_with_serve_as_the_hooks_do(ca, tmp_path):
    crt, key = ca.issue("serve", ["localhost"])
    port = new_port()
    cfg = write_config(tmp_path, store_url=new_store(tmp_path), port=port,
                       serve_extra=f'tls_cert = "{crt}"\ntls_key = "{key}"')
    s = Serve(cfg, port, "--no-policy", tls_ca=ca.ca_file).start()
    try:
        url = f"https://localhost:{port}/ingest"
        good = tls_items(_config(tmp_path, report_url=url, ca=ca.ca_file), "node")
        assert good["TLS localhost"]["status"] == "pass", good
        assert good["TLS localhost"]["detail"].startswith(
            f"localhost:{port} verified with {ca.ca_file}; expires in 36")
        other = TestCA(tmp_path / "other", "other CA")
        bad = tls_items(_config(tmp_path, report_url=url, ca=other.ca_file), "node")
        assert bad["TLS localhost"]["status"] == "FAIL"
        assert "unable to get local issuer certificate" in bad["TLS localhost"]["detail"]
    finally:
        s.stop()


def test_doctor_says_whether_serves_user_may_drain(tmp_path):
    """No accounting here: a user that is neither root nor SlurmUser is a warning with the
    fix (sacctmgr cannot say whether it is an Admin); root passes; a user that does not exist
    fails naming setup."""
    import os
    import shutil
    import subprocess

    from support.helpers import require

    require(os.geteuid() == 0 and shutil.which("useradd") is not None, "root and useradd")

    def item(user: str) -> dict:
        cfg = tmp_path / f"{user}.toml"
        cfg.write_text(f'[serve]\nuser = "{user}"\nhost = "127.0.0.1"\n')
        r = run_sg("-c", str(cfg), "doctor", "controller", "--json", timeout=60)
        return {i["name"]: i for i in json.loads(r.stdout)["items"]}["serve user"]

    assert item("root")["status"] == "pass"
    missing = item("sgtest-nobody-here")
    assert missing["status"] == "FAIL" and "setup controller" in missing["fix"]
    subprocess.run(["useradd", "--system", "--no-create-home", "sgtest-serveuser"],
                   capture_output=True)
    try:
        other = item("sgtest-serveuser")
    finally:
        subprocess.run(["userdel", "sgtest-serveuser"], capture_output=True)
    assert other["status"] == "WARN", other
    assert "adminlevel=Admin" in other["fix"] and "AdminLevel unknown" in other["detail"]
