#!/usr/bin/env bash
# Build the local base image simple-base:bookworm from Debian packages with debootstrap.
#
# For machines that cannot pull from a container registry: the sandbox and
# controller Dockerfiles accept it as BASE_IMAGE instead of python:3.11-slim.
# It holds a minimal Debian bookworm with python3, python3-venv and
# ca-certificates. Idempotent: does nothing when the image already exists
# (set FORCE=1 to rebuild). Needs root (debootstrap) and a Debian mirror.
#
# Environment: BASE_TAG (default simple-base:bookworm), DEBIAN_SUITE (bookworm),
# DEBIAN_MIRROR (http://deb.debian.org/debian), FORCE (1 = rebuild).
set -euo pipefail

BASE_TAG="${BASE_TAG:-simple-base:bookworm}"
DEBIAN_SUITE="${DEBIAN_SUITE:-bookworm}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES="python3,python3-venv,ca-certificates"

log() { echo "build-base: $*" >&2; }

if [[ "${FORCE:-0}" != "1" ]] && docker image inspect "$BASE_TAG" >/dev/null 2>&1; then
    log "$BASE_TAG already exists; nothing to do (FORCE=1 rebuilds it)"
    exit 0
fi

if [[ "$(id -u)" != "0" ]]; then
    log "debootstrap needs root; run as root or pull python:3.11-slim and set BASE_IMAGE"
    exit 1
fi

if ! command -v debootstrap >/dev/null 2>&1; then
    log "installing debootstrap"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

workdir="$(mktemp -d "${TMPDIR:-/tmp}/simple-base.XXXXXX")"
trap 'rm -rf "$workdir"' EXIT
rootfs="$workdir/rootfs"

start=$(date +%s)
log "debootstrap $DEBIAN_SUITE (minbase + $PACKAGES) from $DEBIAN_MIRROR"
debootstrap --variant=minbase --include="$PACKAGES" \
    "$DEBIAN_SUITE" "$rootfs" "$DEBIAN_MIRROR" >"$workdir/debootstrap.log" 2>&1 || {
    tail -n 30 "$workdir/debootstrap.log" >&2
    log "debootstrap failed (full log above); check DEBIAN_MIRROR is reachable"
    exit 1
}

# Keep the image small and free of host state: no package lists, caches, docs, logs.
chroot "$rootfs" apt-get clean
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/cache/debconf/*-old "$rootfs"/var/log/* "$rootfs"/tmp/* \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
    "$rootfs"/usr/share/locale/*
find "$rootfs" -name '__pycache__' -type d -prune -exec rm -rf {} +
# Package sources for whoever extends the image (debootstrap leaves only the mirror line).
echo "deb $DEBIAN_MIRROR $DEBIAN_SUITE main" >"$rootfs/etc/apt/sources.list"
: >"$rootfs/etc/resolv.conf"
: >"$rootfs/etc/hostname"

log "importing the root filesystem as $BASE_TAG"
tar -C "$rootfs" --numeric-owner -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    --message "simple-base: debootstrap $DEBIAN_SUITE minbase + $PACKAGES" \
    - "$BASE_TAG" >/dev/null

log "built $BASE_TAG in $(( $(date +%s) - start ))s ($(docker image inspect -f '{{.Size}}' "$BASE_TAG" | numfmt --to=iec))"
