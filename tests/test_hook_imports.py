"""What the in-process hook path imports, measured the way the issue asks (-X importtime):
no ClusterShell for the common [[group]] patterns, no socket, no uuid, and no pynvml even
when it reads 8 (stand-in) GPUs: the gather binds NVML itself (adapters/nvml_lib.py); and no
dataclasses (with inspect, ast, dis, tokenize behind it) for a prolog with every default check:
the hook path's record types are NamedTuples or plain classes (docs/hooks.md, "What the hook
path costs")."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

from fakehw.kmsg import write_gpu_tree
from fakehw.nvml import build_fake_nvml, default_config, write_config
from support.helpers import run_sg, sg_env

from slurmguard.node.record import uuid4_hex

TRIMMED = ("ClusterShell", "socket", "uuid", "click", "sqlalchemy", "pynvml")


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
    libdir = build_fake_nvml(tmp_path / "lib")
    write_config(tmp_path / "nvml.json", default_config(8))
    env = sg_env(SLURMD_NODENAME="n3", SLURMGUARD_CONFIG=str(cfg), PYTHONPROFILEIMPORTTIME="1",
                 LD_LIBRARY_PATH=str(libdir), FAKE_NVML_CONFIG=str(tmp_path / "nvml.json"))
    p = run_sg("prolog", "--json", env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in p.stderr.splitlines()
                if line.startswith("import time:")}
    assert "slurmguard.node.hooks" in imported
    assert sorted(m for m in imported if m.split(".")[0] in TRIMMED) == []
    assert "slurmguard.adapters.nvml_lib" in imported  # NVML was read, without pynvml
    gpu = {r["name"]: r for r in json.loads(p.stdout)["results"]}["gpu-count"]
    assert gpu["details"]["count"] == 8, gpu  # the 8 stand-in GPUs were read
    assert gpu["details"]["expected"] == 0  # and the [[group]] applied to n3


# Imported by `import dataclasses` and by nothing else the hook needs.
DATACLASS_WEIGHT = ("dataclasses", "inspect", "ast", "dis", "tokenize")


def _prolog_env(tmp_path):
    """The environment of a default prolog on node n1: 8 stand-in GPUs, an empty kernel log."""
    libdir = build_fake_nvml(tmp_path / "lib")
    write_config(tmp_path / "nvml.json", default_config(8))
    gpus = write_gpu_tree(tmp_path / "gpus")
    (tmp_path / "kmsg").write_text("")
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f"""
[hooks]
state_dir = "{tmp_path}/s"
[checks.gpu]
expected_count = 8
[checks.xid]
source = "file"
file = "{tmp_path}/kmsg"
nvidia_proc_root = "{gpus}"
""")
    return sg_env(SLURMD_NODENAME="n1", SLURMGUARD_CONFIG=str(cfg), LD_LIBRARY_PATH=str(libdir),
                 FAKE_NVML_CONFIG=str(tmp_path / "nvml.json"))


def test_default_prolog_imports_no_dataclasses(tmp_path):
    """Every default prolog check against 8 stand-in GPUs and a kernel log file; the modules
    are listed after the hook ran, so the gather threads' imports count too."""
    env = _prolog_env(tmp_path)
    code = ("import io, json, sys\n"
            "from slurmguard.node.hooks import run_hook\n"
            "out = io.StringIO()\n"
            "rc = run_hook('prolog', out=out, as_json=True)\n"
            "print(json.dumps({'rc': rc, 'out': json.loads(out.getvalue()),"
            " 'modules': sorted(sys.modules)}))\n")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.splitlines()[-1])
    results = {r["name"]: r["health"] for r in got["out"]["results"]}
    assert got["rc"] == 0 and results["gpu-count"] == "healthy" and results["gpu-xid"] == "healthy"
    assert {"slurmguard.adapters.kmsg", "slurmguard.adapters.fs", "slurmguard.adapters.host",
            "slurmguard.adapters.nvml_lib"} <= set(got["modules"])  # the gathers really ran
    assert [m for m in got["modules"] if m in DATACLASS_WEIGHT] == []


