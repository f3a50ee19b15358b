#!/bin/sh
# Start Debian's dockerd when no Docker engine answers, then wait until `docker info` works.
#
# Why these flags: the CI machines (and this project's dev machine) run inside a container or
# VM without overlayfs-on-overlay support and without permission to rewrite iptables, so the
# engine runs with the vfs storage driver, no iptables rules and no default bridge. Containers
# talk over user-defined networks (`docker network create`), which still work with
# --bridge=none (see docs/docker.md).
#
# Usage: docker-slurm/start-dockerd.sh [LOGFILE]     (default /var/log/slurmguard-dockerd.log)
# Env:   DOCKERD_WAIT (seconds to wait for the engine, default 60)
set -eu

LOG=${1:-/var/log/slurmguard-dockerd.log}
WAIT=${DOCKERD_WAIT:-60}

if docker info >/dev/null 2>&1; then
    echo "start-dockerd: an engine already answers; nothing to do"
    exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
    echo "start-dockerd: dockerd not found; install Debian's docker.io (apt-get install -y docker.io)" >&2
    exit 2
fi

# A stale pid file from an engine that died makes dockerd refuse to start.
if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
    rm -f /var/run/docker.pid
fi

echo "start-dockerd: starting dockerd (log: $LOG)"
# setsid: the engine must outlive the shell (and the CI step) that started it.
setsid dockerd --storage-driver=vfs --iptables=false --bridge=none >>"$LOG" 2>&1 </dev/null &

i=0
while ! docker info >/dev/null 2>&1; do
    i=$((i + 1))
    if [ "$i" -gt "$WAIT" ]; then
        echo "start-dockerd: engine did not answer within ${WAIT}s; last log lines:" >&2
        tail -n 20 "$LOG" >&2 || true
        exit 1
    fi
    sleep 1
done
echo "start-dockerd: engine ready after ${i}s"
