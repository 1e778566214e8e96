#!/usr/bin/env bash
# Build the SIMPLE images: simple-sandbox:latest, simple-controller:latest (`make images`)
# and simple-cli:latest (the client alone; `make release` builds it too), each also tagged
# with the chart's appVersion and the package's version (controller/__init__.py).
#
# Usage: docker/build-images.sh [sandbox] [controller] [cli]    (default: sandbox controller)
#
# 1. Base: BASE_IMAGE if set; else python:3.11-slim when it is present locally;
#    else simple-base:bookworm, built from Debian packages by build-base.sh, so
#    no container registry is needed.
# 2. Wheels are fetched on the host into build/wheels-{sandbox,controller}
#    (the builds themselves use no network), at the versions pinned in
#    pyproject.toml; they are fetched again only when those pins change. The
#    project's own wheel is rebuilt every time, into build/wheels-project.
# 3. docker build of Dockerfile.sandbox and Dockerfile.controller.
#
# Environment: BASE_IMAGE, PYTHON (interpreter with pip; default .venv/bin/python
# or python3), SANDBOX_TAG, CONTROLLER_TAG, CLI_TAG.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SANDBOX_TAG="${SANDBOX_TAG:-simple-sandbox:latest}"
CONTROLLER_TAG="${CONTROLLER_TAG:-simple-controller:latest}"
APP_VERSION="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/simple/Chart.yaml)"
CLI_TAG="${CLI_TAG:-simple-cli:latest}"
# The package's version: what `simplectl --version` says, and the packaged chart's appVersion.
VERSION="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' controller/__init__.py)"
PY_VERSION="3.11"  # the images' Python: python:3.11-slim and Debian bookworm's python3
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
PIP=("$PYTHON" -m pip --disable-pip-version-check)

log() { echo "build-images: $*" >&2; }

targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(sandbox controller)
for t in "${targets[@]}"; do
    [[ "$t" == sandbox || "$t" == controller || "$t" == cli ]] || { log "unknown image '$t' (sandbox, controller, cli)"; exit 2; }
done

docker version >/dev/null 2>&1 || { log "the Docker engine is unreachable (is dockerd running? DOCKER_HOST?)"; exit 1; }

choose_base() {
    if [[ -n "${BASE_IMAGE:-}" ]]; then return; fi
    if docker image inspect python:3.11-slim >/dev/null 2>&1; then
        BASE_IMAGE=python:3.11-slim
    else
        log "python:3.11-slim is not present locally; using simple-base:bookworm"
        bash "$ROOT/docker/build-base.sh"
        BASE_IMAGE=simple-base:bookworm
    fi
}

# Requirement lines: "deps" = the controller's (the base dependencies plus the server and
# backend extras of pyproject.toml), "base" = the client's, "httpx" = httpx only; each at the version
# constraints.txt pins (what was tested), else as pyproject.toml says.
pinned() {
    "$PYTHON" - "$1" <<'PY'
import re, sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
deps = project["dependencies"] + extras["server"]
for extra in ("postgres", "s3", "docker", "kubernetes"):
    deps += [d for d in extras[extra] if not d.startswith(project["name"])]
if sys.argv[1] == "base":
    deps = project["dependencies"]
def name(line):  # "psycopg[binary]>=3,<4" -> ("psycopg", "[binary]")
    found = re.match(r"\s*([A-Za-z0-9._-]+)\s*(\[[^\]]*\])?", line)
    return found.group(1).lower(), found.group(2) or ""
pins = {name(line)[0]: line.strip().split("==", 1)[1] for line in open("constraints.txt")
        if line.strip() and not line.startswith("#")}
if sys.argv[1] == "httpx":
    deps = [d for d in deps if name(d)[0] == "httpx"]
for dep in deps:
    key, extras = name(dep)
    print(f"{dep[:len(key)]}{extras}=={pins[key]}" if key in pins else dep)
PY
}

