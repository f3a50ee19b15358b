"""`slurmguard serve`: ingest results from nodes, run fleet policy, drain flagged nodes."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from slurmguard.config import Config


@click.group("serve", invoke_without_command=True)
@click.option("--host", metavar="ADDR", help="Listen address (default serve.host).")
@click.option("--port", type=int, metavar="PORT", help="Listen port (default serve.port; 0 = any free).")
@click.option("--no-policy", is_flag=True, help="Only ingest; do not run fleet policy or drain.")
@click.pass_context
def serve_cmd(ctx: click.Context, host: str | None, port: int | None, no_policy: bool) -> None:
    """Run the ingest endpoint (POST /ingest, GET /healthz, GET /metrics), the jobs' drain
    notices (GET /drains, POST /suspect) and the fleet policy.

    Each node signs its writes with a MUNGE credential over the body and may write only for
    the Slurm nodes at its own address (serve.auth = munge, the default; docs/security.md);
    test clusters may use the shared token of serve.token_file instead (serve.auth = token;
    mode 0600, serve refuses to start when it is world-readable). Records are written to the store in batches,
    exactly once per record id; flagged nodes (lemons, flapping) are drained through Slurm
    within the blast-radius caps of the [policy] section.

    Any number of replicas may share one PostgreSQL store (docs/serve.md, "Replicas");
    `slurmguard serve status` shows them.

    \b
    Example:
      slurmguard db upgrade && slurmguard serve
      slurmguard serve --port 8742 --no-policy     # ingest only
    """
    if ctx.invoked_subcommand is not None:
        return
    _run(ctx, host, port, no_policy)


@serve_cmd.command("node-key")
@click.argument("node")
@click.pass_context
def node_key_cmd(ctx: click.Context, node: str) -> None:
    """Print NODE's key for serve.auth = "node-key" (sites on auth/slurm, without munged).

    The key is HMAC-SHA256(site key, NODE) from serve.site_key_file (create that once: 32
    random bytes, mode 0600, on the serve hosts only). Put the printed line into the node's
    hooks.node_key_file (root, mode 0600) the way slurm.key reaches the nodes (your
    configuration management); a node's key cannot give another node's (docs/security.md).

    \b
    Example:
      slurmguard serve node-key gpu001 | ssh gpu001 'install -m 0600 /dev/stdin /etc/slurmguard/node.key'
    """
    from slurmguard import config
    from slurmguard.nodekey import node_secret
    from slurmguard.nodeset import validate_node_name
    from slurmguard.serve.token import load_token

    cfg = config.load((ctx.find_root().obj or {}).get("config_path"))
    validate_node_name(node)
    key = load_token(str(cfg["serve.site_key_file"]), key="serve.site_key_file")
    click.echo(node_secret(key.encode(), node))


@serve_cmd.command("node-keys")
@click.option("--out", "out_dir", required=True, metavar="DIR",
              help="Directory to write one NODE.key per node into (created mode 0700).")
@click.option("--nodes", metavar="SET", help="Nodes, e.g. gpu[001-512] (default: every node "
                                             "Slurm knows).")
@click.pass_context
def node_keys_cmd(ctx: click.Context, out_dir: str, nodes: str | None) -> None:
    """Write the key of every node (serve.auth = "node-key") into DIR, one NODE.key file each
    (mode 0600), for the site's configuration management to install as each node's
    hooks.node_key_file. Derived from serve.site_key_file; run it again after a rotation
    (docs/security.md, "Rotation").

    \b
    Example:
      slurmguard serve node-keys --out /srv/cm/files/slurmguard-keys
      slurmguard serve node-keys --out /tmp/keys --nodes 'gpu[001-064]'
    """
    import os

    from slurmguard import config
    from slurmguard.atomic import write_atomic
    from slurmguard.nodekey import node_secret
    from slurmguard.nodeset import expand, validate_node_name
    from slurmguard.serve.token import load_token

    cfg = config.load((ctx.find_root().obj or {}).get("config_path"))
    key = load_token(str(cfg["serve.site_key_file"]), key="serve.site_key_file").encode()
    if nodes:
        names = expand(nodes, source="--nodes")
    else:
        from slurmguard.adapters.slurm.commands import SlurmCLI

        names = [n.name for n in SlurmCLI(cfg.section("slurm")).nodes()]
    for name in names:
        validate_node_name(name)
    os.makedirs(out_dir, mode=0o700, exist_ok=True)
    os.chmod(out_dir, 0o700)
    for name in names:
        write_atomic(os.path.join(out_dir, f"{name}.key"), (node_secret(key, name) + "\n").encode(),
                     mode=0o600)
    click.echo(f"{len(names)} node keys written to {out_dir} (one NODE.key each, mode 0600)")


@serve_cmd.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def status_cmd(ctx: click.Context, as_json: bool) -> None:
    """Show the serve replicas on the store: which are up (heartbeat), the leader, the last
    policy pass, the newest stored record, and PostgreSQL standbys' replay lag.

    \b
    Example:
      slurmguard serve status
      slurmguard serve status --json
    """
    from slurmguard import config
    from slurmguard.output import Result, emit
    from slurmguard.serve.status import replica_status, status_lines
    from slurmguard.store.api import Store

    cfg = config.load((ctx.find_root().obj or {}).get("config_path"))
    store = Store.open(cfg)
    try:
        s = replica_status(store, float(cfg["serve.leader_retry"]))
    finally:
        store.close()
    emit(Result(s, status_lines(s)), as_json)


def _run(ctx: click.Context, host: str | None, port: int | None, no_policy: bool) -> None:
    """serve itself: store, metrics, ingest, leadership and policy, gate socket."""
    from slurmguard import config
    from slurmguard.serve.leader import single_serve
    from slurmguard.store.api import Store

    obj = ctx.find_root().obj or {}
    cfg = config.load(obj.get("config_path"))
    scfg = cfg.section("serve")
    logging.basicConfig(level=logging.DEBUG if obj.get("verbose") else logging.INFO,
                        format="slurmguard serve: %(levelname)s %(message)s", stream=sys.stderr)
    token = _token(cfg)
    if scfg["upgrade"]:
        Store.upgrade(cfg.section("store"))
    store = Store.open(cfg, workers=int(scfg["workers"]))  # sizes a PostgreSQL pool
    held = single_serve(store)  # SQLite: one serve per file (a one-line error otherwise)
    metrics = _metrics(cfg, store)
    from slurmguard.adapters.slurm.commands import SlurmCLI
    from slurmguard.serve.slurmview import CachedNodes

    # One read of the node table every ttl while in use, shared by /drains, the policy pass
    # and the scopes: serve's cost to slurmctld does not follow the job rate (slurmview.py).
    slurm = CachedNodes(SlurmCLI.from_config(cfg), float(scfg["slurm_view_ttl"]),
                        int(scfg["slurm_view_entries_per_ttl"]))
    slurm.counter = metrics.node_views
    slurm.start()
    fleet = None
    if scfg["policy"] and not no_policy:
        from slurmguard.serve.fleet import Fleet
        from slurmguard.serve.incident_metrics import LostGpuHours

        fleet = Fleet(cfg, store, slurm=slurm, metrics=metrics)
        fleet.periodic.append(LostGpuHours(metrics.incident_lost_gpu_hours, store, cfg))
    from slurmguard.serve.nodestates import NodeStates

    # The incumbent's history for `shadow report` (serve/nodestates.py): written by the
    # replica that leads the periodic work, from the view serve reads anyway.
    states = NodeStates(store)
    slurm.on_view = lambda view: (fleet is None or fleet.is_leader) and states.update(view)
    server = _server(cfg, store, token, metrics, fleet, host, port, slurm)
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    h, p = server.address  # bound already; the policy thread runs before the first request
    leader = _leader(cfg, store, fleet, metrics, f"{h}:{p}")
    if store.engine.dialect.name == "postgresql":
        from slurmguard.serve.slurmview import SharedView

        # One reader of the node table for every replica: the leader reads and publishes,
        # the others follow the store, and read Slurm themselves past max_age (slurmview.py).
        slurm.share(SharedView(store, lambda: leader.is_leader, label=leader.label,
                               max_age=float(scfg["slurm_view_max_age"])))
    expiry = _expiry(cfg, store, leader) if fleet is not None else None
    server.start()
    gate_sock = _gate_socket(cfg, obj.get("config_path"), store)
    scheme = "https" if server.httpd.ssl_context is not None else "http"
    click.echo(f"slurmguard serve: listening on {scheme}://{h}:{p} (store {store.where})",
               err=True)
    sys.stderr.flush()
    stop.wait()
    if gate_sock is not None:
        gate_sock.close()
    if expiry is not None:
        expiry.stop()
    if fleet is not None:
        fleet.stop()
    leader.stop()
    server.shutdown()
    slurm.stop()
    store.close()
    if held is not None:
        held.close()


def _leader(cfg: Config, store: Any, fleet: Any, metrics: Any, where: str) -> Any:
    """The leadership that gates the fleet policy's periodic work (serve/leader.py), started
    with it, and the replica's heartbeat row; with --no-policy heartbeat only."""
    import socket

    from slurmguard.serve.leader import Leader

    leader = Leader(store, retry=float(cfg["serve.leader_retry"]),
                    label=f"slurmguard-serve {socket.gethostname()} {where}",
                    gauge=metrics.leader, contend=fleet is not None,
                    last_pass=(lambda: fleet.last_pass) if fleet is not None else None)
    if fleet is not None:
        fleet.start(leader)
    leader.start()
    return leader


