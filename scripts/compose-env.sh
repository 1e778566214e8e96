#!/usr/bin/env bash
# Write the env file compose.yaml reads (default .env, mode 0600), once: a random API
# token and passwords, the group of the Docker socket, and which images to run.
#
#   bash scripts/compose-env.sh [--file PATH] [--port PORT] [--force]
#
# Images: postgres:16, minio/minio and haproxy:2.6 when present or pullable; otherwise the
# local stand-ins simple-postgres:local, simple-s3:local, simple-haproxy:local (built here by
# docker/build-service-images.sh when missing). An existing file is kept unless --force.
# Environment: SIMPLE_POSTGRES_IMAGE / SIMPLE_S3_IMAGE / SIMPLE_LB_IMAGE force a choice;
# PULL_TIMEOUT_S.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
file="$ROOT/.env"
port=8080
force=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --file) file="$2"; shift 2 ;;
        --port) port="$2"; shift 2 ;;
        --force) force=1; shift ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "compose-env.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
log() { echo "compose-env: $*" >&2; }

if [[ -e "$file" && "$force" != 1 ]]; then
    log "$file exists; keeping it (--force writes a new one)"
    exit 0
fi
socket="${DOCKER_HOST:-unix:///var/run/docker.sock}"
socket="${socket#unix://}"
[[ -S "$socket" ]] || { log "no Docker socket at $socket: start Docker first"; exit 1; }

# The registry image if it is here or can be pulled, else the local stand-in.
choose() {
    local registry="$1" local_image="$2" what="$3"
    if docker image inspect "$registry" >/dev/null 2>&1 \
        || timeout "${PULL_TIMEOUT_S:-60}" docker pull -q "$registry" >/dev/null 2>&1; then
        echo "$registry"
        return
    fi
    log "$registry cannot be pulled; using $local_image"
    if ! docker image inspect "$local_image" >/dev/null 2>&1; then
        bash "$ROOT/docker/build-service-images.sh" "$what" >&2
    fi
    echo "$local_image"
}
postgres_image="${SIMPLE_POSTGRES_IMAGE:-$(choose postgres:16 simple-postgres:local postgres)}"
s3_image="${SIMPLE_S3_IMAGE:-$(choose minio/minio:RELEASE.2025-04-22T22-12-26Z simple-s3:local s3)}"
lb_image="${SIMPLE_LB_IMAGE:-$(choose haproxy:2.6 simple-haproxy:local haproxy)}"

secret() { python3 -c 'import secrets; print(secrets.token_urlsafe(32))'; }
umask 077
# A new file (mktemp: O_EXCL, 0600) next to the target, renamed over it: an existing file
# never keeps its mode, and a symlink at $file is replaced, never followed.
tmp="$(mktemp "$(dirname "$file")/.compose-env.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
cat >"$tmp" <<ENV
# Written by scripts/compose-env.sh; read by compose.yaml. Keep it secret.
SIMPLE_API_TOKEN=$(secret)
SIMPLE_POSTGRES_PASSWORD=$(secret)
SIMPLE_S3_SECRET=$(secret)
SIMPLE_SIGNING_KEY=$(secret)
SIMPLE_DOCKER_GID=$(stat -c %g "$socket")
SIMPLE_PORT=$port
SIMPLE_POSTGRES_IMAGE=$postgres_image
SIMPLE_S3_IMAGE=$s3_image
SIMPLE_SANDBOX_IMAGE=simple-sandbox:$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$ROOT/controller/__init__.py")
SIMPLE_LB_IMAGE=$lb_image
ENV
chmod 600 "$tmp"
mv -f -T "$tmp" "$file"
trap - EXIT
log "wrote $file (API token: SIMPLE_API_TOKEN in it)"
