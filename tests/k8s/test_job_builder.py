"""The Job builder as a pure function: a SandboxSpec in, a batch/v1 Job manifest out."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from controller.backends.kubernetes.backend import KubernetesBackend
from controller.backends.kubernetes.job import build_job, build_secret
from controller.errors import InputError
from controller.settings import Settings
from sandbox_image.contract import (
    ENV_NAMES,
    LABEL_MANAGED_BY,
    LABEL_RUN_ID,
    LABEL_SANDBOX_ID,
    LABEL_TEMPLATE_ID,
)
from tests.k8s.conftest import JOB_TTL_S, NAMESPACE, SANDBOX_SERVICE_ACCOUNT, MakeSpec, import_tool

VALIDATED_KUBERNETES_VERSIONS = ("1.30.0", "1.33.0")  # the chart's kubeVersion floor


def job_of(make_spec: MakeSpec, **overrides: Any) -> dict[str, Any]:
    return build_job(make_spec(**overrides), NAMESPACE, SANDBOX_SERVICE_ACCOUNT, JOB_TTL_S)


def pod_spec(job: dict[str, Any]) -> dict[str, Any]:
    return dict(job["spec"]["template"]["spec"])


def sandbox_container(job: dict[str, Any]) -> dict[str, Any]:
    containers = pod_spec(job)["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def test_the_job_is_named_by_the_sandbox_id(make_spec: MakeSpec) -> None:
    job = job_of(make_spec, sandbox_id="run-7-board-meeting")
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert job["metadata"]["name"] == "run-7-board-meeting"
    assert job["metadata"]["namespace"] == NAMESPACE


def test_labels_on_the_job_and_its_pod_template(make_spec: MakeSpec,
                                                k8s_settings: Settings) -> None:
    job = job_of(make_spec, sandbox_id="sbx-9", run_id="run-3", attempt=2,
                 template_id="board_meeting")
    expected = {
        LABEL_MANAGED_BY: "simple",
        LABEL_RUN_ID: "run-3",
        LABEL_SANDBOX_ID: "sbx-9",
        LABEL_TEMPLATE_ID: "board_meeting",
        "simple.dev/attempt": "2",
        "simple.dev/controller": k8s_settings.controller_id,  # the informers' selector
    }
    assert job["metadata"]["labels"] == expected
    assert job["spec"]["template"]["metadata"]["labels"] == expected


def test_the_full_env_contract_is_injected(make_spec: MakeSpec) -> None:
    spec = make_spec(sandbox_id="sbx-env", attempt=3)
    job = build_job(spec, NAMESPACE, SANDBOX_SERVICE_ACCOUNT, JOB_TTL_S)
    secret = build_secret(spec, NAMESPACE, {"metadata": {"name": "sbx-env", "uid": "u-1"}})
    # What the container sees: its env, and the Secret's keys as files where it is mounted.
    env = {e["name"]: e["value"] for e in sandbox_container(job)["env"]}
    env.update(secret["stringData"])
    assert set(ENV_NAMES) <= set(env)
    assert {name: env[name] for name in ENV_NAMES} == spec.env.to_environ()
    assert env["SIMPLE_ATTEMPT"] == "3"
    assert json.loads(env["SIMPLE_TEMPLATE_CONFIG"]) == {"agents": 6, "steps": 7}
    assert all(isinstance(e.get("value", ""), str) for e in sandbox_container(job)["env"])


def test_job_policy_deadline_no_retries_ttl(make_spec: MakeSpec) -> None:
    spec = job_of(make_spec, timeout_s=900)["spec"]
    assert spec["activeDeadlineSeconds"] == 900
    assert spec["backoffLimit"] == 0
    assert spec["ttlSecondsAfterFinished"] == JOB_TTL_S
    assert spec["podFailurePolicy"] == {"rules": [{
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }]}
    assert spec["template"]["spec"]["restartPolicy"] == "Never"


def test_restricted_pod_security_standard(make_spec: MakeSpec) -> None:
    job = job_of(make_spec)
    pod = pod_spec(job)
    assert pod["serviceAccountName"] == SANDBOX_SERVICE_ACCOUNT
    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    context = sandbox_container(job)["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["runAsNonRoot"] is True and context["runAsUser"] == 10001
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert context["readOnlyRootFilesystem"] is True
    assert context["privileged"] is False


def test_only_work_and_tmp_are_writable(make_spec: MakeSpec) -> None:
    job = job_of(make_spec)
    container = sandbox_container(job)
    assert container["workingDir"] == "/work"
    writable = {m["mountPath"]: m["name"] for m in container["volumeMounts"]
                if not m.get("readOnly")}
    assert set(writable) == {"/work", "/tmp"}
    volumes = {v["name"]: v for v in pod_spec(job)["volumes"]}
    assert all("emptyDir" in volumes[name] for name in writable.values())
    # Besides them, only the sandbox's own Secret, read-only (its credentials as files).
    [(name, volume)] = [(n, v) for n, v in volumes.items() if n not in writable.values()]
    assert volume["secret"]["secretName"] == f"{job['metadata']['name']}-env"
    [mount] = [m for m in container["volumeMounts"] if m["name"] == name]
    assert mount["readOnly"] is True


def test_resources_from_the_template(make_spec: MakeSpec) -> None:
    container = sandbox_container(job_of(make_spec, cpu="1500m", memory="1Gi"))
    assert container["resources"] == {"requests": {"cpu": "1500m", "memory": "1Gi"},
                                      "limits": {"cpu": "1500m", "memory": "1Gi"}}
    assert "resources" not in sandbox_container(job_of(make_spec, cpu=None, memory=None))
    only_memory = sandbox_container(job_of(make_spec, cpu=None, memory="512Mi"))
    assert only_memory["resources"]["limits"] == {"memory": "512Mi"}


@pytest.mark.parametrize(("field", "value"), [("cpu", "half"), ("memory", "512MB"),
                                              ("memory", "-1Gi"), ("cpu", "")])
def test_a_bad_quantity_is_an_input_error_naming_the_field(make_spec: MakeSpec, field: str,
                                                           value: str) -> None:
    with pytest.raises(InputError) as info:
        job_of(make_spec, **{field: value})
    assert info.value.field == f"resources.{field}"


def test_image_and_command(make_spec: MakeSpec) -> None:
    container = sandbox_container(job_of(make_spec, image="reg.example/sim:2",
                                         command=("python", "-m", "sim")))
    assert container["image"] == "reg.example/sim:2"
    assert container["command"] == ["python", "-m", "sim"]
    assert "command" not in sandbox_container(job_of(make_spec, command=()))


@pytest.mark.parametrize(("overrides", "field"), [
    ({"sandbox_id": "Not_A_Name"}, "sandbox_id"),
    ({"sandbox_id": "x" * 64}, "sandbox_id"),
    ({"run_id": "run/1"}, LABEL_RUN_ID),
    ({"template_id": "t" * 64}, LABEL_TEMPLATE_ID),
    ({"timeout_s": 0}, "timeout_s"),
    ({"image": ""}, "image"),
])
def test_bad_specs_are_refused(make_spec: MakeSpec, overrides: dict[str, Any],
                               field: str) -> None:
    with pytest.raises(InputError) as info:
        job_of(make_spec, **overrides)
    assert info.value.field == field


def test_pure_same_input_same_output_and_nothing_mutated(make_spec: MakeSpec) -> None:
    spec = make_spec()
    before = copy.deepcopy(spec)
    first = build_job(spec, NAMESPACE, SANDBOX_SERVICE_ACCOUNT, JOB_TTL_S)
    first["metadata"]["labels"]["mutated"] = "yes"  # the caller owns what it got
    second = build_job(spec, NAMESPACE, SANDBOX_SERVICE_ACCOUNT, JOB_TTL_S)
    assert spec == before
    assert "mutated" not in second["metadata"]["labels"]
    assert "mutated" not in second["spec"]["template"]["metadata"]["labels"]
    assert json.loads(json.dumps(second)) == second


def test_render_is_the_builder_with_the_settings(make_spec: MakeSpec,
                                                 k8s_settings: Settings) -> None:
    spec = make_spec()
    assert KubernetesBackend(k8s_settings).render(spec) == build_job(
        spec, k8s_settings.kubernetes_namespace, k8s_settings.kubernetes_sandbox_service_account,
        k8s_settings.kubernetes_job_ttl_s)


@pytest.mark.parametrize("version", VALIDATED_KUBERNETES_VERSIONS)
def test_the_job_validates_strictly_against_the_kubernetes_schema(make_spec: MakeSpec,
                                                                  version: str) -> None:
    kubernetes_validate = import_tool("kubernetes_validate", "kubernetes-validate")
    for job in (job_of(make_spec), job_of(make_spec, cpu=None, memory=None, command=())):
        assert kubernetes_validate.validate(job, version, strict=True) == version[:4]