def _expiry(cfg: Config, store: Any, leader: Any) -> Any:
    """The leader's expiry of old history (store.retention; None when its interval is 0)."""
    from slurmguard.serve.expiry import Expiry
    from slurmguard.store.retention import RetentionPolicy

    policy = RetentionPolicy.from_section(cfg.section("store.retention"))
    if policy.interval <= 0:
        return None
    expiry = Expiry(store, policy, leader)
    expiry.start()
    return expiry


def _metrics(cfg: Config, store: Any) -> Any:
    """/metrics: serve's own counters, and gauges read from the store at scrape time."""
    from slurmguard.fleet.params import RiskParams
    from slurmguard.metrics.registry import ServeMetrics
    from slurmguard.serve.gauges import add_fleet_gauges, add_goodput_gauges, add_store_gauges

    metrics = ServeMetrics()
    add_store_gauges(metrics, store)
    add_goodput_gauges(metrics, store, cfg.section("goodput")["metrics_window"])
    add_fleet_gauges(metrics, store, risk=RiskParams.from_section(cfg.section("risk")),
                     window_days=cfg.section("fleet")["metrics_window_days"],
                     blast_window=cfg.section("policy")["blast_window"])
    return metrics


def _token(cfg: Config) -> str:
    """The shared token: required with serve.auth = token; otherwise the admins' credential
    for reads (/healthz's figures, /drains of any node, /metrics' per-node series,
    metrics.require_token), so a missing file is no error then."""
    import os

    from slurmguard.serve.token import load_token

    path = str(cfg["serve.token_file"])
    if str(cfg["serve.auth"]) != "token" and not os.path.exists(path):
        return ""
    return load_token(path)


