# Sourced by the scripts that render the chart: sets `helm` to $HELM, the one
# scripts/install-k8s-tools.sh put in .cache/bin, or the one on PATH; else stops with
# what to run. Needs `repo` (the checkout) and `me` (the caller's name, for the message).
helm="${HELM:-}"
if [[ -z "$helm" ]]; then
    if [[ -x "$repo/.cache/bin/helm" ]]; then
        helm="$repo/.cache/bin/helm"
    elif command -v helm >/dev/null; then
        helm="$(command -v helm)"
    else
        echo "$me: no helm; run scripts/install-k8s-tools.sh" >&2
        exit 1
    fi
fi
