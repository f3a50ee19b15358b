"""`slurmguard triage`: rank suspect nodes; `triage collect`: evidence bundles over SSH."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

import click

from slurmguard.cli._common import iso, load_config, warn
from slurmguard.errors import EXIT_EXTERNAL, EXIT_OK, ConfigError, InputError, SlurmguardError
from slurmguard.output import Block, Result, Table, emit

if TYPE_CHECKING:
    from slurmguard.config import Config


@click.group("triage", invoke_without_command=True)
@click.option("--limit", type=click.IntRange(1, 100000), default=20, show_default=True,
              help="Suspects shown at most.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.pass_context
def triage_cmd(ctx: click.Context, limit: int, as_json: bool) -> None:
    """Rank suspect nodes with the evidence; `triage collect` gathers evidence from nodes.

    Without a subcommand: open fleet alerts (suspected shared causes) first, then suspects
    ranked by score: lemon and burn-in marks, unhealthy runs in 7 days (repeat offenders),
    failing now, hooks much slower than the fleet's, a node risk score at or above risk.level
    (docs/fleet.md). Members of a fleet alert count half:
    the shared cause is the better suspect. Scoring: docs/triage.md.

    \b
    Example:
      slurmguard triage
      slurmguard triage --json --limit 5
      slurmguard triage collect 'gpu[001-004]' --tar /tmp/evidence.tar.gz
    """
    if ctx.invoked_subcommand is not None:
        return
    from slurmguard.fleet.params import RiskParams
    from slurmguard.store import Store
    from slurmguard.store.fleet import node_risks
    from slurmguard.triage.rank import rank

    cfg = load_config(ctx)
    store = Store.open(cfg)
    now = time.time()
    alerts = store.nodes.alerts(open_only=True)
    rp = RiskParams.from_section(cfg.section("risk"))
    suspects = rank(store.nodes.summary(), alerts, store.nodes.hook_speeds(since=now - 86400),
                    node_risks(store.engine, rp, now=now), rp.level)[:limit]
    data = {"alerts": [{"id": a.id, "cause": a.cause, "scope": a.scope, "nodes": a.nodes,
                        "count": a.count, "message": a.message} for a in alerts],
            "suspects": [dict(s.to_dict(), rank=i + 1) for i, s in enumerate(suspects)]}
    blocks: list[Block] = []
    if alerts:
        blocks += ["Suspected shared causes (open fleet alerts):",
                   Table([[f"#{a.id}", a.cause, a.scope, a.count, a.nodes, a.message] for a in alerts],
                         ["alert", "cause", "scope", "nodes", "nodeset", "message"]), ""]
    blocks.append(Table([[i + 1, s.node, f"{s.score:g}", "; ".join(s.evidence)]
                         for i, s in enumerate(suspects)], ["rank", "node", "score", "evidence"])
                  if suspects else "No suspects: no node has failures, marks or slow hooks on record.")
    emit(Result(data, blocks), as_json)


@triage_cmd.command("collect")
@click.argument("nodeset")
@click.option("--out", "out_dir", metavar="DIR",
              help="Write the bundle into this new directory (default ./slurmguard-triage-<UTC time>).")
@click.option("--tar", "tar_file", metavar="FILE", help="Write the bundle as a .tar.gz file instead.")
@click.option("--parallel", type=click.IntRange(1, 512), help="Nodes at once (config triage.parallel, 16).")
@click.option("--user", help="SSH login user (config triage.user, root).")
@click.option("--identity", metavar="KEY", help="Private key file (config triage.identity).")
@click.option("--known-hosts", metavar="FILE", multiple=True,
              help="known_hosts file; repeatable (default ~/.ssh/known_hosts, /etc/ssh/ssh_known_hosts).")
@click.option("--port", type=click.IntRange(1, 65535), help="SSH port (config triage.port, 22).")
@click.option("--host-map", metavar="NODESET=HOST[:PORT]", multiple=True,
              help="Reach these nodes at this address; repeatable (config triage.host_map).")
@click.option("--timeout", type=click.FloatRange(min=0.1), metavar="SECONDS",
              help="Per remote command (config triage.command_timeout, 60).")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
@click.pass_context
def collect_cmd(ctx: click.Context, nodeset: str, out_dir: str | None, tar_file: str | None,
                parallel: int | None, user: str | None, identity: str | None,
                known_hosts: tuple[str, ...], port: int | None, host_map: tuple[str, ...],
                timeout: float | None, as_json: bool) -> int:
    """Collect an evidence bundle from each node of NODESET over SSH.

    On every node, in parallel: `slurmguard check --json`, kernel-log lines with NVIDIA Xids,
    `nvidia-smi -q` when present, InfiniBand port state from sysfs; plus the node's recent
    results from the store when one is configured. Host keys must already be in known_hosts:
    an unknown host is refused, never added. A node that fails (refused key, auth failure,
    timeout) is recorded in the manifest and the summary; the others still complete.

    Exit status: 0 when every node answered, 4 when at least one failed (the bundle is still
    written), 6 for a bad NODESET, output path, host map or missing key file.

    \b
    Example:
      slurmguard triage collect 'gpu[001-008]' --out /tmp/triage-0412
      slurmguard triage collect gpu007 --tar gpu007.tar.gz --known-hosts /etc/ssh/ssh_known_hosts
      slurmguard triage collect 'n[1-2]' --host-map 'n[1-2]=127.0.0.1:2222' --identity ~/.ssh/id_ed25519
    """
    from slurmguard.nodeset import expand
    from slurmguard.triage.bundle import Bundle

    nodes = expand(nodeset)
    try:
        import paramiko  # noqa: F401  (fail early with a clear message)
        import tqdm  # noqa: F401

        from slurmguard.triage.collect import CollectOptions, collect, parse_host_map
    except ImportError as exc:
        raise ConfigError(f"triage collect needs {exc.name}: pip install 'slurmguard[ssh]'") from None
    cfg = load_config(ctx)
    opts = CollectOptions.from_config(
        cfg.section("triage"), user=user, port=port, identity=identity,
        known_hosts=tuple(known_hosts) or None, parallel=parallel, command_timeout=timeout,
        host_map=parse_host_map(host_map) if host_map else None,
    )
    # Fail once, up front, rather than once per node for a typo in a path.
    for path in opts.known_hosts:
        if not os.path.isfile(os.path.expanduser(path)):
            raise InputError(f"--known-hosts / triage.known_hosts: no such file: {path}")
    if opts.identity and not os.path.isfile(os.path.expanduser(opts.identity)):
        raise InputError(f"--identity / triage.identity: no such file: {opts.identity}")
    if not out_dir and not tar_file:
        out_dir = "slurmguard-triage-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    bundle = Bundle(out_dir, tar_file)
    manifest = collect(nodes, opts, bundle, recent=_recent_results(cfg))
    emit(Result({"bundle": bundle.location, **manifest}, _summary(bundle.location, manifest)),
         as_json)
    failed = [n for n, e in manifest["nodes"].items() if e["status"] == "failed"]
    for node in failed:
        warn(f"error: {node}: {manifest['nodes'][node]['error']}")
    return EXIT_EXTERNAL if failed else EXIT_OK


def _summary(location: str, manifest: dict[str, Any]) -> list[Block]:
    rows = []
    for node, e in manifest["nodes"].items():
        facts = e["facts"]
        problems = "; ".join(f"{k}: {v['error']}" for k, v in e["steps"].items() if v.get("error"))
        rows.append([node, e["status"], facts.get("xid_count", "-"), facts.get("ib_ports", "-"),
                     facts.get("nvidia_smi", "-"), e["error"] or problems or ""])
    s = manifest["summary"]
    return [Table(rows, ["node", "status", "xids", "ib ports", "nvidia-smi", "error"]),
            f"\n{s['ok']} ok, {s['partial']} partial, {s['failed']} failed; bundle: {location}"]


def _recent_results(cfg: Config) -> Any:
    """A function node -> its recent results and events from the store, or None when no
    store is configured or it cannot be opened (the bundle is still worth having)."""
    section = cfg.section("store")
    if not section.get("url") and not os.path.exists(section.get("path", "")):
        return None
    try:
        from slurmguard.store import Store

        store = Store.open(cfg)
    except (ImportError, SlurmguardError) as exc:
        warn(f"warning: no recent results in the bundle: {getattr(exc, 'message', exc)}")
        return None

    def recent(node: str) -> list[dict[str, Any]]:
        return [{"at": iso(i.at), "kind": i.kind, "health": i.health, "actor": i.actor,
                 "source": i.source, "reason": i.reason, "checks": list(i.checks)}
                for i in store.nodes.history(node, limit=100)]

    return recent