def _server(cfg: Config, store: Any, token: str, metrics: Any, fleet: Any,
            host: str | None, port: int | None, slurm: Any) -> Any:
    """The ingest endpoint; with the fleet policy, its pass after each commit and /permit."""
    from slurmguard.serve.auth import Authenticator
    from slurmguard.serve.drains import DrainView
    from slurmguard.serve.ingest import IngestServer
    from slurmguard.serve.token import load_token

    scfg = cfg.section("serve")
    routes: dict[str, Any] = {"/permit": fleet.permit} if fleet is not None else {}
    # Running jobs ask which of their nodes are drained, and report slow ones (docs/requeue.md).
    drain_view = DrainView(store, slurm, cache_s=0.0)  # slurm: serve's one cached read
    site_key: tuple[bytes, ...] = ()
    if scfg["auth"] == "node-key":  # the current site key, then the previous one (rotation)
        site_key = tuple(load_token(str(scfg[k]), key=f"serve.{k}").encode()
                         for k in ("site_key_file", "site_key_previous_file") if scfg[k])
    auth = Authenticator(str(scfg["auth"]), slurm, store, metrics,
                         munge_socket=str(scfg["munge_socket"]), site_key=site_key,
                         check_peer=bool(scfg["munge_check_peer"]))
    routes["/suspect"] = drain_view.suspect
    routes["/nodestate"] = drain_view.node_state  # a node's own state, for its health check
    job_token = (load_token(str(cfg["notice.job_token_file"]), job=True)
                 if cfg["notice.job_token_file"] else "")
    ssl_context = None
    if scfg["tls_cert"] or scfg["tls_key"]:
        from slurmguard.adapters.tls import server_context

        ssl_context = server_context(str(scfg["tls_cert"]), str(scfg["tls_key"]))
    return IngestServer(store, token, host=host or str(scfg["host"]),
                        port=int(scfg["port"]) if port is None else port,
                        batch_size=int(scfg["batch_size"]),
                        batch_interval=float(scfg["batch_interval"]),
                        max_body=int(scfg["max_body"]),
                        on_commit=fleet.after_ingest if fleet is not None else None,
                        routes=routes,
                        workers=int(scfg["workers"]),
                        max_connections=int(scfg["max_connections"]),
                        idle_timeout=float(scfg["idle_timeout"]),
                        request_timeout=float(scfg["request_timeout"]),
                        metrics=metrics, metrics_token=bool(cfg["metrics.require_token"]),
                        queries={"/drains": drain_view.drains}, job_token=job_token,
                        job_routes=frozenset({"/suspect"}), auth=auth,
                        ssl_context=ssl_context)


def _gate_socket(cfg: Config, config_path: str | None, store: Any) -> Any:
    """The gate's fast path (serve.gate_socket) on serve's ``store``, started; None when not
    configured."""
    scfg = cfg.section("serve")
    if not scfg["gate_socket"]:
        return None
    from slurmguard.gate.sock import GateSocket

    gate_sock = GateSocket(cfg, str(scfg["gate_socket"]), config_path,
                           str(scfg["gate_socket_user"]), store=store)
    gate_sock.start()
    click.echo(f"slurmguard serve: gate socket {scfg['gate_socket']}", err=True)
    return gate_sock
