"""The Helm chart (charts/simple) and the plain manifests (k8s/), rendered without a cluster.

`helm lint --strict` and `helm template` for every ci/*-values.yaml; every rendered object
validated strictly against the Kubernetes 1.30 and 1.33 schemas (kubernetes-validate);
the Role equal to the backend's REQUIRED_RBAC; restricted pods everywhere; images pinned,
never `latest`; k8s/ in step. The admission policy's rules: test_admission_policy.py.
"""

from __future__ import annotations

import base64
import functools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.backends.kubernetes.backend import REQUIRED_RBAC
from controller.backends.kubernetes.job import build_job
from controller.settings import Settings
from tests.k8s.conftest import REPO_ROOT, MakeSpec, import_tool

CHART = REPO_ROOT / "charts" / "simple"
CI_VALUES = sorted(p.name for p in (CHART / "ci").glob("*-values.yaml"))
# The chart's kubeVersion floor (ValidatingAdmissionPolicy v1) and a recent release;
# kubernetes-validate 1.37.0 has both schemas.
KUBERNETES_VERSIONS = ("1.30.0", "1.33.0")
RELEASE, NAMESPACE = "simple", "simple"
WORKLOADS = {"Deployment", "StatefulSet", "Job"}


def helm_run(helm: str, *args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


@functools.cache
def _render(helm: str, values: str, chart: Path = CHART, *extra: str) -> tuple[Any, ...]:
    args = ["template", RELEASE, str(chart), "--namespace", NAMESPACE, *extra]
    if values:
        args += ["-f", str(CHART / "ci" / values)]
    result = helm_run(helm, *args)
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def render(helm: str, values: str = "default-values.yaml") -> list[dict[str, Any]]:
    return [dict(doc) for doc in _render(helm, values)]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs
             if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


def controller_deployment(docs: list[dict[str, Any]],
                          roles: tuple[str, ...] = ("all", "api")) -> dict[str, Any]:
    """The controller's Deployment that serves the API: the only one (`--role all`), or
    the API replicas' when the controller is split (PostgreSQL and S3)."""
    found = [d for d in docs if d["kind"] == "Deployment"
             and d["metadata"]["labels"].get("simple.dev/role") in roles]
    assert len(found) == 1, f"{len(found)} controller Deployments of roles {roles}"
    return found[0]


def controller(docs: list[dict[str, Any]], container: str = "controller") -> dict[str, Any]:
    spec = controller_deployment(docs)["spec"]["template"]["spec"]
    containers = spec["containers"] + spec.get("initContainers", [])
    return next(c for c in containers if c["name"] == container)


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def secret_files(docs: list[dict[str, Any]], container: str = "controller") -> dict[str, Any]:
    """The controller's credentials: file name in SIMPLE_SECRETS_DIR -> {name, key} of the
    Secret it is projected from."""
    directory = env_of(controller(docs, container))["SIMPLE_SECRETS_DIR"]
    [mount] = [m for m in controller(docs, container)["volumeMounts"]
               if m["mountPath"] == directory]
    assert mount["readOnly"] is True
    volumes = controller_deployment(docs)["spec"]["template"]["spec"]["volumes"]
    [volume] = [v for v in volumes if v["name"] == mount["name"]]
    return {item["path"]: {"name": source["secret"]["name"], "key": item["key"]}
            for source in volume["projected"]["sources"] for item in source["secret"]["items"]}


def pod_specs(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(f"{d['kind']}/{d['metadata']['name']}", d["spec"]["template"]["spec"])
            for d in docs if d["kind"] in WORKLOADS]


# -- lint, render, validate ----------------------------------------------------------------


def test_there_is_a_ci_values_file_per_feature() -> None:
    assert {"default-values.yaml", "existing-secrets-values.yaml", "networkpolicy-off-values.yaml",
            "extra-catalog-values.yaml", "evaluation-values.yaml",
            "admissionpolicy-off-values.yaml"} <= set(CI_VALUES)


@pytest.mark.parametrize("values", CI_VALUES)
def test_helm_lint_strict(helm: str, values: str) -> None:
    result = helm_run(helm, "lint", "--strict", str(CHART), "-f", str(CHART / "ci" / values))
    assert result.returncode == 0, result.stdout + result.stderr


def test_helm_lint_strict_with_the_evaluation_values_file(helm: str) -> None:
    result = helm_run(helm, "lint", "--strict", str(CHART), "-f",
                      str(CHART / "values-evaluation.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("values", CI_VALUES)
def test_every_rendered_object_validates_strictly(helm: str, values: str, version: str) -> None:
    kubernetes_validate = import_tool("kubernetes_validate", "kubernetes-validate")
    docs = render(helm, values)
    assert docs
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # the Prometheus Operator's CRD, not Kubernetes': checked on its own below
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{values}: {doc['kind']}/{doc['metadata']['name']} is invalid for "
                        f"Kubernetes {version}: {e.message} at {list(e.path)}")


@pytest.mark.parametrize("values", CI_VALUES)
def test_names_and_label_values_fit_63_characters(helm: str, values: str) -> None:
    for doc in render(helm, values):
        name = doc["metadata"]["name"]
        assert len(name) <= (52 if doc["kind"] == "StatefulSet" else 63), name
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
        labels = dict(doc["metadata"].get("labels") or {})
        if doc["kind"] in WORKLOADS:
            labels.update(doc["spec"]["template"]["metadata"]["labels"])
        assert all(len(str(v)) <= 63 for v in labels.values()), labels


def test_the_long_names_case_really_truncates(helm: str) -> None:
    names = [d["metadata"]["name"] for d in render(helm, "long-names-values.yaml")]
    assert max(len(n) for n in names) == 63
    assert any(n.endswith("-postgresql") for n in names)


def test_a_typo_in_values_is_refused_by_the_schema(helm: str) -> None:
    result = helm_run(helm, "template", RELEASE, str(CHART), "--set", "controller.replicas=2")
    assert result.returncode != 0
    assert "Additional property replicas is not allowed" in result.stderr


# -- security --------------------------------------------------------------------------


@pytest.mark.parametrize("values", CI_VALUES)
def test_every_pod_meets_the_restricted_standard_with_a_read_only_root(helm: str,
                                                                      values: str) -> None:
    for where, spec in pod_specs(render(helm, values)):
        pod_context = spec["securityContext"]
        assert pod_context["runAsNonRoot"] is True, where
        assert pod_context["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), where
        assert not any("hostPath" in v for v in spec.get("volumes", [])), where
        for container in spec["containers"] + spec.get("initContainers", []):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["capabilities"] == {"drop": ["ALL"]}, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["runAsNonRoot"] is True, where
            assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}, where


def test_only_the_controller_mounts_an_api_token(helm: str) -> None:
    for where, spec in pod_specs(render(helm, "evaluation-values.yaml")):
        assert spec["automountServiceAccountToken"] is where.startswith("Deployment/"), where
    for sa in (d for d in render(helm) if d["kind"] == "ServiceAccount"):
        assert sa["automountServiceAccountToken"] is False


def test_the_role_grants_exactly_required_rbac(helm: str) -> None:
    role = one(render(helm), "Role")
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    assert granted == {key: set(verbs) for key, verbs in REQUIRED_RBAC.items()}
    binding = one(render(helm), "RoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "simple",
                                    "namespace": NAMESPACE}]
    assert not [d for d in render(helm) if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]


@pytest.mark.parametrize("values", [*CI_VALUES, "../values-evaluation.yaml"])
def test_no_image_is_latest_or_untagged(helm: str, values: str) -> None:
    text = helm_run(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f",
                    str(CHART / "ci" / values)).stdout
    assert text and ":latest" not in text
    docs = [d for d in yaml.safe_load_all(text) if d]
    images = [c["image"] for _, spec in pod_specs(docs)
              for c in spec["containers"] + spec.get("initContainers", [])]
    env = env_of(controller(docs))
    images.append(env["SIMPLE_DEFAULT_IMAGE"])  # what sandboxes of templates without one run
    for image in images:
        tag = image.rsplit("/", 1)[-1].partition(":")[2]
        assert tag and tag != "latest", f"{values}: {image} is not pinned"


def test_images_default_to_the_charts_app_version(helm: str) -> None:
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    docs = render(helm)
    assert controller(docs)["image"] == f"simple-controller:{app_version}"
    assert controller(docs, "db-upgrade")["image"] == f"simple-controller:{app_version}"
    assert env_of(controller(docs))["SIMPLE_DEFAULT_IMAGE"] == f"simple-sandbox:{app_version}"


# -- the controller --------------------------------------------------------------------


def test_controller_env_and_probes(helm: str) -> None:
    docs = render(helm)
    container = controller(docs)
    env = env_of(container)
    assert env["SIMPLE_BACKEND"] == "kubernetes"
    assert env["SIMPLE_KUBERNETES_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    sandbox_sa = [d for d in docs if d["kind"] == "ServiceAccount"
                  and d["metadata"]["labels"]["app.kubernetes.io/component"] == "sandbox"]
    assert env["SIMPLE_KUBERNETES_SANDBOX_SERVICE_ACCOUNT"] == sandbox_sa[0]["metadata"]["name"]
    service = one(docs, "Service")
    assert env["SIMPLE_CONTROLLER_URL"] == (
        f"http://{service['metadata']['name']}.$(SIMPLE_KUBERNETES_NAMESPACE).svc.cluster.local:"
        f"{service['spec']['ports'][0]['port']}")
    assert list(env).index("SIMPLE_KUBERNETES_NAMESPACE") < list(env).index(
        "SIMPLE_CONTROLLER_URL")  # $(VAR) expands only earlier variables
    assert env["SIMPLE_STORE_URL"] == "file:///var/lib/simple/store"
    assert env["SIMPLE_DEFAULT_IMAGE"] == "simple-sandbox:0.1.0"  # the appVersion
    assert "SIMPLE_API_TOKENS" not in env  # a file in SIMPLE_SECRETS_DIR
    assert secret_files(docs) == {"SIMPLE_API_TOKENS": {"name": "simple-api-tokens",
                                                        "key": "api-tokens"}}
    assert secret_files(docs, "db-upgrade") == secret_files(docs)
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert controller(docs, "db-upgrade")["command"] == [
        "simplectl", "db", "upgrade", "--wait", "120"]
    assert controller_deployment(docs)["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize("values", CI_VALUES)
def test_every_simple_variable_is_a_setting(helm: str, values: str) -> None:
    known = {f"SIMPLE_{name.upper()}" for name in Settings.model_fields}
    for container in ("controller", "db-upgrade"):
        names = {n for n in env_of(controller(render(helm, values), container))
                 if n.startswith("SIMPLE_")}
        assert names - {"SIMPLE_EXTRA_FLAG"} <= known, names - known  # extraEnv's example


def test_the_sandbox_defaults_agree_with_the_backend(helm: str, make_spec: MakeSpec) -> None:
    docs = render(helm)
    env = env_of(controller(docs))
    job = build_job(make_spec(), "simple", env["SIMPLE_KUBERNETES_SANDBOX_SERVICE_ACCOUNT"],
                    int(env["SIMPLE_KUBERNETES_JOB_TTL_S"]))
    policy = one(docs, "NetworkPolicy", "simple-sandbox")
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert env["SIMPLE_KUBERNETES_SANDBOX_SERVICE_ACCOUNT"] == (
        Settings.model_fields["kubernetes_sandbox_service_account"].default)


# -- feature toggles -------------------------------------------------------------------


def test_network_policy_default_allows_only_controller_and_dns(helm: str) -> None:
    docs = render(helm)
    spec = one(docs, "NetworkPolicy", "simple-sandbox")["spec"]
    assert spec["podSelector"] == {"matchLabels": {"app.kubernetes.io/managed-by": "simple"}}
    assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["ingress"] == []
    controller_labels = controller_deployment(docs)["spec"]["selector"]["matchLabels"]
    to_controller, to_dns = spec["egress"]
    assert to_controller["to"] == [{"podSelector": {"matchLabels": controller_labels}}]
    assert to_controller["ports"] == [{"protocol": "TCP", "port": 8080}]
    assert {p["port"] for p in to_dns["ports"]} == {53}


def test_network_policy_reaches_s3_by_cidr_or_selector(helm: str) -> None:
    egress = one(render(helm, "production-values.yaml"), "NetworkPolicy",
                 "simple-sandbox")["spec"]["egress"]
    s3 = egress[-1]
    assert {"ipBlock": {"cidr": "10.96.0.0/12"}} in s3["to"]
    assert any(peer.get("podSelector") == {"matchLabels": {"app": "minio"}} for peer in s3["to"])
    assert s3["ports"] == [{"protocol": "TCP", "port": 9000}]
    evaluation = one(render(helm, "evaluation-values.yaml"), "NetworkPolicy",
                     "simple-sandbox")["spec"]["egress"]
    assert any(r["ports"] == [{"protocol": "TCP", "port": 9000}] for r in evaluation)


def _selects(policy: dict[str, Any], labels: dict[str, str]) -> bool:
    return policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()


@pytest.mark.parametrize("values", ["default-values.yaml", "evaluation-values.yaml"])
def test_every_pod_of_the_chart_is_selected_by_a_network_policy(helm: str, values: str) -> None:
    docs = render(helm, values)
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    for d in docs:
        if d["kind"] in WORKLOADS:
            labels = d["spec"]["template"]["metadata"]["labels"]
            assert any(_selects(p, labels) for p in policies), d["metadata"]["name"]


def test_who_may_reach_the_controller_and_the_evaluation_services(helm: str) -> None:
    docs = render(helm, "evaluation-values.yaml")
    # every controller pod, of either role (both reach the database and the store)
    controller_labels = {k: v for k, v in controller_deployment(docs)["spec"]["selector"][
        "matchLabels"].items() if k != "simple.dev/role"}
    ingress = one(docs, "NetworkPolicy", "simple-controller")["spec"]
    assert ingress["policyTypes"] == ["Ingress"]
    assert ingress["ingress"] == [{"ports": [{"protocol": "TCP", "port": 8080}]}]
    postgres = one(docs, "NetworkPolicy", "simple-postgresql")["spec"]["ingress"]
    assert postgres == [{"from": [{"podSelector": {"matchLabels": controller_labels}}],
                         "ports": [{"protocol": "TCP", "port": 5432}]}]
    [minio] = one(docs, "NetworkPolicy", "simple-minio")["spec"]["ingress"]
    sources = [peer["podSelector"]["matchLabels"] for peer in minio["from"]]
    bucket_job = one(docs, "Job")["spec"]["template"]["metadata"]["labels"]
    assert controller_labels in sources
    assert {"app.kubernetes.io/managed-by": "simple"} in sources  # sandboxes: presigned URLs
    assert any(s.items() <= bucket_job.items() for s in sources)
    assert minio["ports"] == [{"protocol": "TCP", "port": 9000}]
    assert one(docs, "NetworkPolicy", "simple-minio-bucket")["spec"]["ingress"] == []


def test_network_policy_off(helm: str) -> None:
    assert not [d for d in render(helm, "networkpolicy-off-values.yaml")
                if d["kind"] == "NetworkPolicy"]


def test_extra_catalog_is_mounted_and_listed(helm: str) -> None:
    docs = render(helm, "extra-catalog-values.yaml")
    config_map = one(docs, "ConfigMap")
    assert set(config_map["data"]) == {"team-smoke.yaml", "night.yml"}
    catalog = yaml.safe_load(config_map["data"]["team-smoke.yaml"])
    assert catalog["templates"][0]["id"] == "team_smoke"
    container = controller(docs)
    assert env_of(container)["SIMPLE_CATALOG_DIRS"] == "/etc/simple/catalog"
    assert {"name": "catalog", "mountPath": "/etc/simple/catalog", "readOnly": True} in (
        container["volumeMounts"])
    volumes = controller_deployment(docs)["spec"]["template"]["spec"]["volumes"]
    assert {"name": "catalog", "configMap": {"name": config_map["metadata"]["name"]}} in volumes
    assert "SIMPLE_CATALOG_DIRS" not in env_of(controller(render(helm)))


def test_existing_secrets_are_referenced_and_none_is_rendered(helm: str) -> None:
    docs = render(helm, "existing-secrets-values.yaml")
    assert not [d for d in docs if d["kind"] == "Secret"]
    assert secret_files(docs) == {
        "SIMPLE_API_TOKENS": {"name": "simple-credentials", "key": "tokens"},
        "SIMPLE_DATABASE_URL": {"name": "simple-credentials", "key": "database-url"},
        "SIMPLE_S3_ACCESS_KEY_ID": {"name": "simple-s3", "key": "AWS_ACCESS_KEY_ID"},
        "SIMPLE_S3_SECRET_ACCESS_KEY": {"name": "simple-s3", "key": "AWS_SECRET_ACCESS_KEY"},
        "SIMPLE_SIGNING_KEY": {"name": "simple-credentials", "key": "signing-key"}}
    assert env_of(controller(docs))["SIMPLE_STORE_URL"] == "s3://simple-results/snapshots"


def test_inline_credentials_go_to_the_charts_secret(helm: str) -> None:
    docs = render(helm, "production-values.yaml")
    secret = one(docs, "Secret")
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data == {
        "api-tokens": "ci-token-production-0000001,ci-token-production-0000002",
        "database-url": "postgresql+psycopg://simple:s3cret@postgres.databases.svc:5432/simple",
        "s3-access-key-id": "simple", "s3-secret-access-key": "simple-secret-key",
        "signing-key": data["signing-key"]}  # split (PostgreSQL, S3): one key for all pods
    assert len(data["signing-key"]) == 32
    assert secret_files(docs) == {
        f"SIMPLE_{key.upper().replace('-', '_')}": {"name": secret["metadata"]["name"],
                                                     "key": key} for key in data}
    env = env_of(controller(docs))
    assert env["SIMPLE_S3_ENDPOINT_URL"] == "http://minio.storage.svc.cluster.local:9000"
    # split: the pods share nothing on disk, so no claim (one pod would hold it alone)
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    checksum = controller_deployment(docs)["spec"]["template"]["metadata"]["annotations"]
    assert checksum["checksum/secret"] != checksum["checksum/catalog"]


@pytest.mark.parametrize("values", CI_VALUES)
def test_no_container_takes_a_secret_as_an_environment_variable(helm: str, values: str) -> None:
    # CIS 5.4.1 (checkov CKV_K8S_35): secrets as files, not in the environment, where child
    # processes, crash reports and /proc/<pid>/environ would carry them.
    for where, spec in pod_specs(render(helm, values)):
        for container in spec["containers"] + spec.get("initContainers", []):
            for env in container.get("env", []):
                assert "secretKeyRef" not in env.get("valueFrom", {}), (where, env["name"])
            assert not [e for e in container.get("envFrom", []) if "secretRef" in e], where


def file_source(spec: dict[str, Any], container: dict[str, Any], path: str) -> tuple[str, str]:
    """(Secret, key) that the file at `path` in `container` is projected from."""
    volumes = {v["name"]: v for v in spec["volumes"]}
    for mount in container["volumeMounts"]:
        directory = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(directory):
            secret = volumes[mount["name"]]["secret"]
            [item] = [i for i in secret["items"] if i["path"] == path[len(directory):]]
            return secret["secretName"], item["key"]
    raise AssertionError(f"{path} is on no volume of {container['name']}")


def test_evaluation_services_read_their_credentials_from_files(helm: str) -> None:
    docs = render(helm, "evaluation-values.yaml")
    specs = dict(pod_specs(docs))
    postgres = specs["StatefulSet/simple-postgresql"]
    [container] = postgres["containers"]
    assert file_source(postgres, container, env_of(container)["POSTGRES_PASSWORD_FILE"]) == (
        "simple-evaluation", "postgres-password")
    minio = specs["StatefulSet/simple-minio"]
    [container] = minio["containers"]
    env = env_of(container)
    assert file_source(minio, container, env["MINIO_ROOT_USER_FILE"]) == (
        "simple-evaluation", "minio-root-user")
    assert file_source(minio, container, env["MINIO_ROOT_PASSWORD_FILE"]) == (
        "simple-evaluation", "minio-root-password")
    bucket = specs["Job/simple-minio-bucket"]
    [container] = bucket["containers"]
    script = container["command"][-1]
    for name, key in (("root-user", "minio-root-user"), ("root-password", "minio-root-password")):
        assert f'$creds/{name}' in script
        assert file_source(bucket, container, f"/var/run/secrets/minio/{name}") == (
            "simple-evaluation", key)


def test_evaluation_runs_postgres_and_minio_and_wires_the_controller(helm: str) -> None:
    docs = render(helm, "evaluation-values.yaml")
    images = {c["image"] for _, spec in pod_specs(docs) for c in spec["containers"]}
    assert {"postgres:16.11", "minio/minio:RELEASE.2025-04-22T22-12-26Z",
            "simple-controller:0.1.0"} <= images
    bucket_job = one(docs, "Job")
    assert "post-install" in bucket_job["metadata"]["annotations"]["helm.sh/hook"]
    assert "mc mb --ignore-existing" in bucket_job["spec"]["template"]["spec"]["containers"][0][
        "command"][-1]
    secret = one(docs, "Secret", "simple")
    database_url = base64.b64decode(secret["data"]["database-url"]).decode()
    password = base64.b64decode(
        one(docs, "Secret", "simple-evaluation")["data"]["postgres-password"]).decode()
    assert database_url == (f"postgresql+psycopg://simple:{password}@simple-postgresql:5432/"
                            "simple")
    assert one(docs, "Service", "simple-postgresql")["spec"]["ports"][0]["port"] == 5432
    env = env_of(controller(docs))
    assert env["SIMPLE_STORE_URL"] == "s3://simple/snapshots"
    assert env["SIMPLE_S3_ENDPOINT_URL"] == (
        "http://simple-minio.$(SIMPLE_KUBERNETES_NAMESPACE).svc.cluster.local:9000")
    assert one(docs, "Service", "simple-minio")["spec"]["ports"][0]["port"] == 9000


def test_the_evaluation_files_agree_and_say_not_for_production() -> None:
    main = (CHART / "values-evaluation.yaml").read_text()
    assert main == (CHART / "ci" / "evaluation-values.yaml").read_text()
    assert "NOT FOR PRODUCTION" in main
    assert "NOT FOR PRODUCTION" in (CHART / "values.yaml").read_text()


# -- documentation ---------------------------------------------------------------------


def _keys_with_comment(text: str) -> dict[tuple[str, ...], bool]:
    """Every key path of a YAML file, and whether a comment line stands right above it."""
    found: dict[tuple[str, ...], bool] = {}
    stack: list[tuple[int, str]] = []
    previous = ""
    for line in text.splitlines():
        match = re.match(r"^( *)([A-Za-z0-9_.-]+):", line)
        if match:
            indent = len(match.group(1))
            stack = [(i, k) for i, k in stack if i < indent] + [(indent, match.group(2))]
            found[tuple(k for _, k in stack)] = previous.lstrip().startswith("#")
        if line.strip():
            previous = line
    return found


def test_every_value_is_documented_by_a_comment() -> None:
    text = (CHART / "values.yaml").read_text()
    commented = _keys_with_comment(text)
    undocumented: list[str] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if path and commented.get(path):
            return  # documented as a whole (children are its example content)
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, (*path, key))
        elif path:
            undocumented.append(".".join(path))

    walk(yaml.safe_load(text), ())
    assert undocumented == []


def test_notes_say_how_to_reach_the_api_and_read_logs(helm: str, tmp_path: Path) -> None:
    # helm template skips NOTES.txt: render a copy of the chart with the notes as a value.
    chart = tmp_path / "simple"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "_notes_preview.tpl").write_text(
        '{{- define "notes-preview" }}' + notes + "{{- end }}")
    (chart / "templates" / "notes-preview.yaml").write_text(
        'notes: {{ include "notes-preview" . | toJson }}\n')
    rendered = {}
    for values in ("default-values.yaml", "evaluation-values.yaml"):
        result = helm_run(helm, "template", RELEASE, str(chart), "-n", NAMESPACE, "-f",
                          str(CHART / "ci" / values), "--show-only", "templates/notes-preview.yaml")
        assert result.returncode == 0, result.stderr
        rendered[values] = yaml.safe_load(result.stdout)["notes"]
    default = rendered["default-values.yaml"]
    assert "kubectl -n simple logs -l simple.dev/sandbox-id=SANDBOX_ID" in default
    assert "kubectl -n simple logs job/SANDBOX_ID" in default
    assert "port-forward svc/simple 8080:8080" in default
    assert "create secret generic simple-api-tokens" in default
    assert "NOT FOR PRODUCTION" in rendered["evaluation-values.yaml"]
    assert "create secret generic" not in rendered["evaluation-values.yaml"]


