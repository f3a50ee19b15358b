"""Configuration: TOML, declared once, validated at load with the key path in every error.

Files, in order (later wins): built-in defaults, ``/etc/slurmguard/slurmguard.toml`` (or
``$SLURMGUARD_CONFIG``), then ``conf.d/*.toml`` beside it in name order. ``[[group]]`` tables
select nodes with a ClusterShell NodeSet pattern and override any key for those nodes::

    [checks.gpu]
    expected_count = 8

    [[group]]
    nodes = "cpu[001-032]"
    checks.gpu.expected_count = 0

Each feature declares its keys in :data:`SCHEMA` with a default and a type; an unknown key or
a value of the wrong type fails the whole load with a message such as
``checks.gpu.expected_count: expected an integer, got "eight"``.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from slurmguard.atomic import write_atomic
from slurmguard.errors import ConfigError, InputError
from slurmguard.fieldtypes import (  # re-exported: sections below and callers use them
    AbsPath,
    Bool,
    Choice,
    Field,
    Float,
    Int,
    IntList,  # noqa: F401  (re-exported for new sections)
    Schema,
    Str,
    StrList,
    Table,
)
from slurmguard.fleet.params import FLEET_SECTION
from slurmguard.fleet.params import SECTION as RISK_SECTION
from slurmguard.policy.params import SECTION as POLICY_SECTION
from slurmguard.policy.repair_params import SECTION as REPAIR_SECTION

DEFAULT_PATH = "/etc/slurmguard/slurmguard.toml"

# ---------------------------------------------------------------------------------------------
# The schema. Check areas add theirs from slurmguard.checks (each area module's PARAMS).

_SLURM: Schema = {
    "scontrol": AbsPath("/usr/bin/scontrol", "absolute path of scontrol"),
    "sinfo": AbsPath("/usr/bin/sinfo"),
    "squeue": AbsPath("/usr/bin/squeue"),
    "sacct": AbsPath("/usr/bin/sacct"),
    "sbatch": AbsPath("/usr/bin/sbatch"),
    "sacctmgr": AbsPath("/usr/bin/sacctmgr", "`shadow report` reads node events with it"),
    "timeout": Float(10.0, "seconds before a Slurm command is killed", minimum=0.1),
}

_HOOKS: Schema = {
    "budget": Float(20.0, "total seconds a hook may take, checks included", minimum=0.5),
    "check_timeout": Float(10.0, "seconds one data source or check may take", minimum=0.1),
    "prolog": StrList(
        ["gpu-count", "gpu-lost", "gpu-ecc", "gpu-remap", "gpu-thermal", "gpu-nvlink",
         "gpu-xid", "ib-link", "fs-mount", "host-memory", "host-cpus"],
        "checks run by `slurmguard prolog`",
    ),
    "epilog": StrList(
        ["gpu-count", "gpu-lost", "gpu-ecc", "gpu-remap", "gpu-xid", "ib-link", "fs-mount",
         "host-leftover-procs"],
        "checks run by `slurmguard epilog`",
    ),
    "healthcheck": StrList(["all"], "checks run by `slurmguard healthcheck` ('all' = every check)"),
    "check": StrList(["all"], "checks run by `slurmguard check`"),
    "drain_on_degraded": Bool(False, "drain for `degraded` results too"),
    "drain_on_error": Bool(False, "never set this in production: drain when a checker fails"),
    "state_dir": Str("/var/lib/slurmguard", "where per-check state (last XID seen, counters) lives"),
    "report_url": Str("", "ingest URL of `slurmguard serve`, e.g. http://ctld:8742/ingest"),
    "report_urls": Field("list[str]", [], "more ingest URLs (serve replicas), tried in order after "
                         "report_url, each with its share of report_timeout",
                         validate=lambda v: _http_urls(v)),
    "token_file": Str("/etc/slurmguard/token", "shared ingest token (root/SlurmUser only), "
                      "with serve.auth = token"),
    "munge_socket": Str("", "munged socket the node mints its credentials with (empty: munge's "
                            "default); with serve.auth = munge"),
    "node_key_file": Str("/etc/slurmguard/node.key", "this node's key (`slurmguard serve node-key "
                         "NODE` on the controller; root only), with serve.auth = node-key"),
    "spool_dir": Str("/var/spool/slurmguard", "where results wait while serve is unreachable"),
    "spool_max": Int(10000, "records kept in the spool at most (oldest dropped first)", minimum=1),
    "report_timeout": Float(2.0, "seconds to wait for serve before spooling", minimum=0.1),
    "state_max_age": Float(3600.0, "a health check takes its node's state from serve; when no "
                           "replica answers, from what the node saw last if at most this "
                           "many seconds old, else from Slurm (0: always Slurm)", minimum=0.0),
    "replay_timeout": Float(5.0, "seconds a hook run may spend replaying its spool after a "
                            "successful send (a slow serve after an outage), never past "
                            "hooks.budget; 0: no replay", minimum=0.0),
    "fallback_cap": Bool(True, "no serve replica answers a drain permit: apply the blast-radius "
                         "cap to Slurm's own view (node-intrinsic GPU faults still drain at once)"),
    "fallback_slot": Float(1.0, "seconds per decision window of that fallback", minimum=0.1),
    "fallback_slots": Int(10, "decision windows per cycle at least (more when the partition "
                          "has more than fallback_share x fallback_slots nodes)", minimum=1),
    "fallback_share": Int(2, "nodes of a partition that may decide in one window at most: a "
                          "shared fault drains at most cap + fallback_share - 1 nodes", minimum=1),
    "log_file": Str("", "append one line per hook run here (empty: stderr only)"),
}

def _http_urls(urls: list[str]) -> str | None:
    for url in urls:
        if not url.startswith(("http://", "https://")) or len(url.split("/")) < 3 or not url.split("/")[2]:
            return f"expected http(s) URLs, {url!r} is not one"
    return None


def _regex(value: str) -> str | None:
    import re

    try:
        re.compile(value)
    except re.error as exc:
        return f"not a regular expression ({exc})"
    return None


_RECONCILE: Schema = {  # slurmguard reconcile (docs/reconcile.md)
    "api_url": Str("", "Kubernetes API URL; empty: kubeconfig, or in-cluster config in a pod"),
    "kubeconfig": Str("", "kubeconfig file (empty: $KUBECONFIG or ~/.kube/config)"),
    "context": Str("", "kubeconfig context (empty: the current one)"),
    "token_file": Str("", "bearer token file, with api_url"),
    "ca_file": Str("", "CA bundle for the API server, with api_url"),
    "verify_tls": Bool(True, "verify the API server's certificate"),
    "timeout": Float(10.0, "seconds per Kubernetes request", minimum=0.1),
    "label_selector": Str("", "reconcile only Nodes matching this label selector"),
    "nodes": Str("", "reconcile only these Slurm nodes (NodeSet; empty: all)"),
    "name_mapping": Choice("same", ("same", "label", "pattern"),
                           "how a Node name maps to a Slurm node name"),
    "name_label": Str("slurmguard.io/slurm-node", "Node label holding the Slurm name (label mode)"),
    "name_pattern": Field("str", "", "regex on the Node name; group 'name' (or 1) is the Slurm name",
                          validate=_regex),
    "not_ready_grace": Float(300.0, "seconds a Node must be NotReady before Slurm drains it"),
    "problem_conditions": StrList(["KernelDeadlock", "ReadonlyFilesystem"],
                                  "Node conditions that drain the Slurm node when True"),
    "min_hold": Float(300.0, "seconds a mark stays at least (hysteresis against flapping)"),
    "set_condition": Bool(True, "maintain the Node condition SlurmguardHealthy"),
    "interval": Float(30.0, "--watch: seconds between Slurm polls", minimum=1),
    "resync": Float(300.0, "--watch: seconds between full Kubernetes relists", minimum=1),
    "metrics_file": Str("", "Prometheus text file of action counters (empty: none)"),
}

_REQUEUE: Schema = {
    "interval": Float(2.0, "seconds between polls of the requeue watcher", minimum=0.2),
    "max_requeues": Int(3, "node-fault recoveries per job at most (then left to Slurm)"),
    "state_file": Str("/var/lib/slurmguard/requeue-watch.json",
                      "where the watcher remembers where jobs ran ('' for memory only)"),
    "metrics_file": Str("", "Prometheus text file of requeues and recovery latency, rewritten "
                            "after each poll (empty: none)"),
}

_NOTICE: Schema = {  # drain notices to running jobs (docs/requeue.md)
    "serve_url": Str("", "base URL of serve for GET /drains and POST /suspect, e.g. "
                         "http://ctl:8742 (empty: hooks.report_url without its path)"),
    "interval": Float(2.0, "seconds between the wrapper's drain polls of serve", minimum=0.2),
    # setup's HealthCheckInterval: with serve down, each wrapper then reads Slurm about as
    # often as a health check does, so an outage at most doubles slurmctld's RPC rate
    # (docs/requeue.md "What a serve outage costs slurmctld").
    "slurm_interval": Float(300.0, "seconds between drain polls of Slurm itself when serve "
                                   "does not answer: the first wait (jittered) ...", minimum=0.2),
    "slurm_interval_max": Float(300.0, "... which doubles while serve stays down, up to this",
                                minimum=0.2),
    "timeout": Float(2.0, "seconds per drain poll", minimum=0.1),
    "job_token_file": Str("", "token jobs may read (group- or world-readable) that lets the "
                              "wrapper report slow nodes to serve's /suspect and read its job's "
                              "nodes on /drains, nothing else (serve.auth token or node-key; "
                              "empty: off)"),
    "suspect_jobs": Int(3, "a node named slow by this many distinct jobs ...", minimum=1),
    "suspect_window": Float(7 * 86400.0, "... within this many seconds goes first to burn-in",
                            minimum=60.0),
}

_METRICS: Schema = {  # docs/metrics.md
    "textfile_dir": Str("", "node_exporter textfile directory; each hook run writes "
                            "slurmguard_hook_<hook>.prom there (empty: off)"),
    "require_token": Bool(False, "serve's GET /metrics needs the ingest token too"),
}

_STORE: Schema = {
    "url": Str("", "SQLAlchemy URL, e.g. postgresql+psycopg://sg@db/slurmguard (empty: SQLite at path)"),
    "path": AbsPath("/var/lib/slurmguard/slurmguard.db", "SQLite file (WAL mode) when url is empty"),
    "busy_timeout": Float(5.0, "seconds a SQLite writer waits for a lock", minimum=0.0),
    "connect_timeout": Float(5.0, "seconds to wait for a PostgreSQL connection", minimum=1.0),
    # How long each kind of history is kept (slurmguard/store/retention.py, docs/store.md
    # "Retention"); serve's leader expires the rest every `interval` s. 0 days: for ever.
    "retention": {
        "results": Float(7.0, "days the verdicts of checks that passed (or were unsupported or "
                         "errored) are kept; failing verdicts follow events"),
        "runs": Float(60.0, "days healthy hook runs are kept (policy replay reads them: its "
                      "default 30 days and their 30-day lookback)"),
        "events": Float(400.0, "days the ledger, fleet alerts, failing runs with their failing "
                        "results and goodput's jobs are kept (fleet report, risk, incidents)"),
        "burnin": Float(90.0, "days raw burn-in measurements are kept (burnin report reads the "
                        "series, which are kept)"),
        "batch": Int(2000, "rows deleted per transaction: the most serve's writer waits for",
                     minimum=1),
        "pause": Float(0.05, "seconds between expiry transactions, and at least as long as "
                       "the last one took: expiry holds the store at most half the time (0: "
                       "no pause)"),
        "interval": Float(3600.0, "seconds between expiry passes of serve's leader (0: serve "
                          "never expires; run `slurmguard db expire`)"),
    },
}

_SERVE: Schema = {
    "host": Str("0.0.0.0", "address `slurmguard serve` listens on"),
    "port": Int(8742, "ingest port", minimum=0),
    "auth": Choice("munge", ("munge", "node-key", "token"), "who may write (docs/security.md): "
                   "munge = each node signs its requests with a MUNGE credential and may write "
                   "only for itself; node-key = the same with a per-node key (sites on "
                   "auth/slurm, no munged: `serve node-key NODE`); token = the shared "
                   "token_file (test clusters only; doctor warns). Nodes and jobs read this too"),
    "site_key_file": AbsPath("/etc/slurmguard/site.key", "serve.auth = node-key: the site key "
                             "every node's key is derived from (serve only, mode 0600)"),
    "site_key_previous_file": Str("", "serve.auth = node-key, during a rotation: the site key "
                                  "before site_key_file; node keys derived from either are "
                                  "taken until this is emptied (docs/security.md, rotation)"),
    "munge_socket": Str("", "munged socket serve decodes credentials with (empty: munge's "
                            "default, /run/munge/munge.socket.2)"),
    "munge_check_peer": Bool(True, "serve.auth = munge: refuse a credential whose origin address "
                             "is not the connection's peer address (false only behind a proxy "
                             "or NAT that hides the nodes' addresses; then root on a node can "
                             "write for another: docs/security.md)"),
    "token_file": AbsPath("/etc/slurmguard/token", "shared token (serve.auth = token); must not "
                          "be world-readable"),
    "batch_size": Int(200, "records written per transaction at most", minimum=1),
    "batch_interval": Float(0.0, "seconds the writer waits for more requests before it writes a "
                            "batch that is not full (0: it writes what queued while it wrote "
                            "the last one)", minimum=0.0),
    "max_body": Int(4 * 1024 * 1024, "largest request body accepted (bytes)", minimum=1024),
    "policy": Bool(True, "run fleet policy after ingest and drain flagged nodes"),
    "policy_interval": Float(60.0, "seconds between full policy passes", minimum=1.0),
    "policy_min_gap": Float(1.0, "seconds at least from one policy pass's start to the next "
                                 "incremental one: records arriving meanwhile are evaluated "
                                 "together (at 10,000 nodes the health checks' records alone "
                                 "arrive about 33 a second)", minimum=0.0),
    "slurm_view_ttl": Float(2.0, "seconds one read of Slurm's node table serves /drains, the "
                            "policy pass and the scopes (serve reads it at most once per this)",
                            minimum=0.0),
    "slurm_view_entries_per_ttl": Int(4096, "node entries one read per slurm_view_ttl covers: "
                                      "a larger table is read proportionally less often "
                                      "(ttl x entries / this), so serve's share of slurmctld "
                                      "stays about flat as the fleet grows; 0: every ttl",
                                      minimum=0),
    "slurm_view_max_age": Float(10.0, "PostgreSQL replicas: the leader reads the node table and "
                                "publishes it in the store; another replica uses that view while "
                                "its read is at most this many seconds old, and reads Slurm "
                                "itself past it (no leader, or a leader that cannot read Slurm)",
                                minimum=0.0),
    "leader_retry": Float(2.0, "PostgreSQL replicas: seconds between a replica's tries to become "
                          "the leader (the periodic work's one runner), and the leader's checks",
                          minimum=0.2),
    "upgrade": Bool(False, "run `db upgrade` at start instead of refusing an old schema"),
    "workers": Int(64, "threads that handle complete requests (slow clients never hold one)", minimum=1),
    "max_connections": Int(1024, "open connections at most (the oldest idle one is closed first)", minimum=8),
    "idle_timeout": Float(15.0, "seconds a connection may stay open with no request", minimum=0.1),
    "request_timeout": Float(30.0, "seconds a request may take to arrive completely (else 408)", minimum=0.1),
    "gate_socket": Str("", "unix socket answering the compiled gate client (PrologSlurmctld "
                       "fast path, docs/serve.md), e.g. /run/slurmguard/gate.sock; empty: off"),
    "gate_socket_user": Str("", "owner of gate_socket (mode 0600): the SlurmUser that runs "
                            "PrologSlurmctld, when serve runs as root"),
    "user": Str("slurmguard", "user serve runs as (its unit's User=; setup controller creates "
                "it): SlurmUser or a Slurm Admin, to drain (docs/install.md \"Least "
                "privilege\"); root: the old root unit"),
    "tls_cert": Str("", "PEM certificate (chain) serve presents: with tls_key, serve speaks "
                    "HTTPS only; empty: plain HTTP (loopback and tests)"),
    "tls_key": Str("", "PEM private key of tls_cert, readable by serve's user only"),
    "tls_ca": Str("", "CA file every client of serve (hooks, agent, job wrapper) verifies an "
                  "https report_url against; empty: the system's CAs"),
}

_GATE: Schema = {
    "on_store_error": Choice("open", ["open", "closed"], "store unreadable: let jobs run (open) or refuse (closed)"),
    "fresh": Float(900.0, "seconds an unhealthy result keeps a node from new jobs", minimum=0.0),
    "drain": Bool(True, "drain refused nodes (with the reason) so Slurm picks others"),
    "log_file": Str("", "append one line per refusal or store error here (empty: stderr)"),
}

_GOODPUT: Schema = {  # slurmguard goodput (docs/goodput.md)
    "run_dirs": StrList([], "glob patterns of checkpoint dirs holding the wrapper's .slurmguard/runs.jsonl"),
    "drain_window": Float(3600.0, "seconds after a run's end in which a node fault still counts against it"),
    "straggler_factor": Float(1.2, "a run this many times slower than the job's best pace straggles", minimum=1.0),
    "stall_factor": Float(5.0, "steps this many times slower than the run's median count as stalled", minimum=1.0),
    "metrics_window": Float(86400.0, "serve's goodput gauges cover jobs that ended this many seconds ago", minimum=60.0),
}

_AGENT: Schema = {  # slurmguard agent, the resident node agent (docs/agent.md)
    "socket": Str("/run/slurmguard/agent.sock",
                  "unix socket the agent answers on (mode 0600); %n = node name"),
    "max_age": Float(10.0, "seconds a kept slow-source value may be old when a hook uses it; "
                     "older is re-read inside the hook's budget", minimum=0.0),
    "refresh": Float(0.0, "seconds between background refreshes of the slow sources; 0 = "
                     "none, a hook re-reads what is older than max_age (>0: at least 0.5)",
                     minimum=0.0),
    "background": StrList(["fs", "ib", "procs", "timesync", "munge"],
                          "slow sources whose values are kept for max_age (the rest are read "
                          "at ask time)"),
    "healthcheck_interval": Float(0.0, "run `healthcheck` (and drain) every N s: only as "
                                  "HealthCheckProgram's replacement; 0 = never", minimum=0.0),
    "nvml_events": Bool(True, "keep an NVML event set for Xid critical errors"),
}

_ADMIN: Schema = {  # who may change what slurmguard does (docs/triage.md "Who may")
    "groups": StrList([], "Unix groups whose members may run drain, resume and repair "
                          "pause|resume; root always may (sudo: recorded as $SUDO_USER); "
                          "empty: root only"),
}

_TRIAGE: Schema = {
    "user": Str("root", "login user for `triage collect` over SSH"),
    "port": Int(22, "SSH port (a host_map entry may name another)", minimum=1),
    "identity": Str("", "private key file (empty: ssh-agent and ~/.ssh/id_*)"),
    "known_hosts": StrList([], "known_hosts files (empty: ~/.ssh/known_hosts, /etc/ssh/ssh_known_hosts)"),
    "host_map": Table("NodeSet pattern -> HOST[:PORT] to reach those nodes at"),
    "parallel": Int(16, "nodes collected at once", minimum=1),
    "connect_timeout": Float(10.0, "seconds to connect and authenticate", minimum=0.1),
    "command_timeout": Float(60.0, "seconds one remote command may take", minimum=0.1),
    "remote_slurmguard": StrList(["/usr/local/bin/slurmguard"], "argv of slurmguard on the nodes"),
    "remote_dmesg": AbsPath("/usr/bin/dmesg"),
    "remote_journalctl": AbsPath("/usr/bin/journalctl"),
    "remote_nvidia_smi": AbsPath("/usr/bin/nvidia-smi"),
    "remote_timeout": Str("/usr/bin/timeout", "coreutils timeout on the nodes (empty: none)"),
    "remote_sysfs": AbsPath("/sys", "sysfs root on the nodes"),
    "xid_lines": Int(1000, "kernel-log Xid lines kept per node", minimum=1),
}

def _slurm_time(value: str) -> str | None:
    import re

    if not re.fullmatch(r"(\d+-)?\d{1,3}(:\d{2}){0,2}", value):
        return "expected a Slurm time limit such as 30, 01:00:00 or 1-00:00:00"
    return None


_BURNIN: Schema = {  # slurmguard burnin (docs/burnin.md)
    "partition": Str("", "sbatch --partition for burn-in jobs (a low-priority, preemptible one)"),
    "qos": Str("", "sbatch --qos for burn-in jobs (empty: none)"),
    "account": Str("", "sbatch --account (empty: none)"),
    "nice": Int(10000, "sbatch --nice: burn-in jobs queue behind production", minimum=0),
    "time_limit": Field("str", "01:00:00", "sbatch --time of one burn-in job", validate=_slurm_time),
    "reservation": Str("", "default --reservation (empty: none; nodes drained by us and awaiting "
                           "burn-in get a MAINT reservation of their own)"),
    "program": StrList([], "argv of slurmguard in the job script (empty: the one submitting)"),
    "output": Str("", "sbatch --output of burn-in jobs, e.g. /var/log/slurmguard/burnin-%N-%j.out (empty: /dev/null)"),
    "checks": StrList(["all"], "health checks run before and after the measurements"),
    "measurements": StrList(["all"], "measurements run ('all' = every one registered)"),
    "site_modules": StrList([], "Python modules exporting MEASUREMENTS (site benchmarks)"),
    "quick_seconds": Float(5.0, "seconds each load runs at --level quick", minimum=0.1),
    "full_seconds": Float(60.0, "seconds each load runs at --level full", minimum=0.1),
    "measurement_timeout": Float(300.0, "seconds one measurement may take before it is killed "
                                        "(error: timed out)", minimum=1.0),
    "trials": Int(5, "CPU/memory loads: best of this many trials", minimum=1),
    "scratch": AbsPath("/tmp", "local disk measured by disk-io (a file is written and removed)"),
    "disk_mb": Int(256, "MiB written and read by disk-io", minimum=1),
    "host_matrix": Int(512, "host-cpu: n of the n x n float64 matmul", minimum=16),
    "host_membw_mb": Int(64, "host-membw: MiB copied per pass", minimum=1),
    "gpu_matrix": Int(8192, "gpu-matmul: n of the n x n matmul (fp16/bf16)", minimum=256),
    "dcgmi": AbsPath("/usr/bin/dcgmi", "dcgmi of NVIDIA DCGM (absent: dcgm-diag unsupported)"),
    "dcgm_quick_level": Int(1, "dcgmi diag -r at --level quick", minimum=1),
    "dcgm_full_level": Int(3, "dcgmi diag -r at --level full", minimum=1),
    "all_reduce_perf": AbsPath("/usr/local/bin/all_reduce_perf",
                               "nccl-tests binary (absent: nccl-allreduce unsupported)"),
    "nccl_args": StrList(["-b", "8M", "-e", "1G", "-f", "2"], "all_reduce_perf arguments "
                         "(-g <GPUs on the node> is added)"),
    "group_by": Choice("gpu", ["gpu", "feature", "none"],
                       "comparison groups: GPU model and count, a Slurm feature, or one group"),
    "group_features": StrList([], "group_by = feature: the first of these a node has names its group"),
    "groups": Table("named comparison groups: name = \"NodeSet\" (win over group_by)"),
    "threshold": Float(0.90, "flag a node whose score is below this fraction of the group median",
                       minimum=0.0),
    "z_limit": Float(5.0, "a metric is out of bounds when its robust z-score is below -z_limit "
                     "(0: off)", minimum=0.0),
    "clear_z": Float(11.0, "drain on one metric alone, the same night, when score < threshold "
                     "and robust z < -clear_z x the group's tail factor (else the node's "
                     "re-run confirms or clears it)", minimum=0.0),
    "score_z": Float(4.0, "in groups of 1,000+ nodes, a score below threshold puts a metric "
                     "out of bounds only when its robust z is below -score_z too (0: always)",
                     minimum=0.0),
    "tail_quantile": Field("float", 0.005, "robust z is divided by the group's tail factor: "
                           "its better side's z at this quantile over a Gaussian's (0: off)",
                           minimum=0.0,
                           validate=lambda v: None if v < 0.5 else "below 0.5"),
    "confirm_metrics": Int(2, "drain when this many metrics are out of bounds the same night "
                           "(or one is, two nights running); a trend needs as many", minimum=1),
    "mad_floor": Float(0.01, "MAD is at least this fraction of the median", minimum=0.0),
    "min_group": Int(4, "smaller groups give no verdict", minimum=1),
    "trend_nights": Field("int", 7, "degrading: a fall over this many nights + 1, the last "
                          "half against the first (1-7)",
                          minimum=1, validate=lambda v: None if v <= 7 else "at most 7"),
    "trend_min_drop": Float(0.03, "... each metric losing at least this much score in all",
                            minimum=0.0),
    "trend_sigmas": Float(4.5, "... and the falls of one component's metrics adding up to "
                          "this robust z above the group's (Stouffer)", minimum=0.0),
    "drain_degrading": Bool(False, "drain degrading nodes too (default: report them only)"),
    "night_boundary_utc": Int(12, "UTC hour at which one burn-in night ends and the next begins",
                              minimum=0),
    "wait_timeout": Float(14400.0, "submit --wait: seconds to wait for the jobs", minimum=1.0),
}

SCHEMA: dict[str, Any] = {
    "slurm": _SLURM,
    "hooks": _HOOKS,
    "reconcile": _RECONCILE,
    "requeue": _REQUEUE,
    "notice": _NOTICE,
    "metrics": _METRICS,
    "store": _STORE,
    "serve": _SERVE,
    "policy": dict(POLICY_SECTION),  # declared with its thresholds in slurmguard/policy/params.py
    "risk": dict(RISK_SECTION),  # the node risk score: slurmguard/fleet/params.py
    "fleet": dict(FLEET_SECTION),
    "gate": _GATE,
    "checks": {
        "disabled": StrList([], "check names never run"),
        "site_modules": StrList(
            [], "Python modules with site-specific checks: each exports CHECKS (and SOURCES)"),
    },
    "triage": _TRIAGE,
    "admin": _ADMIN,
    "burnin": _BURNIN,
    "goodput": _GOODPUT,
    "agent": _AGENT,
    "repair": dict(REPAIR_SECTION),  # autonomous repair: slurmguard/policy/repair_params.py
}


def register_section(path: str, fields: Schema) -> None:
    """Add a section's keys (``"checks.gpu"``) to the schema; a second registration fails."""
    node: dict[str, Any] = SCHEMA
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    if parts[-1] in node:
        raise RuntimeError(f"config section {path} registered twice")
    node[parts[-1]] = dict(fields)


