#!/bin/bash
# Entrypoint of the slurmguard test-cluster image: start munged (and sshd), then the role.
#
#   controller   render slurm.conf into $SG_SHARED, start slurmctld (foreground)
#   node         wait for slurm.conf in $SG_SHARED and the controller's port, start slurmd
#   serve        `slurmguard serve` (the fleet service), once that command exists
#   CMD...       anything else is run as given (e.g. `bash`)
#
# Shared state lives in $SG_SHARED (default /shared; a volume in compose, a bind-mounted
# temp dir in the e2e suite): munge.key (made by the controller when missing, or provided),
# slurm.conf (rendered by the controller), authorized_keys (optional, for root over SSH).
#
# Environment (controller): SG_NODES (Slurm node list, default n[1-4]), SG_CPUS (2),
# SG_MEMORY (MB, 1000), SG_CLUSTER (sgdocker), SG_CRED_EXPIRE (120), SG_SLURMD_TIMEOUT (10),
# SG_HEALTHCHECK_INTERVAL (seconds; empty = no HealthCheckProgram), SG_RESUME_TIMEOUT (120:
# how long slurmctld waits for a node's reboot).
# Environment (node): SG_GPUS (simulated GPUs on this node, default 8; 0 = no GPU),
# SG_CONTROLLER (host name of the controller, default ctl), SG_FRESH_BOOT (1: slurmd runs in
# a time namespace whose boot time is the container's start, so a restarted container is a
# rebooted node to slurmctld; needs the capabilities SYS_ADMIN and SYS_TIME).
set -euo pipefail

SHARED=${SG_SHARED:-/shared}
CONTROLLER=${SG_CONTROLLER:-ctl}
ROLE=${1:-node}

log() { echo "entrypoint[$ROLE]: $*" >&2; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local limit=$1 what=$2; shift 2
    local i=0
    until "$@" 2>/dev/null; do
        i=$((i + 1))
        if [ "$i" -gt $((limit * 5)) ]; then log "gave up waiting for $what"; exit 1; fi
        sleep 0.2
    done
}

start_munge() {
    if [ ! -s "$SHARED/munge.key" ]; then
        if [ "$ROLE" = controller ]; then
            mkdir -p "$SHARED"
            dd if=/dev/urandom bs=1 count=1024 of="$SHARED/munge.key.tmp" 2>/dev/null
            mv "$SHARED/munge.key.tmp" "$SHARED/munge.key"
            log "made a new munge key in $SHARED"
        else
            wait_for 120 "$SHARED/munge.key" test -s "$SHARED/munge.key"
        fi
    fi
    install -o munge -g munge -m 0400 "$SHARED/munge.key" /etc/munge/munge.key
    mkdir -p /run/munge && chown munge:munge /run/munge
    su -s /bin/sh munge -c /usr/sbin/munged
}

start_sshd() {
    [ -f /etc/ssh/ssh_host_ed25519_key ] ||
        ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
    if [ -s "$SHARED/authorized_keys" ]; then
        install -d -m 0700 /root/.ssh
        install -m 0600 "$SHARED/authorized_keys" /root/.ssh/authorized_keys
    fi
    # SetEnv: SSH sessions (triage collect) see the simulated GPUs, as the hooks do.
    /usr/sbin/sshd -o PasswordAuthentication=no -o PermitRootLogin=prohibit-password \
        -o SetEnv=FAKE_NVML_CONFIG=/var/lib/fakehw/nvml.json
}

render_slurm_conf() {
    local hc=""
    if [ -n "${SG_HEALTHCHECK_INTERVAL:-}" ]; then
        hc="HealthCheckProgram=/usr/lib/slurmguard/prolog/slurmguard-healthcheck
HealthCheckInterval=${SG_HEALTHCHECK_INTERVAL}
HealthCheckNodeState=ANY,CYCLE"
    fi
    CLUSTER=${SG_CLUSTER:-sgdocker} CONTROLLER=$(hostname -s) NODES=${SG_NODES:-n[1-4]} \
    CPUS=${SG_CPUS:-2} MEMORY=${SG_MEMORY:-1000} CRED_EXPIRE=${SG_CRED_EXPIRE:-120} \
    SLURMD_TIMEOUT=${SG_SLURMD_TIMEOUT:-10} RESUME_TIMEOUT=${SG_RESUME_TIMEOUT:-120} \
    HEALTHCHECK=$hc \
    python3 - /etc/slurm/slurm.conf.in "$SHARED/slurm.conf" <<'PY'
import os, string, sys
src, dst = sys.argv[1], sys.argv[2]
text = string.Template(open(src).read()).substitute(os.environ)
tmp = dst + ".tmp"
with open(tmp, "w") as f:
    f.write(text)
os.replace(tmp, dst)  # nodes never see a half-written file
PY
}

