"""The sandbox's credentials on Kubernetes: a per-sandbox Secret owned by its Job.

The token and the signed URLs never appear in the Job (anyone who may read Jobs or Pods
would read them): the container reads them as files (SIMPLE_SECRETS_DIR) from the Secret
`<sandbox id>-env`, mounted read-only, created right after the Job and owned by it
(ownerReferences with the Job's uid), so the garbage collector deletes it with the Job;
the backend deletes it too.
Pure builder tests first, then the backend against kmock.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from controller.backends.base import ObservedState, SandboxSpec
from controller.backends.kubernetes.backend import KubernetesBackend
from controller.backends.kubernetes.job import (
    SECRET_ENV_NAMES,
    build_job,
    build_secret,
    secret_name,
)
from controller.backends.kubernetes.job_status import observe_job
from controller.errors import BackendError
from controller.settings import Settings
from sandbox_image.contract import ENV_SECRETS_DIR, SandboxEnv
from tests.k8s.conftest import (
    JOB_TTL_S,
    NAMESPACE,
    SANDBOX_SERVICE_ACCOUNT,
    FakeCluster,
    MakeSpec,
    import_tool,
)

JOBS, SECRETS, PODS = "batch/v1/jobs", "v1/secrets", "v1/pods"
T0 = 1_795_262_400.0  # 2026-11-21T12:00:00Z


def full_spec(make_spec: MakeSpec, sandbox_id: str = "sbx-secret", attempt: int = 1
              ) -> SandboxSpec:
    """A spec with every credential the contract has: token, upload, items, resume, input."""
    spec = make_spec(sandbox_id, attempt=attempt)
    env = dataclasses.replace(
        spec.env,
        sandbox_token=f"tok-{sandbox_id}-{attempt}-6f1d2c",
        snapshot_url=f"http://minio:9000/s/{sandbox_id}.sqlite?X-Amz-Signature=abc{attempt}",
        items_url=f"http://ctl:8080/v1/sandboxes/{sandbox_id}/items?signature=it{attempt}",
        resume_url=f"http://minio:9000/r/{sandbox_id}?X-Amz-Signature=re{attempt}",
        input_url=f"http://ctl:8080/v1/sandboxes/{sandbox_id}/input?signature=in{attempt}",
    )
    return dataclasses.replace(spec, env=env)


def credentials(spec: SandboxSpec) -> dict[str, str]:
    return {k: v for k, v in spec.env.to_environ().items() if k in SECRET_ENV_NAMES}


def container_env(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job["spec"]["template"]["spec"]["containers"][0]["env"])


def what_the_sandbox_reads(job: dict[str, Any], secret: dict[str, Any], mount: Path
                           ) -> SandboxEnv:
    """The contract as the runtime reads it in that Pod: the Job's env, and the Secret laid
    out as files where the Job mounts it (the kubelet's part, played here)."""
    pod = job["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    [mounted] = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
    assert mounted["readOnly"] is True
    mount.mkdir(parents=True, exist_ok=True)
    for key, value in secret["stringData"].items():
        (mount / key).write_text(value)
    env = {e["name"]: e["value"] for e in container_env(job)}
    assert env[ENV_SECRETS_DIR] == mounted["mountPath"]
    return SandboxEnv.from_environ({**env, ENV_SECRETS_DIR: str(mount)})


# -- the builders (pure) -----------------------------------------------------------------


def test_no_credential_is_in_the_job(make_spec: MakeSpec) -> None:
    spec = full_spec(make_spec)
    job = build_job(spec, NAMESPACE, SANDBOX_SERVICE_ACCOUNT, JOB_TTL_S)
    text = json.dumps(job)
    assert len(credentials(spec)) == 5
    for name, value in credentials(spec).items():
        assert value not in text, f"{name} is in the Job"
    assert not [e for e in container_env(job) if "valueFrom" in e or e["name"] in
                credentials(spec)], "no credential, nor a reference to one, in the environment"


def test_the_secret_holds_them_and_names_its_job_as_owner(make_spec: MakeSpec) -> None:
    spec = full_spec(make_spec)
    job = {"metadata": {"name": "sbx-secret", "uid": "5c1b7e0e-0d7e-4f7e-9a43-2b1f6c0d2a10"}}
    secret = build_secret(spec, NAMESPACE, job)
    meta = secret["metadata"]
    assert (secret["apiVersion"], secret["kind"], secret["type"]) == ("v1", "Secret", "Opaque")
    assert (meta["name"], meta["namespace"]) == (secret_name("sbx-secret"), NAMESPACE)
    assert meta["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job",
                                        "name": "sbx-secret", "uid": job["metadata"]["uid"],
                                        "controller": True}]
    assert meta["labels"] == spec.labels  # found again by label, like the Job
    assert secret["immutable"] is True
    assert secret["stringData"] == credentials(spec)


def test_a_secret_without_its_jobs_uid_is_refused(make_spec: MakeSpec) -> None:
    with pytest.raises(BackendError, match="has no uid"):
        build_secret(make_spec(), NAMESPACE, {"metadata": {"name": "sbx-1"}})


def test_the_secret_validates_strictly(make_spec: MakeSpec) -> None:
    kubernetes_validate = import_tool("kubernetes_validate", "kubernetes-validate")
    secret = build_secret(full_spec(make_spec), NAMESPACE,
                          {"metadata": {"name": "sbx-secret", "uid": "u-1"}})
    for version in ("1.30.0", "1.33.0"):
        kubernetes_validate.validate(secret, version, strict=True)


def test_a_pod_that_cannot_be_configured_ends_after_the_grace(make_spec: MakeSpec) -> None:
    job = build_job(make_spec(), NAMESPACE, SANDBOX_SERVICE_ACCOUNT, JOB_TTL_S)
    labels = job["spec"]["template"]["metadata"]["labels"]
    pod = {"metadata": {"name": "sbx-1-abcde", "labels": labels,
                        "creationTimestamp": "2026-11-21T12:00:00Z"},
           "status": {"phase": "Pending", "containerStatuses": [{"name": "sandbox", "state": {
               "waiting": {"reason": "CreateContainerConfigError",
                           "message": "container has runAsNonRoot and image will run as "
                                      "root"}}}]}}
    waiting = observe_job(job, [pod], T0 + 60, 300, config_error_grace_s=120)
    assert waiting is not None and waiting.state == ObservedState.PENDING
    ended = observe_job(job, [pod], T0 + 120, 300, config_error_grace_s=120)
    assert ended is not None and ended.state == ObservedState.EXITED
    assert ended.reason is not None
    assert ended.reason.startswith("CreateContainerConfigError: container has runAsNonRoot")
    assert "numeric USER" in ended.reason


# -- the backend against kmock -------------------------------------------------------------


@pytest.fixture
def backend(cluster: FakeCluster, k8s_settings: Settings) -> Any:
    batch, core = cluster.apis()
    made = KubernetesBackend(k8s_settings, batch_api=batch, core_api=core, clock=lambda: T0,
                             sleeper=lambda s: None, informers=False)
    yield made
    made.close()


def test_launch_creates_the_job_then_its_owned_secret(backend: KubernetesBackend,
                                                     cluster: FakeCluster,
                                                     make_spec: MakeSpec,
                                                     tmp_path: Path) -> None:
    spec = full_spec(make_spec)
    backend.launch(spec)
    posts = [r.resource.plural for r in cluster.requests() if r.method == "POST"]
    assert posts == ["jobs", "secrets"]
    job, secret = cluster.job("sbx-secret"), cluster.secret("sbx-secret-env")
    [owner] = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "sbx-secret",
                                                            job["metadata"]["uid"])
    # What the runtime reads in that Pod, env and mounted Secret, is the whole contract.
    assert what_the_sandbox_reads(job, secret, tmp_path / "mount") == spec.env
    assert spec.env.sandbox_token not in json.dumps(job)


