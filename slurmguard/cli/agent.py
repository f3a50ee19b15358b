"""`slurmguard agent`: the resident node agent (see slurmguard/node/agent.py and docs/agent.md)."""

from __future__ import annotations

import logging
import signal
import sys
from typing import Any

import click


@click.command("agent")
@click.option("--node", metavar="NAME",
              help="Node name when $SLURMD_NODENAME is unset (default: the short hostname).")
@click.option("--socket", "socket_path", metavar="PATH",
              help="Unix socket to answer on (default agent.socket; %n = node name).")
@click.pass_context
def agent_cmd(ctx: click.Context, node: str | None, socket_path: str | None) -> None:
    """Run the resident node agent: answers "run hook X now" for the thin hook client.

    Keeps NVML open (with an event set for Xid errors), follows the kernel log, keeps the slow
    sources' values (agent.background) for agent.max_age seconds (re-read by the next hook
    after that; agent.refresh > 0 also refreshes them on a period), and runs prolog, epilog or
    healthcheck on request with the same code, verdict and reason as `slurmguard prolog`.
    The socket is mode 0600 and answers root (and the agent's own user) only. It never
    drains on its own schedule unless agent.healthcheck_interval > 0.

    \b
    Example:
      systemctl enable --now slurmguard-agent     # the unit runs: slurmguard agent
      slurmguard agent --node gpu001 --socket /run/slurmguard/agent.sock
    """
    from slurmguard.node import agent as agent_mod
    from slurmguard.node.hooks import node_identity

    obj = ctx.find_root().obj or {}
    logging.basicConfig(level=logging.DEBUG if obj.get("verbose") else logging.INFO,
                        format="slurmguard agent: %(levelname)s %(message)s", stream=sys.stderr)
    name = node_identity(node)
    agent = agent_mod.Agent(obj.get("config_path"), name)
    path = agent_mod.socket_path(socket_path or str(agent.cfg["agent.socket"]), name)

    def stop(signum: int, frame: Any) -> None:
        agent.stop.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    agent_mod.serve(agent, path, ready=lambda: print(f"ready {path}", flush=True))