# -- plain manifests -------------------------------------------------------------------


def test_k8s_manifests_are_in_step_with_the_chart(helm: str, tmp_path: Path) -> None:
    out = tmp_path / "k8s"
    result = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "gen-k8s-manifests.sh"),
                             str(out)], env={"HELM": helm, "PATH": "/usr/bin:/bin"},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    committed = {p.name: p.read_text() for p in (REPO_ROOT / "k8s").glob("*.yaml")}
    fresh = {p.name: p.read_text() for p in out.glob("*.yaml")}
    assert sorted(committed) == sorted(fresh), "run scripts/gen-k8s-manifests.sh"
    stale = [name for name in fresh if committed[name] != fresh[name]]
    assert stale == [], f"k8s/ is out of date ({stale}): run scripts/gen-k8s-manifests.sh"


def test_k8s_kustomization_lists_every_manifest(helm: str) -> None:
    directory = REPO_ROOT / "k8s"
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in directory.glob("*.yaml")} - {"kustomization.yaml"}
    objects = [doc for name in sorted(listed)
               for doc in yaml.safe_load_all((directory / name).read_text()) if doc]
    assert {d["kind"] for d in objects} >= {"Namespace", "Deployment", "Service", "Role",
                                            "RoleBinding", "ServiceAccount", "NetworkPolicy"}
    assert len(objects) == len(render(helm)) + 1  # the chart's objects and the Namespace