def test_a_secret_that_cannot_be_created_takes_its_job_with_it(
    backend: KubernetesBackend, cluster: FakeCluster, make_spec: MakeSpec
) -> None:
    kmock = import_tool("kmock", "kmock")
    cluster.fail(("post", kmock.resource(SECRETS)), 403,
                 'secrets is forbidden: User "system:serviceaccount:simple:simple" cannot '
                 'create resource "secrets" in API group ""', times=1)
    with pytest.raises(BackendError) as info:
        backend.launch(full_spec(make_spec))
    assert "its Secret was not created" in info.value.message
    assert "its Job was deleted" in info.value.message
    assert "needs `create` on `secrets`" in (info.value.hint or "")
    assert not cluster.has_job("sbx-secret"), "a half-made sandbox stayed"
    assert backend.observe() == []


def test_remove_deletes_the_secret_too(backend: KubernetesBackend, cluster: FakeCluster,
                                       make_spec: MakeSpec) -> None:
    backend.launch(full_spec(make_spec))
    assert cluster.has(SECRETS, "sbx-secret-env")
    backend.remove("sbx-secret")
    # kmock has no garbage collector: the Secret is gone because the backend deleted it.
    assert not cluster.has(SECRETS, "sbx-secret-env")
    assert not cluster.has_job("sbx-secret")
    backend.remove("sbx-secret")  # both gone already: no error


def test_a_retry_gets_a_fresh_secret_owned_by_the_new_job(backend: KubernetesBackend,
                                                         cluster: FakeCluster,
                                                         make_spec: MakeSpec) -> None:
    backend.launch(full_spec(make_spec, attempt=1))
    first_uid = cluster.job("sbx-secret")["metadata"]["uid"]
    second = full_spec(make_spec, attempt=2)
    backend.launch(second)
    job, secret = cluster.job("sbx-secret"), cluster.secret("sbx-secret-env")
    assert job["metadata"]["uid"] != first_uid
    assert secret["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert secret["stringData"] == credentials(second)


def test_a_leftover_secret_of_this_sandbox_is_replaced(backend: KubernetesBackend,
                                                      cluster: FakeCluster,
                                                      make_spec: MakeSpec) -> None:
    stale = build_secret(full_spec(make_spec, attempt=1), NAMESPACE,
                         {"metadata": {"name": "sbx-secret", "uid": "gone-job-uid"}})
    cluster.put(SECRETS, stale)
    spec = full_spec(make_spec, attempt=2)
    backend.launch(spec)
    secret = cluster.secret("sbx-secret-env")
    assert secret["stringData"] == credentials(spec)
    assert secret["metadata"]["ownerReferences"][0]["uid"] == (
        cluster.job("sbx-secret")["metadata"]["uid"])


def test_someone_elses_secret_is_left_alone(backend: KubernetesBackend, cluster: FakeCluster,
                                            make_spec: MakeSpec) -> None:
    theirs = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": "sbx-secret-env", "namespace": NAMESPACE,
                           "labels": {"app": "billing"}},
              "stringData": {"password": "hunter2"}}
    cluster.put(SECRETS, theirs)
    with pytest.raises(BackendError) as info:
        backend.launch(full_spec(make_spec))
    assert "is not sandbox sbx-secret's" in info.value.message
    assert cluster.secret("sbx-secret-env")["stringData"] == {"password": "hunter2"}
    assert not [r for r in cluster.requests()
                if r.method == "DELETE" and r.resource.plural == "secrets"]
    assert not cluster.has_job("sbx-secret")