# Simulated hardware (sg-fault): GPUs in the stand-in NVML's config and in a fixture copy of
# /proc/driver/nvidia/gpus, an empty kernel-log fixture for Xid lines. The GPU count is told
# to slurmguard's gpu checks, when this build has them, in conf.d/10-node.toml.
# (The heredoc runs the installed slurmguard, or the checkout bind-mounted over it.)
setup_fake_hw() {
    local n=${SG_GPUS:-8}
    /usr/local/bin/sg-fault init "$n"
    /opt/slurmguard/bin/python - "$n" <<'PY'
import sys
try:
    from slurmguard.checks import BY_NAME, gpu
    from slurmguard.config import SCHEMA
except Exception as exc:  # slurmguard broken: the hooks say so themselves; start anyway
    print(f"entrypoint: slurmguard does not import: {exc}", file=sys.stderr)
    sys.exit(0)
lines = []
if "expected_count" in getattr(gpu, "PARAMS", {}):
    lines += ["[checks.gpu]", f"expected_count = {int(sys.argv[1])}", ""]
# The hooks run the default checks that this build registers: a checkout whose defaults
# name a check that has not landed yet would otherwise make every hook a checker error.
missing = {h: [c for c in SCHEMA["hooks"][h].default if c not in BY_NAME and c != "all"]
           for h in ("prolog", "epilog")}
if any(missing.values()):
    lines.append("[hooks]")
    for hook, gone in missing.items():
        keep = [c for c in SCHEMA["hooks"][hook].default if c not in gone]
        lines.append(f"{hook} = {keep!r}".replace("'", '"'))
        print(f"entrypoint: hooks.{hook}: not in this build: {gone}", file=sys.stderr)
with open("/etc/slurmguard/conf.d/10-node.toml", "w") as f:
    f.write("\n".join(lines) + "\n")
PY
}

case "$ROLE" in
controller)
    mkdir -p "$SHARED"
    rm -f "$SHARED/slurm.conf"
    start_munge
    render_slurm_conf
    cp "$SHARED/slurm.conf" /etc/slurm/slurm.conf
    start_sshd
    log "starting slurmctld"
    exec /usr/sbin/slurmctld -D -f /etc/slurm/slurm.conf
    ;;
node)
    start_munge
    setup_fake_hw
    /usr/local/bin/sg-fault boot  # every start of the container is a boot of the node
    start_sshd
    wait_for 120 "$SHARED/slurm.conf" test -s "$SHARED/slurm.conf"
    cp "$SHARED/slurm.conf" /etc/slurm/slurm.conf
    # slurmd gives up on an unreachable controller only after long retries; wait here.
    port=$(sed -n 's/^SlurmctldPort=//p' /etc/slurm/slurm.conf); port=${port:-6817}
    wait_for 120 "slurmctld on $CONTROLLER:$port" bash -c "exec 3<>/dev/tcp/$CONTROLLER/$port"
    if [ "${SG_FRESH_BOOT:-0}" = 1 ]; then
        # A container's uptime is the host's: this namespace's boot time is now.
        log "starting slurmd (boot time: now)"
        exec /usr/bin/unshare --time --boottime=-"$(cut -d. -f1 /proc/uptime)" \
            /usr/sbin/slurmd -D -f /etc/slurm/slurm.conf
    fi
    log "starting slurmd"
    exec /usr/sbin/slurmd -D -f /etc/slurm/slurm.conf
    ;;
serve)
    start_munge
    wait_for 120 "$SHARED/slurm.conf" test -s "$SHARED/slurm.conf"
    cp "$SHARED/slurm.conf" /etc/slurm/slurm.conf
    exec /usr/local/bin/slurmguard serve "${@:2}"
    ;;
*)
    exec "$@"
    ;;
esac