def test_metrics_scrape_annotations_and_service_monitor(helm: str) -> None:
    default = render(helm)
    [deployment] = [d for d in default if d["kind"] == "Deployment"]
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert (annotations["prometheus.io/port"], annotations["prometheus.io/path"]) == (
        "8080", "/metrics")
    assert not [d for d in default if d["kind"] == "ServiceMonitor"], "off by default"

    docs = render(helm, "servicemonitor-values.yaml")
    [monitor] = [d for d in docs if d["kind"] == "ServiceMonitor"]
    [service] = [d for d in docs if d["kind"] == "Service"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items(), "it selects the Service"
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in [p["name"] for p in service["spec"]["ports"]]
    assert (endpoint["path"], endpoint["interval"]) == ("/metrics", "15s")
    assert endpoint["authorization"]["credentials"] == {"name": "simple-metrics", "key": "token"}
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    assert "prometheus.io/scrape" not in deployment["spec"]["template"]["metadata"]["annotations"]


# -- high availability: API replicas apart from reconcilers --------------------------------


def test_with_postgresql_and_s3_the_controller_splits_into_api_and_reconcilers(
    helm: str,
) -> None:
    from controller.leader.k8s_lease import LEASE_RBAC

    docs = render(helm, "production-values.yaml")
    api = controller_deployment(docs, ("api",))
    reconciler = controller_deployment(docs, ("reconciler",))
    assert (api["spec"]["replicas"], reconciler["spec"]["replicas"]) == (2, 2)
    for deployment, role in ((api, "api"), (reconciler, "reconciler")):
        spec = deployment["spec"]["template"]["spec"]
        [container] = [c for c in spec["containers"] if c["name"] == "controller"]
        assert container["command"][-2:] == ["--role", role]
        assert env_of(container)["SIMPLE_ROLE"] == role
        # a standby is ready: /readyz does not depend on leading
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
        assert deployment["spec"]["selector"]["matchLabels"]["simple.dev/role"] == role
        assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
        [term] = spec["affinity"]["podAntiAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"]
        assert term["podAffinityTerm"]["labelSelector"]["matchLabels"]["simple.dev/role"] == role
        assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
        assert {v["name"]: v for v in spec["volumes"]}["data"] == {"name": "data",
                                                                   "emptyDir": {}}
    env = env_of(controller_deployment(docs, ("reconciler",))["spec"]["template"]["spec"][
        "containers"][0])
    assert env["SIMPLE_LEASE_BACKEND"] == "kubernetes"
    assert env["SIMPLE_HOLDER_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert (env["SIMPLE_LEASE_DURATION_S"], env["SIMPLE_LEASE_RENEW_DEADLINE_S"],
            env["SIMPLE_LEASE_RETRY_S"]) == ("15", "10", "2")  # client-go's defaults
    assert one(docs, "Service")["spec"]["selector"]["simple.dev/role"] == "api"
    budgets = {d["metadata"]["name"]: d["spec"] for d in docs
               if d["kind"] == "PodDisruptionBudget"}
    assert {n: (b["maxUnavailable"], b["selector"]["matchLabels"]["simple.dev/role"])
            for n, b in budgets.items()} == {"simple-api": (1, "api"),
                                             "simple-reconciler": (1, "reconciler")}
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in one(docs, "Role")["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    assert granted == {key: set(verbs) for key, verbs in {**REQUIRED_RBAC, **LEASE_RBAC}.items()}


def test_without_postgresql_the_controller_stays_one_pod_and_forcing_a_split_fails(
    helm: str,
) -> None:
    docs = render(helm)
    assert controller_deployment(docs, ("all",))["spec"]["replicas"] == 1
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert not any("leases" in r["resources"] for r in one(docs, "Role")["rules"])
    forced = helm_run(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                      "--set", "controller.highAvailability.enabled=true")
    assert forced.returncode != 0 and "needs PostgreSQL" in forced.stderr
    single = [dict(d) for d in _render(helm, "production-values.yaml", CHART, "--set",
                                       "controller.highAvailability.enabled=false")]
    assert controller_deployment(single, ("all",))["spec"]["strategy"] == {"type": "Recreate"}
    assert one(single, "PersistentVolumeClaim")["spec"]["storageClassName"] == "standard"
