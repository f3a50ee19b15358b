#!/bin/sh
# Build the `debian:bookworm` base image from Debian's packages when no registry serves it.
#
# Why: the CI/dev machines reach Debian's package mirror but no container registry, so
# `FROM debian:bookworm` cannot be pulled. debootstrap --variant=minbase gives the same small
# root filesystem that the official image ships; `docker import` tags it with the official
# name, so the one Dockerfile serves both these machines and users who pull from Docker Hub.
#
# Usage: docker-slurm/build-base-image.sh [--force]
# Env:   DEBIAN_MIRROR (default http://deb.debian.org/debian), BASE_TAG (default debian:bookworm)
set -eu

TAG=${BASE_TAG:-debian:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=${TAG#*:}

if [ "${1:-}" != "--force" ] && docker image inspect "$TAG" >/dev/null 2>&1; then
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

start=$(date +%s)
echo "build-base-image: debootstrap --variant=minbase $SUITE from $MIRROR"
debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 || {
    echo "build-base-image: debootstrap failed; last lines of $ROOTFS.log:" >&2
    tail -n 20 "$ROOTFS.log" >&2
    exit 1
}
rm -f "$ROOTFS.log"
# Like the official image: no apt caches, no package lists in the layer.
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
tar -C "$ROOTFS" -c . | docker import --change 'CMD ["bash"]' - "$TAG" >/dev/null
echo "build-base-image: imported $TAG in $(( $(date +%s) - start ))s"