# ---------------------------------------------------------------------------------------------


class Config:
    """Validated configuration. ``cfg["checks.gpu.expected_count"]`` or ``cfg.section("hooks")``."""

    def __init__(self, data: dict[str, Any], groups: list[tuple[str, dict[str, Any]]],
                 sources: list[str]) -> None:
        self._data = data
        self._groups = groups
        self.sources = sources

    def __getitem__(self, dotted: str) -> Any:
        node: Any = self._data
        for part in dotted.split("."):
            node = node[part]
        return node

    def section(self, dotted: str) -> dict[str, Any]:
        value = self[dotted]
        if not isinstance(value, dict):
            raise KeyError(dotted)
        return value

    def as_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self._data)

    def groups(self) -> list[tuple[str, dict[str, Any]]]:
        """The ``[[group]]`` tables: (NodeSet pattern, the keys it sets), in load order."""
        return [(p, copy.deepcopy(o)) for p, o in self._groups]

    def for_node(self, node: str | None) -> Config:
        """The config with every ``[[group]]`` whose ``nodes`` pattern holds ``node`` applied."""
        if not node or not self._groups:
            return self
        from slurmguard.nodeset import contains  # only when groups exist

        data = copy.deepcopy(self._data)
        for pattern, overrides in self._groups:
            if contains(pattern, node):
                _merge(data, overrides)
        return Config(data, [], self.sources)


