"""Write the Jobs the kubernetes backend would create for a suite, one YAML file each.

    python scripts/render_sandbox_jobs.py OUT_DIR [SUITE_OR_TEMPLATE ...]   (default: quick)

The same path as `simplectl run --backend kubernetes --dry-run`: the built-in catalog,
the launcher's sandbox specs and `KubernetesBackend.render`, with the settings the chart
gives the controller (namespace, sandbox ServiceAccount, default image = the chart's
appVersion). scripts/checkov.sh scans what this writes. No cluster, no network.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from controller.catalog.templates import load_catalog  # noqa: E402
from controller.cli.dry_run import render_run  # noqa: E402
from controller.planning.plan import PlanRequest  # noqa: E402
from controller.service import catalog_dirs  # noqa: E402
from controller.settings import Settings  # noqa: E402


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    out, names = Path(argv[0]), tuple(argv[1:]) or ("quick",)
    app_version = yaml.safe_load((REPO / "charts/simple/Chart.yaml").read_text())["appVersion"]
    settings = Settings.model_validate(
        {
            "backend": "kubernetes",
            "kubernetes_namespace": "simple",
            "default_image": f"simple-sandbox:{app_version}",
            "controller_url": "http://simple.simple.svc.cluster.local:8080",
        }
    )
    rendered = render_run(load_catalog(catalog_dirs(settings)), PlanRequest(names=names), settings)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.yaml"):
        old.unlink()
    for job in rendered["objects"]:
        (out / f"{job['metadata']['name']}.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    print(f"render_sandbox_jobs: wrote {len(rendered['objects'])} Jobs to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
