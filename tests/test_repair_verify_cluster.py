"""Verification after a repair, on a real Slurm cluster and a real `slurmguard serve`: what
the node itself reports after its reboot, and its quick burn-in judged against its peers.

One 6-node cluster for the module (tests/support/repairrig.py). Slurm's own reboot machinery
runs: ``RebootProgram`` asks the test's "BMC" to restart the node, and the BMC only restarts
it (slurmd killed, the node's simulated hardware booted: a new boot id, a fresh kernel log, a
GPU still broken logged by the driver again; slurmd started in a time namespace whose boot
time is now, so slurmctld completes its reboot). It writes no health record: slurmd runs
``HealthCheckProgram`` (this checkout's `slurmguard healthcheck`, the ``gpu-xid`` check on the
node's kernel log) as it starts, before it registers, and that run, reported to serve as every
node reports, is verification's first half. The drain itself is the same health check's,
run as slurmd runs it.

Verification's second half, the quick burn-in (``repair.verify_burnin``): the real
`slurmguard burnin worker --level quick` job, submitted by serve into the node's repair
reservation, with one site measurement (tests/support/burninsite.py ``site-fault``: a hard
failure on a node named in ``FAKE_BENCH_FAULT_DIR``, 50 s instead of 10 s on a node with a
``NODE.slow`` file there). The peers are measured first by the nightly burn-in's own command
(`burnin submit --wait` on n3-n6), so the quick burn-in is judged against a group of 5, as the
nightly report judges: pass, flagged, or failed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.helpers import run_sg, sg_env
from support.repairrig import BMC, Rig, boot_runs, module_rig, peers_burnin, prepare, xid_drain
from support.wait import counter_advanced, wait_for

pytestmark = pytest.mark.slurm
PEERS = ["n3", "n4", "n5", "n6"]  # whose nightly burn-in the quick burn-ins are judged against


@pytest.fixture(scope="module")
def _cluster(tmp_path_factory):  # type: ignore[no-untyped-def]
    yield from module_rig(tmp_path_factory, 6)


@pytest.fixture
def rig(_cluster):  # type: ignore[no-untyped-def]
    yield _cluster
    _cluster.reset()


def test_a_transient_xid_is_repaired_by_a_reboot_with_no_human(rig, tmp_path):
    """Xid 79 on n1, found by n1's own health check: drained, rebooted through Slurm, the
    health check at boot (slurmd's HealthCheckProgram) passes, the quick burn-in in n1's
    reservation passes against its 4 peers' nightly burn-in, returned on probation."""
    s = prepare(rig, tmp_path, burnin=True)
    cluster, store = s.cluster, s.store
    with BMC(cluster, rig.bmc_dir, s.hw) as bmc:
        s.serve.start()
        try:
            peers_burnin(s, PEERS)
            t0 = xid_drain(rig, s, "n1")
            wait_for(lambda: [e for e in store.nodes.events(node="n1", kinds=["repair_return"])],
                     120, interval=0.5, what="repair_return of n1")
            info = cluster.wait_node("n1", lambda n: not n.drained and not n.down, 30,
                                     what="back in service")
            counted = {r: s.serve.metric("slurmguard_repair_steps_total", cause="gpu-xid:79",
                                         result=r) for r in ("started", "proven", "burn-in",
                                                             "verified", "returned", "ticketed")}
            returned = s.serve.metric("slurmguard_repair_drain_to_return_seconds_count")
            report = run_sg("-c", str(s.cfg_path), "burnin", "report", "--json",
                            env=sg_env(**s.env))
        finally:
            s.serve.stop()
    assert [n for n, _ in bmc.reboots] == ["n1"]  # one reboot, through Slurm's RebootProgram
    assert counted == {"started": 1, "proven": 1, "burn-in": 1, "verified": 1, "returned": 1,
                       "ticketed": 0}
    ev = sorted(store.nodes.events(node="n1", limit=100), key=lambda e: (e.at, e.id))
    kinds = [e.kind for e in ev]
    assert kinds.count("repair_rung") == 1 and kinds.count("repair_return") == 1
    assert "repair_ticket" not in kinds and "lemon" not in kinds
    assert all(e.actor_kind != "admin" for e in ev)  # human actions: 0
    start = next(e for e in ev if e.kind == "repair_start")
    evidence = Path(start.details["evidence"])
    assert (evidence / "slurm-node.json").is_file()  # the evidence bundle, kept before the reboot
    assert "Xid 79" in (evidence / "slurm-node.json").read_text()
    (st,) = store.nodes.summary(["n1"])
    assert st.probation and not st.lemon  # returned on probation
    assert info.state == "idle"
    assert "sg_repair_n1" not in cluster.run("scontrol", "show", "reservation").stdout
    at = {k: next(e.at for e in ev if e.kind == k and (k != "repair_outcome" or
                                                        e.details.get("result") == r))
          for k, r in (("drain", ""), ("repair_start", ""), ("repair_rung", ""),
                       ("repair_outcome", "proven"), ("repair_return", ""))}
    verified = next(e for e in ev if e.details.get("result") == "verified")
    # Verification's first half: the node's own health check, run by slurmd as it started
    # after the reboot (before it registered, so before the proof), passed and reported.
    (boot,) = boot_runs(s, "n1", bmc.reboots[0][1])
    assert boot.health == "healthy" and boot.at < at["repair_outcome"], boot
    # Verification's second half: the quick burn-in ran on n1, inside n1's repair reservation,
    # and was judged against its peers: a real verdict, the run's and the outcome's.
    (sub,) = [e for e in ev if e.kind == "repair_burnin"]
    job = cluster.job(sub.details["job"])
    assert job["JobState"] == "COMPLETED" and job["NodeList"] == "n1", job
    (run,) = store.burnin.latest_runs(0.0, ["n1"])
    assert (run.id, run.level, run.status) == (sub.details["run"], "quick", "complete")
    assert run.reservation == sub.details["reservation"] == "sg_repair_n1"
    assert run.verdict == verified.details["burnin_verdict"] == "pass"
    assert "quick burn-in passes (pass)" in verified.reason
    assert report.returncode == 0, report.stderr
    # ... by the nightly report's rule: n1 within its group of 5 (itself and the 4 peers).
    judged = json.loads(report.stdout)
    (n1,) = [v for v in judged["nodes"] if v["node"] == "n1"]
    (group,) = [g for g in judged["groups"] if g["group"] == n1["group"]]
    assert (n1["verdict"], n1["run_id"], group["n"]) == ("pass", run.id, 5), judged
    assert boot.at < sub.at < verified.at
    steps = {"drain->evidence": at["repair_start"] - at["drain"],
             "evidence->reboot asked": at["repair_rung"] - at["repair_start"],
             "reboot asked->RebootProgram": bmc.reboots[0][1] - at["repair_rung"],
             "RebootProgram->proven": at["repair_outcome"] - bmc.reboots[0][1],
             "proven->burn-in submitted": sub.at - at["repair_outcome"],
             "burn-in->verified": verified.at - sub.at,
             "verified->returned": at["repair_return"] - verified.at,
             "drain->return": at["repair_return"] - t0}
    print("\n" + "\n".join(f"  {k:28s} {v:6.1f} s" for k, v in steps.items()))
    assert steps["drain->return"] < 120
    assert returned == 1
    # The same story as one incident (docs/incidents.md), read from this store by the CLI.
    r = run_sg("-c", str(s.cfg_path), "incident", "show", f"n1-{int(at['drain'])}", "--json")
    assert r.returncode == 0, r.stderr
    inc = json.loads(r.stdout)
    assert (inc["cause"], inc["outcome"], inc["returned_at"]) == ("gpu-xid:79", "returned",
                                                                  at["repair_return"])
    node = [x["what"].split(":")[0] for x in inc["timeline"] if x["lane"] == "node"]
    assert node == ["first bad signal", "drained by slurmguard", "repair", "repair rung",
                    "repair proof", "repair verification", "repair proof", "repair",
                    "probation started"], node


def test_a_fault_that_survives_is_seen_by_the_health_check_at_boot_and_ticketed(rig,
                                                                               tmp_path):
    """GPU 0 of n2 stays off the bus: after the reboot the driver logs it again, n2's own
    health check at boot fails on it, and that failure is the rung's outcome (no quick
    burn-in is started on a node that fails its health check): the ticket, once, with the
    evidence, and n2 stays out as a lemon although Slurm returned it after the reboot."""
    s = prepare(rig, tmp_path, burnin=True)
    cluster, store = s.cluster, s.store
    ticket_log = tmp_path / "tickets.txt"
    ticket = tmp_path / "ticket.sh"
    ticket.write_text(f'#!/bin/sh\necho "$@" >> {ticket_log}\n')
    ticket.chmod(0o755)
    text = s.cfg_path.read_text().replace('mode = "act"', f'mode = "act"\nticket = ["{ticket}", '
                                          '"{node}", "{cause}", "{evidence}"]')
    s.cfg_path.write_text(text + '\n[repair.ladders]\n"gpu-xid:79" = "reboot, ticket"\n')
    s.hw.broken.add("n2")
    with BMC(cluster, rig.bmc_dir, s.hw) as bmc:
        s.serve.start()
        try:
            t0 = xid_drain(rig, s, "n2")
            wait_for(lambda: store.nodes.events(node="n2", kinds=["repair_ticket"]), 120,
                     interval=0.5, what="repair_ticket of n2")
            counter_advanced(s.serve.policy_passes, by=3, timeout=30, what="policy passes")
        finally:
            s.serve.stop()
    assert [n for n, _ in bmc.reboots] == ["n2"]
    ev = sorted(store.nodes.events(node="n2", limit=100), key=lambda e: (e.at, e.id))
    outs = [e for e in ev if e.kind == "repair_outcome"]
    assert [(e.details["rung"], e.details["result"]) for e in outs] == [
        ("reboot", "proven"), ("reboot", "transient")]
    # Judged on what n2 reported at boot, not on a wait for repair.settle to run out.
    assert outs[1].reason == "reboot: transient: gpu-xid:79 fails again after reboot", outs[1]
    assert outs[1].at - outs[0].at < 10.0
    ticketed = next(e.at for e in ev if e.kind == "repair_ticket")
    print(f"\n  proven -> transient {outs[1].at - outs[0].at:.1f} s, "
          f"drain -> ticket {ticketed - t0:.1f} s")
    (boot,) = boot_runs(s, "n2", bmc.reboots[0][1])
    assert boot.health == "unhealthy" and boot.checks == ("gpu-xid",), boot
    assert boot.at < outs[0].at  # HealthCheckProgram ran before slurmd registered
    assert "repair_burnin" not in [e.kind for e in ev]
    lines = ticket_log.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("n2 gpu-xid:79 ")  # called once, with evidence
    assert Path(lines[0].split()[2]).is_dir()
    kinds = [e.kind for e in ev]
    assert kinds.count("repair_ticket") == 1 and "repair_return" not in kinds
    (st,) = store.nodes.summary(["n2"])
    # A lemon's reason is a drain reason: policy drains a lemon again with it.
    assert st.lemon and st.lemon_reason.startswith("slurmguard: repair: ticket: ")
    # Kept out by the ticket itself: n2 was still DOWN from the reboot (the ticket came
    # seconds after the proof), and Slurm's ReturnToService would have put it back in service
    # at its next ping, after the reservation was gone; drained while DOWN, it came back drained.
    (tk,) = [e for e in ev if e.kind == "repair_ticket"]
    assert tk.details["kept_out"] == "drained", tk
    info = cluster.node("n2")
    assert info.drained and info.reason.startswith("slurmguard: repair: ticket: "), info
    # As one incident: ended in a ticket, still out (docs/incidents.md).
    r = run_sg("-c", str(s.cfg_path), "incident", "list", "--since", "1h", "--json")
    assert r.returncode == 0, r.stderr
    [inc] = json.loads(r.stdout)["incidents"]
    assert (inc["nodes"], inc["outcome"], inc["returned_at"]) == (["n2"], "ticket", None)


def _burnin_fails_verification(rig: Rig, tmp_path: Path, node: str, fault: str,  # noqa: ANN202
                                peers: bool):
    """Repair of an Xid 79 on ``node`` whose health checks pass after the reboot but whose
    quick burn-in finds ``fault`` (a file in FAKE_BENCH_FAULT_DIR): until the ticket.
    ``peers``: the peers' nightly burn-in first (a hard failure needs no group)."""
    s = prepare(rig, tmp_path, burnin=True)
    with s.cfg_path.open("a") as f:
        f.write('\n[repair.ladders]\n"gpu-xid:79" = "reboot, ticket"\n')
    (tmp_path / "faults" / fault).touch()
    with BMC(s.cluster, rig.bmc_dir, s.hw) as bmc:
        s.serve.start()
        try:
            if peers:
                peers_burnin(s, PEERS)
            xid_drain(rig, s, node)
            wait_for(lambda: s.store.nodes.events(node=node, kinds=["repair_ticket"]), 120,
                     interval=0.5, what=f"repair_ticket of {node}")
        finally:
            s.serve.stop()
    assert [n for n, _ in bmc.reboots] == [node]
    ev = sorted(s.store.nodes.events(node=node, limit=100), key=lambda e: (e.at, e.id))
    outs = [e for e in ev if e.kind == "repair_outcome"]
    assert [(e.details["rung"], e.details["result"]) for e in outs] == [
        ("reboot", "proven"), ("reboot", "transient")]
    (boot,) = boot_runs(s, node, bmc.reboots[0][1])
    assert boot.health == "healthy", boot  # the health checks pass: only the load finds it
    (sub,) = [e for e in ev if e.kind == "repair_burnin"]
    assert s.cluster.job(sub.details["job"])["NodeList"] == node
    (run,) = s.store.burnin.latest_runs(0.0, [node])
    kinds = [e.kind for e in ev]
    assert "repair_return" not in kinds and kinds.count("repair_ticket") == 1
    (st,) = s.store.nodes.summary([node])
    assert st.lemon and not st.probation
    (tk,) = [e for e in ev if e.kind == "repair_ticket"]
    assert tk.details["kept_out"] == "drained", tk  # the ticket drained it again
    assert s.cluster.node(node).drained  # kept out
    assert f"sg_repair_{node}" not in s.cluster.run("scontrol", "show", "reservation").stdout
    return outs[1], run


def test_a_quick_burn_in_that_fails_is_a_failed_rung_and_the_node_stays_out(rig, tmp_path):
    """The reboot clears what the health checks see; the quick burn-in in the reservation
    finds the fault under load: a failed rung in the ledger, then the ladder's ticket."""
    out, run = _burnin_fails_verification(rig, tmp_path, "n2", "n2", peers=False)
    assert out.details["burnin_verdict"] == "failed", out.reason
    assert "quick burn-in failed" in out.reason and "lost a GPU under load" in out.reason
    assert (run.status, run.verdict, run.reservation) == ("failed", "failed", "sg_repair_n2")


def test_a_quick_burn_in_slower_than_its_peers_is_a_failed_rung(rig, tmp_path):
    """Every check passes after the reboot, the quick burn-in completes, but n2 takes 50 s
    where its 4 peers' nightly burn-in took 10 s: judged against them it is flagged (a
    straggler, clearly: score 0.2), a failed rung, and n2 is not returned."""
    out, run = _burnin_fails_verification(rig, tmp_path, "n2", "n2.slow", peers=True)
    assert out.details["burnin_verdict"] == "flagged", out.reason
    assert "quick burn-in flagged" in out.reason, out.reason
    assert "site_seconds 50 s = 0.20 of group median" in out.reason, out.reason
    print(f"\n  {out.reason}")
    assert (run.status, run.verdict, run.reservation) == ("complete", "flagged", "sg_repair_n2")


def test_only_our_own_reboot_down_is_drained_while_down(rig):
    """The adapter's drain of a node still DOWN from repair's reboot (what keeps a ticketed
    node out): our reason only; an admin's DOWN and a node in service are left alone."""
    c, cli = rig.cluster, rig.cluster.cli()
    ticket = "slurmguard: repair: ticket: ladder exhausted after 1 rungs"
    c.run("scontrol", "update", "nodename=n4", "state=down", "reason=PSU swap, ask Kim")
    c.run("scontrol", "update", "nodename=n5", "state=down",
          "reason=slurmguard: repair: gpu-xid:79: reboot (attempt 1)")
    assert not cli.drain_ours_down("n4", ticket)
    assert cli.node("n4").raw["Reason"].startswith("PSU swap, ask Kim")  # theirs, untouched
    assert not cli.drain_ours_down("n6", ticket)  # in service: not DOWN, nothing to do
    assert not cli.node("n6").drained
    assert cli.drain_ours_down("n5", ticket)
    info = cli.node("n5")
    assert info.down and info.drained and info.raw["Reason"].startswith(ticket), info