def defaults() -> dict[str, Any]:
    _ensure_check_params()
    return _defaults_of(SCHEMA)


def load(path: str | None = None, *, env: Mapping[str, str] | None = None) -> Config:
    """Load and validate the layered configuration; raises ConfigError naming key and value."""
    _ensure_check_params()
    env = os.environ if env is None else env
    main = Path(path or env.get("SLURMGUARD_CONFIG") or DEFAULT_PATH)
    files: list[Path] = []
    if main.exists() or path or env.get("SLURMGUARD_CONFIG"):
        files.append(main)
    confd = main.parent / "conf.d"
    if confd.is_dir():
        files.extend(sorted(confd.glob("*.toml")))
    data = _defaults_of(SCHEMA)
    groups: list[tuple[str, dict[str, Any]]] = []
    cache = _ParseCache(env.get("SLURMGUARD_STATE_DIR"))
    for f in files:
        raw = _read_toml(f, cache)
        for i, group in enumerate(raw.pop("group", []) or []):
            where = f"group[{i}]"
            if not isinstance(group, dict):
                raise ConfigError(f"{f}: {where}: expected a table")
            pattern = group.pop("nodes", None)
            if not isinstance(pattern, str) or not pattern.strip():
                raise ConfigError(f"{f}: {where}.nodes: expected a NodeSet pattern such as \"gpu[001-064]\", got {_show(pattern)}")
            _check_nodeset(f, where, pattern)
            groups.append((pattern, _validate(group, SCHEMA, "", f)))
        _merge(data, _validate(raw, SCHEMA, "", f))
    cache.save()
    return Config(data, groups, [str(f) for f in files])


