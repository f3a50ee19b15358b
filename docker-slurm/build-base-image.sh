#!/bin/sh
# Build the `debian:<release>` base image from Debian's packages when no registry serves it
# (bookworm = Debian 12 with Slurm 22.05, the default; trixie = Debian 13 with Slurm 24.11;
# forky = Debian testing with Slurm 26.05).
#
# Why: the CI/dev machines reach Debian's package mirror but no container registry, so
# `FROM debian:bookworm` cannot be pulled. debootstrap --variant=minbase gives the same small
# root filesystem that the official image ships; `docker import` tags it with the official
# name, so the one Dockerfile serves both these machines and users who pull from Docker Hub.
#
# Usage: docker-slurm/build-base-image.sh [--force] [RELEASE]  (RELEASE: bookworm, trixie, forky)
# Env:   DEBIAN_MIRROR (default http://deb.debian.org/debian),
#        BASE_TAG (default debian:RELEASE; its tag names the suite when RELEASE is not given)
set -eu

FORCE=
if [ "${1:-}" = "--force" ]; then FORCE=1; shift; fi
if [ -n "${1:-}" ]; then
    TAG=${BASE_TAG:-debian:$1}
    SUITE=$1
else
    TAG=${BASE_TAG:-debian:bookworm}
    SUITE=${TAG#*:}
fi
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
case "$SUITE" in
    *[!a-z]*|"") echo "build-base-image: not a Debian code name: '$SUITE'" >&2; exit 2 ;;
esac

if [ -z "$FORCE" ] && docker image inspect "$TAG" >/dev/null 2>&1; then
    echo "build-base-image: $TAG already present; nothing to do"
    exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
    echo "build-base-image: debootstrap not found (apt-get install -y debootstrap)" >&2
    exit 2
fi

ROOTFS=$(mktemp -d /tmp/slurmguard-rootfs.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT INT TERM
# mktemp -d makes the directory 0700, and "." in the tar becomes the image's "/": open it.
chmod 0755 "$ROOTFS"

# A debootstrap older than the suite has no script for it: testing and unstable are built
# like sid (which is what newer debootstraps link every new code name to).
SCRIPT=
if [ ! -e "/usr/share/debootstrap/scripts/$SUITE" ]; then
    SCRIPT=/usr/share/debootstrap/scripts/sid
fi

start=$(date +%s)
echo "build-base-image: debootstrap --variant=minbase $SUITE from $MIRROR${SCRIPT:+ (script: sid)}"
debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR" $SCRIPT >"$ROOTFS.log" 2>&1 || {
    echo "build-base-image: debootstrap failed; last lines of $ROOTFS.log:" >&2
    tail -n 20 "$ROOTFS.log" >&2
    exit 1
}
rm -f "$ROOTFS.log"
# testing/unstable Release files carry a Valid-Until a week ahead; on a mirror snapshot past
# it every later `apt-get update` refuses the suite. Stable releases carry none, so only
# suites whose Release names one get the exception (in the base image: one Dockerfile).
if grep -qs '^Valid-Until:' "$ROOTFS"/var/lib/apt/lists/*_Release; then
    echo 'Acquire::Check-Valid-Until "false";' \
        >"$ROOTFS/etc/apt/apt.conf.d/99slurmguard-valid-until"
fi
# Like the official image: no apt caches, no package lists in the layer.
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
tar -C "$ROOTFS" -c . | docker import --change 'CMD ["bash"]' - "$TAG" >/dev/null
echo "build-base-image: imported $TAG in $(( $(date +%s) - start ))s"