def test_the_hook_path_compiles_no_annotations(tmp_path):
    """A NamedTuple class in a module with ``from __future__ import annotations`` hands typing
    its field annotations as strings, and typing compiles each (``typing.ForwardRef``): the
    prolog and check paths made 170 of them, 5-14 ms of every run here. Their record types
    now carry real types (docs/hooks.md, "What the hook path costs"): none is compiled."""
    env = _prolog_env(tmp_path)
    code = ("import io, json, sys, typing\n"
            "made = []\n"
            "init = typing.ForwardRef.__init__\n"
            "def counted(self, arg, *a, **k):\n"
            "    f = sys._getframe(1)\n"
            "    while f.f_code.co_filename.endswith('typing.py'):\n"
            "        f = f.f_back\n"
            "    if '/slurmguard/' in f.f_code.co_filename:  # not tomllib's own, on a cache miss\n"
            "        made.append(f'{f.f_code.co_filename}: {arg}')\n"
            "    init(self, arg, *a, **k)\n"
            "typing.ForwardRef.__init__ = counted\n"
            "from slurmguard.node.hooks import run_hook\n"
            "rcs = [run_hook(h, out=io.StringIO()) for h in ('prolog', 'check')]\n"
            "print(json.dumps({'rcs': rcs, 'made': made,"
            " 'ran': 'slurmguard.adapters.nvml_lib' in sys.modules}))\n")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.splitlines()[-1])
    assert got["rcs"] == [0, 0] and got["ran"]
    assert got["made"] == []


def test_check_imports_no_click_and_fails_in_one_line(tmp_path):
    """`slurmguard check` takes the hooks' fast path (slurmguard/entry.py): no click, no CLI
    modules; its errors are the click CLI's one line and exit code."""
    cfg = tmp_path / "sg.toml"
    cfg.write_text(f'[hooks]\nstate_dir = "{tmp_path}/s"\n')
    env = sg_env(SLURMD_NODENAME="n1", SLURMGUARD_CONFIG=str(cfg), PYTHONPROFILEIMPORTTIME="1")
    p = run_sg("check", "--only", "host-cpus", "--json", env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in p.stderr.splitlines()
                if line.startswith("import time:")}
    assert "slurmguard.node.hooks" in imported
    assert sorted(m for m in imported if m.split(".")[0] == "click" or m.startswith("slurmguard.cli")) == []
    assert [r["name"] for r in json.loads(p.stdout)["results"]] == ["host-cpus"]
    p = run_sg("check", "--only", "no-such-check", env=sg_env(SLURMGUARD_CONFIG=str(cfg)))
    assert (p.returncode, p.stderr) == (3, "slurmguard: error: --only: unknown check "
                                           "'no-such-check' (see `slurmguard checks`)\n")


def test_record_ids_are_uuid4_hex():
    ids = {uuid4_hex() for _ in range(2000)}
    assert len(ids) == 2000
    for h in list(ids)[:200]:
        u = uuid.UUID(hex=h)
        assert u.version == 4 and u.variant == uuid.RFC_4122 and u.hex == h


def _report_imports(tmp_path, url: str, ca: str) -> set[str]:
    cfg = tmp_path / f"sg-{url.split(':')[0]}.toml"
    cfg.write_text(f"""
[hooks]
state_dir = "{tmp_path}/s"
spool_dir = "{tmp_path}/spool-{url.split(':')[0]}"
token_file = "{tmp_path}/token"
report_url = "{url}"
report_timeout = 0.5
prolog = ["host-cpus"]
[serve]
auth = "token"
tls_ca = "{ca}"
""")
    return set(_hook_in_process(tmp_path, cfg, "prolog")["modules"])


