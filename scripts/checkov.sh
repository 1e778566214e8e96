#!/usr/bin/env bash
# checkov --framework kubernetes over everything SIMPLE puts into a cluster:
#   1. the chart rendered with its default values,
#   2. the chart rendered with values-evaluation.yaml,
#   3. the Jobs the kubernetes backend creates (scripts/render_sandbox_jobs.py, the quick
#      suite), next to the chart's sandbox NetworkPolicy that selects their Pods.
# Any failed check fails the script, except the skips below, each explained in
# docs/kubernetes.md ("checkov"). checkov runs from its own virtualenv (.venv-checkov, at
# a pinned version, created on first use): its many dependencies stay out of .venv.
#
#   scripts/checkov.sh            (make checkov; CI runs it before the tests)
#
# helm: .cache/bin/helm (scripts/install-k8s-tools.sh) or on PATH; HELM=... overrides.
set -euo pipefail
export LC_ALL=C

CHECKOV_VERSION=3.3.30
# Everywhere: image digests (tags are pinned: the appVersion, dated releases), pull policy
# Always (IfNotPresent is right for pinned tags), the controller's own API token (it creates
# the Jobs).
SKIP_ALL="CKV_K8S_43,CKV_K8S_15,CKV_K8S_38"

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.venv-checkov"
python="${PYTHON:-$repo/.venv/bin/python}"
me=checkov.sh
# shellcheck source=scripts/find-helm.sh
source "$repo/scripts/find-helm.sh"
[[ -x "$python" ]] || { echo "checkov.sh: no $python; run make install" >&2; exit 1; }

if [[ "$("$venv/bin/checkov" --version 2>/dev/null || true)" != "$CHECKOV_VERSION" ]]; then
    echo "checkov.sh: installing checkov $CHECKOV_VERSION into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --timeout 60 \
        "checkov==$CHECKOV_VERSION"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/chart-default" "$work/chart-evaluation" "$work/jobs"
"$helm" template simple "$repo/charts/simple" --namespace simple >"$work/chart-default/chart.yaml"
"$helm" template simple "$repo/charts/simple" --namespace simple \
    -f "$repo/charts/simple/values-evaluation.yaml" >"$work/chart-evaluation/chart.yaml"
"$python" "$repo/scripts/render_sandbox_jobs.py" "$work/jobs" quick
"$helm" template simple "$repo/charts/simple" --namespace simple \
    --show-only templates/sandbox/networkpolicy.yaml >"$work/jobs/networkpolicy.yaml"

status=0
scan() {  # scan NAME DIR SKIPS
    echo "== checkov: $1"
    # --skip-download: no call to the vendor's platform (CI has no network but registries)
    if ! "$venv/bin/checkov" --framework kubernetes --directory "$2" --skip-check "$3" \
        --skip-download --compact --quiet; then
        status=1
    fi
}
scan "chart, default values" "$work/chart-default" "$SKIP_ALL"
scan "chart, evaluation values" "$work/chart-evaluation" "$SKIP_ALL"
scan "the backend's sandbox Jobs" "$work/jobs" "$SKIP_ALL"
if [[ $status -ne 0 ]]; then
    echo "checkov: FAILED (a failed check above; fix the chart or the Job builder, see docs/kubernetes.md)" >&2
else
    echo "checkov: passed (skipped: $SKIP_ALL)"
fi
exit $status