def _read_toml(f: Path, cache: _ParseCache | None = None) -> dict[str, Any]:
    st = None
    if cache is not None:
        try:
            st = os.stat(f)
        except OSError:
            st = None  # the open below says why
        hit = cache.get(f, st) if st is not None else None
        if hit is not None:
            return hit
    import tomllib  # only on a cache miss: its import is ~8 ms of a hook on a slow core

    try:
        with open(f, "rb") as fh:
            before = os.fstat(fh.fileno())
            text = fh.read()
            after = os.fstat(fh.fileno())
        data = tomllib.loads(text.decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{f}: no such config file") from None
    except PermissionError:
        raise ConfigError(f"{f}: permission denied") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{f}: not valid TOML: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{f}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{f}: cannot read: {exc.strerror}") from None
    if cache is not None and _stat_key(before) == _stat_key(after):  # not rewritten meanwhile
        cache.put(f, before, data)
    return data


# The parsed-config cache (docs/configuration.md, "Parsed-config cache"). The entry scripts
# export $SLURMGUARD_STATE_DIR (hooks.state_dir, from /etc/default/slurmguard); a load that
# sees it keeps every config file it read, parsed, in <state dir>/config.parsed.json, each
# entry valid while its file's device, inode, size, mtime and ctime are unchanged (the way a
# .pyc follows its .py). The cache is used only when it belongs to this user with mode 0600;
# missing, stale, garbage or unwritable: the TOML is parsed, as without a cache.
_CACHE_NAME = "config.parsed.json"
_CACHE_VERSION = 1


def _stat_key(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


class _ParseCache:
    def __init__(self, state_dir: str | None) -> None:
        self.path = Path(state_dir) / _CACHE_NAME if state_dir else None
        self.files: dict[str, Any] = self._read()
        self.used: dict[str, Any] = {}  # what this load read: the next cache holds only these
        self.changed = False

    def _read(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        try:
            with open(self.path, encoding="utf-8") as fh:
                st = os.fstat(fh.fileno())
                if st.st_uid != os.geteuid() or st.st_mode & 0o077:
                    return {}
                doc = json.load(fh)
        except (OSError, ValueError):
            return {}
        ok = isinstance(doc, dict) and doc.get("version") == _CACHE_VERSION
        return doc["files"] if ok and isinstance(doc.get("files"), dict) else {}

    def get(self, f: Path, st: os.stat_result) -> dict[str, Any] | None:
        name = os.path.abspath(f)
        entry = self.files.get(name)
        if (isinstance(entry, dict) and entry.get("key") == _stat_key(st)
                and isinstance(entry.get("data"), dict)):
            self.used[name] = entry
            return copy.deepcopy(entry["data"])  # load() edits what it is given
        return None

    def put(self, f: Path, st: os.stat_result, data: dict[str, Any]) -> None:
        try:
            json.dumps(data)
        except (TypeError, ValueError):  # a TOML date or time (no key takes one): not cached
            return
        self.used[os.path.abspath(f)] = {"key": _stat_key(st), "data": copy.deepcopy(data)}
        self.changed = True

    def save(self) -> None:
        if self.path is None or not (self.changed or self.used.keys() != self.files.keys()):
            return
        try:  # a cache: not durable (lost, the files are parsed again)
            write_atomic(self.path, json.dumps({"version": _CACHE_VERSION, "files": self.used}),
                         durable=False)
        except OSError:  # no state dir (yet), read-only, not root: parse next time too
            pass


def _check_nodeset(f: Path, where: str, pattern: str) -> None:
    from slurmguard.nodeset import check

    try:
        check(pattern, source=f"{where}.nodes")
    except InputError as exc:
        raise ConfigError(f"{f}: {where}.nodes: not a NodeSet pattern: {_show(pattern)} ({exc.message})") from None


def _defaults_of(schema: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, spec in schema.items():
        out[key] = copy.deepcopy(spec.default) if isinstance(spec, Field) else _defaults_of(spec)
    return out


def _merge(into: dict[str, Any], new: Mapping[str, Any]) -> None:
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict) and key not in _TABLE_KEYS:
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


_TABLE_KEYS: set[str] = set()

# Keys that moved: a config naming the old place gets told the new one (one line, no guess).
MOVED: dict[str, str] = {
    f"checks.host.{k}": f"checks.timesync.{k}"
    for k in ("chronyc", "max_offset", "max_offset_unhealthy")
}


def _validate(raw: Mapping[str, Any], schema: Mapping[str, Any], prefix: str, f: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in raw.items():
        path = f"{prefix}{key}"
        spec = schema.get(key)
        if spec is None and path in MOVED:
            raise ConfigError(f"{path}: moved to {MOVED[path]} (in {f})")
        if spec is None:
            section = f"[{prefix.rstrip('.')}]" if prefix else "the top level"
            raise ConfigError(f"{path}: unknown key (in {f}); valid keys of {section}: "
                              + ", ".join(sorted(schema)))
        if isinstance(spec, Field):
            out[key] = _coerce(spec, value, path, f)
        else:
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: expected a table, got {_show(value)} (in {f})")
            out[key] = _validate(value, spec, path + ".", f)
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)  # TOML true is not 1


# One entry per field kind: (does the value have this type, what was expected). A kind's
# extra rule (an absolute path, one of the choices) is a second, separate step below.
_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "path": (lambda v: isinstance(v, str), "a string"),
    "choice": (lambda v: isinstance(v, str), "a string"),
    "int": (_is_int, "an integer"),
    "float": (lambda v: _is_int(v) or isinstance(v, float), "a number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "list[str]": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                  "a list of strings"),
    "list[int]": (lambda v: isinstance(v, list) and all(map(_is_int, v)), "a list of integers"),
    "table": (lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
              "a table of strings"),
}


def _broken_rule(spec: Field, value: Any) -> str | None:
    """What a value of the right type should have been (a kind's extra rule, the minimum), or
    None when it is acceptable."""
    if spec.kind == "path" and not value.startswith("/"):
        return "an absolute path"
    if spec.kind == "choice" and value not in spec.choices:
        return "one of " + ", ".join(spec.choices)
    if spec.kind in ("int", "float") and spec.minimum is not None and value < spec.minimum:
        return f"a number >= {spec.minimum:g}"
    return None


def _coerce(spec: Field, value: Any, path: str, f: Path) -> Any:
    """``value`` checked against ``spec`` (an int where a float is expected becomes a float);
    a ConfigError naming the key, what was expected and the value otherwise."""
    has_type, expected = _KINDS.get(spec.kind, (lambda v: True, ""))
    if not has_type(value):
        raise ConfigError(f"{path}: expected {expected}, got {_show(value)} (in {f})")
    if spec.kind == "float":
        value = float(value)
    broken = _broken_rule(spec, value)
    if broken is not None:
        raise ConfigError(f"{path}: expected {broken}, got {_show(value)} (in {f})")
    problem = spec.validate(value) if spec.validate is not None else None
    if problem:
        raise ConfigError(f"{path}: {problem}, got {_show(value)} (in {f})")
    return value


def _show(value: Any) -> str:
    if isinstance(value, str):
        text = value if len(value) <= 60 else value[:57] + "..."
        return '"' + text.replace("\n", "\\n") + '"'
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_check_params_done = False


def _ensure_check_params() -> None:
    """Pull each check area's PARAMS into the schema (check modules are light: no adapters)."""
    global _check_params_done
    if _check_params_done:
        return
    _check_params_done = True
    from slurmguard.checks import AREA_PARAMS

    for area, fields in AREA_PARAMS.items():
        register_section(f"checks.{area}", fields)