# pip's platform flags for the engine's CPU: any manylinux wheel that Debian bookworm's
# glibc 2.36 runs. Explicit, so a macOS or non-3.11 host still fetches Linux wheels.
platform_flags() {
    local arch v
    arch="$(docker version -f '{{.Server.Arch}}')"
    case "$arch" in
        amd64) arch=x86_64 ;;
        arm64) arch=aarch64 ;;
    esac
    for v in manylinux1 manylinux2010 manylinux2014; do echo "--platform=${v}_$arch"; done
    for v in $(seq 5 36); do echo "--platform=manylinux_2_${v}_$arch"; done
}

# Download binary wheels for the images' Python unless the stamp says these pins are there.
download_wheels() {
    local dir="$1" stamp="$1.stamp"
    shift
    local want platforms
    mapfile -t platforms < <(platform_flags)
    want="$(printf '%s\n' "py$PY_VERSION" "${platforms[-1]}" "$@")"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        log "$dir: wheels up to date"
        return
    fi
    log "$dir: downloading wheels for $*"
    rm -rf "$dir" "$stamp"
    mkdir -p "$dir"
    "${PIP[@]}" download -q --only-binary=:all: --python-version "$PY_VERSION" \
        --implementation cp "${platforms[@]}" -d "$dir" "$@"
    echo "$want" >"$stamp"
}

prepare_sandbox_wheels() {
    local reqs
    mapfile -t reqs < <(pinned httpx)
    download_wheels build/wheels-sandbox "${reqs[@]}"
}

project_wheel() {
    # The project changes with every edit: always rebuild its (pure Python) wheel, in its
    # own directory so the dependency layer of the image stays cached.
    rm -rf build/wheels-project
    "${PIP[@]}" wheel -q --no-deps -w build/wheels-project .
    rm -rf build/lib build/bdist.* 2>/dev/null || true
}

prepare_controller_wheels() {
    local reqs
    mapfile -t reqs < <(pinned deps)
    download_wheels build/wheels-controller "${reqs[@]}"
    project_wheel
}

prepare_cli_wheels() {
    local reqs
    mapfile -t reqs < <(pinned base)
    download_wheels build/wheels-cli "${reqs[@]}"
    project_wheel
}

build_image() {
    local dockerfile="$1" tag="$2" old new
    old="$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)"
    log "docker build -f $dockerfile -t $tag (BASE_IMAGE=$BASE_IMAGE)"
    docker build --build-arg "BASE_IMAGE=$BASE_IMAGE" -f "$dockerfile" -t "$tag" .
    new="$(docker image inspect -f '{{.Id}}' "$tag")"
    # Also tagged with the chart's appVersion (what the Helm chart runs by default) and
    # the package's version (SIMPLE_DEFAULT_IMAGE's default: simple-sandbox:<version>).
    docker tag "$tag" "${tag%:*}:$APP_VERSION"
    docker tag "$tag" "${tag%:*}:$VERSION"
    # Drop the image this tag replaced (only ours, and only if nothing uses it).
    if [[ -n "$old" && "$old" != "$new" ]]; then
        docker image rm "$old" >/dev/null 2>&1 || true
    fi
}

start=$(date +%s)
choose_base
built=()
for t in "${targets[@]}"; do
    if [[ "$t" == sandbox ]]; then
        prepare_sandbox_wheels
        build_image Dockerfile.sandbox "$SANDBOX_TAG"
        built+=("$SANDBOX_TAG")
    elif [[ "$t" == controller ]]; then
        prepare_controller_wheels
        build_image Dockerfile.controller "$CONTROLLER_TAG"
        built+=("$CONTROLLER_TAG")
    else
        prepare_cli_wheels
        build_image Dockerfile.cli "$CLI_TAG"
        built+=("$CLI_TAG")
    fi
done

log "done in $(( $(date +%s) - start ))s (base $BASE_IMAGE):"
for tag in "${built[@]}"; do
    printf '  %-32s %sB\n' "$tag" "$(docker image inspect -f '{{.Size}}' "$tag" | numfmt --to=si)"
done