def _hook_in_process(tmp_path, cfg, hook: str) -> dict:
    """``hook`` run by run_hook in a fresh interpreter with config ``cfg`` (serve's token in
    tmp_path): its exit code, its JSON record and every module it imported."""
    (tmp_path / "token").write_text("t\n")
    (tmp_path / "token").chmod(0o600)
    code = ("import io, json, sys\n"
            "from slurmguard.node.hooks import run_hook\n"
            "out = io.StringIO()\n"
            f"rc = run_hook({hook!r}, out=out, as_json=True)\n"
            "print(json.dumps({'rc': rc, 'out': json.loads(out.getvalue()),"
            " 'modules': sorted(sys.modules)}))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=sg_env(SLURMD_NODENAME="n1", SLURMGUARD_CONFIG=str(cfg)))
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.splitlines()[-1])


def test_an_https_report_url_adds_only_the_tls_adapter(tmp_path):
    """What TLS adds to a prolog that reports: slurmguard.adapters.tls and stdlib ssl, nothing
    heavy (no cryptography, no SQLAlchemy). Plain HTTP imports neither ssl nor http.client
    and the email package behind it (adapters/httppost.py: ~15 ms of every report)."""
    from support.sgserve import new_port
    from support.testca import TestCA

    ca = TestCA(tmp_path / "ca")
    port = new_port()  # nothing listens: both records spool; the imports are what count
    plain = _report_imports(tmp_path, f"http://127.0.0.1:{port}/ingest", "")
    tls = _report_imports(tmp_path, f"https://localhost:{port}/ingest", str(ca.ca_file))
    assert [m for m in plain if m.split(".")[0] in ("ssl", "_ssl", "http", "email")] == []
    assert "slurmguard.adapters.httppost" in plain  # the record was sent (and spooled)
    added = tls - plain  # the TLS adapter, and ssl with the standard library it imports
    assert sorted(m for m in added if m.startswith("slurmguard")) == ["slurmguard.adapters.tls"]
    assert "ssl" in added and [m for m in added if not m.startswith("slurmguard")
                               and m.split(".")[0] not in sys.stdlib_module_names] == []
    assert [m for m in tls if m.split(".")[0] in ("http", "email")] == []
    assert [m for m in tls if m.split(".")[0] in (*TRIMMED[3:], "cryptography")] == []


def test_healthcheck_reads_slurm_and_reports_without_dataclasses_or_uuid(tmp_path):
    """The health check (every node, every HealthCheckInterval) reads its node from Slurm
    (adapters/slurm: NodeInfo, observe's choke point) and reports to serve (here nothing
    listens: the record spools). Its record types are slurmguard.frozen classes, its patterns
    compile on first use and the spool names a hook record by its own id: no dataclasses
    (inspect, ast, dis, tokenize behind it), no uuid (platform behind it)."""
    from support.helpers import standin_slurm
    from support.sgserve import new_port

    cfg = tmp_path / "sg.toml"
    cfg.write_text(f"""
[hooks]
state_dir = "{tmp_path}/s"
spool_dir = "{tmp_path}/spool"
token_file = "{tmp_path}/token"
report_url = "http://127.0.0.1:{new_port()}/ingest"
report_timeout = 0.5
healthcheck = ["host-cpus"]
[serve]
auth = "token"
[slurm]
{standin_slurm(tmp_path, "n1")}
""")
    got = _hook_in_process(tmp_path, cfg, "healthcheck")
    assert got["rc"] == 0 and got["out"]["delivery"] == "spooled", got["out"]
    assert {"slurmguard.adapters.slurm.commands", "slurmguard.observe",
            "slurmguard.adapters.spool"} <= set(got["modules"])  # Slurm read, record spooled
    assert len(list((tmp_path / "spool").glob("*.json"))) == 1
    assert [m for m in got["modules"] if m in (*DATACLASS_WEIGHT, "uuid", "platform")] == []
