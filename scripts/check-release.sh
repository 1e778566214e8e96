#!/usr/bin/env bash
# Check what `make release` built, as a user would get it (nothing is pushed):
#   1. the wheel installs in a clean venv (no extras): `simplectl --version` is the
#      package's version, and no server package (fastapi, uvicorn, sqlalchemy) came with it;
#   2. the sdist builds that same wheel;
#   3. the packaged chart has version = appVersion = the package's version, lints, and
#      renders with the images tagged with it;
#   4. the images tagged with the version run `--version` (controller, CLI) or import
#      their runtime (sandbox). An image not built is reported and skipped, unless
#      REQUIRE_IMAGES=1 (then it fails); CHECK_IMAGES=0 skips the images.
#
# Usage: scripts/check-release.sh [DIST]     (default dist/; PYTHON, HELM to override;
#        IMAGE_PREFIX=some/ checks some/simple-controller:VERSION and so on)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIST="$(cd "${1:-$ROOT/dist}" && pwd)"
VERSION="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$ROOT/controller/__init__.py")"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
HELM="${HELM:-$ROOT/.cache/bin/helm}"
PREFIX="${IMAGE_PREFIX:-}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
checked=0

ok() { checked=$((checked + 1)); echo "check-release: ok: $*"; }
die() { echo "check-release: FAILED: $*" >&2; exit 1; }

wheel="$DIST/simple_orchestrator-$VERSION-py3-none-any.whl"
sdist="$DIST/simple_orchestrator-$VERSION.tar.gz"
chart="$DIST/simple-$VERSION.tgz"
for f in "$wheel" "$sdist" "$chart"; do [[ -f "$f" ]] || die "$f is missing (make release-files)"; done

# 1. the wheel, in a clean venv outside the checkout (pip's cache is reused)
"$PYTHON" -m venv "$WORK/venv"
(cd "$WORK" && env -u PYTHONPATH -u VIRTUAL_ENV "$WORK/venv/bin/pip" install -q \
    --disable-pip-version-check "$wheel") || die "the wheel does not install"
said="$(cd "$WORK" && env -u PYTHONPATH "$WORK/venv/bin/simplectl" --version)"
[[ "$said" == "simplectl $VERSION" ]] || die "simplectl --version said '$said', not $VERSION"
for module in fastapi uvicorn sqlalchemy; do
    if (cd "$WORK" && "$WORK/venv/bin/python" -c "import $module" 2>/dev/null); then
        die "the client install brought $module"
    fi
done
ok "wheel installs alone in a clean venv: $said, no fastapi/uvicorn/sqlalchemy"

# 2. the sdist builds the wheel
"$PYTHON" -m pip wheel -q --no-deps --disable-pip-version-check \
    -w "$WORK/from-sdist" "$sdist" >/dev/null || die "the sdist does not build"
[[ -f "$WORK/from-sdist/$(basename "$wheel")" ]] || die "the sdist built another wheel"
ok "sdist builds $(basename "$wheel")"

# 3. the chart
[[ -x "$HELM" ]] || die "no helm at $HELM (bash scripts/install-k8s-tools.sh)"
meta="$("$HELM" show chart "$chart")"
grep -qx "version: $VERSION" <<<"$meta" || die "chart version is not $VERSION"
grep -qE "^appVersion: \"?$VERSION\"?$" <<<"$meta" || die "chart appVersion is not $VERSION"
"$HELM" lint "$chart" >/dev/null || die "helm lint $chart"
rendered="$("$HELM" template simple "$chart")" || die "helm template $chart"
grep -q "image: \"\{0,1\}simple-controller:$VERSION" <<<"$rendered" \
    || die "the rendered chart does not run simple-controller:$VERSION"
ok "chart $(basename "$chart"): version = appVersion = $VERSION, lints, renders simple-controller:$VERSION"

# 4. the images
image_missing() {
    if [[ "${REQUIRE_IMAGES:-}" == 1 ]]; then die "image $1 is not built (make release)"; fi
    echo "check-release: skipped: image $1 is not built (make release builds it)"
}
if [[ "${CHECK_IMAGES:-1}" == 0 ]]; then
    echo "check-release: skipped: images (CHECK_IMAGES=0)"
elif ! docker version >/dev/null 2>&1; then
    [[ "${REQUIRE_IMAGES:-}" == 1 ]] && die "the Docker engine is unreachable"
    echo "check-release: skipped: images (no Docker engine)"
else
    for name in simple-controller simple-cli; do
        image="$PREFIX$name:$VERSION"
        if ! docker image inspect "$image" >/dev/null 2>&1; then
            image_missing "$image"; continue
        fi
        entry=(); [[ "$name" == simple-controller ]] && entry=(simplectl)
        said="$(docker run --rm --network none "$image" "${entry[@]}" --version 2>&1)" \
            || die "$image does not answer --version (built from an older checkout? make release rebuilds it): $said"
        [[ "$said" == "simplectl $VERSION" ]] || die "$image --version said '$said'"
        ok "image $image: $said"
    done
    image="${PREFIX}simple-sandbox:$VERSION"
    if docker image inspect "$image" >/dev/null 2>&1; then
        docker run --rm --network none "$image" python -c "import sandbox_image.contract" \
            || die "$image has no sandbox runtime"
        ok "image $image: the sandbox runtime imports"
    else
        image_missing "$image"
    fi
fi
echo "check-release: $checked checks passed for $VERSION"
