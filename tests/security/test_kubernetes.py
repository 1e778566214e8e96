"""Finding 8, on Kubernetes: sandbox tokens sat in plain Job and container env, and the
controller's `create jobs` right could start any pod spec where the namespace does not
enforce Pod Security `restricted`.

Both reproduced as the review did, offline: a reader of Jobs looks for a launched
sandbox's credentials in what the API server stores (kmock plays it), and the
controller's account submits a Job that escapes to the node, which the chart's
ValidatingAdmissionPolicy (its CEL evaluated with cel-python) must refuse.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterator

import pytest

from controller.backends.kubernetes.backend import KubernetesBackend
from controller.backends.kubernetes.job import SECRET_ENV_NAMES
from controller.settings import Settings
from tests.k8s.conftest import (  # noqa: F401 (the fixtures helm, k8s_settings, make_spec)
    NAMESPACE,
    FakeCluster,
    MakeSpec,
    helm,
    k8s_settings,
    make_spec,
)
from tests.k8s.test_admission_policy import CONTROLLER_USER, Policy
from tests.k8s.test_chart import render


@pytest.fixture
def fake_cluster() -> Iterator[FakeCluster]:
    cluster = FakeCluster()
    try:
        yield cluster
    finally:
        cluster.close()


def test_a_reader_of_jobs_and_pods_finds_no_sandbox_credential(
    fake_cluster: FakeCluster, k8s_settings: Settings, make_spec: MakeSpec  # noqa: F811
) -> None:
    spec = make_spec("sbx-victim")
    spec = dataclasses.replace(spec, env=dataclasses.replace(
        spec.env, sandbox_token="victim-token-8c1f0e", input_url="http://c/in?signature=s1"))
    batch, core = fake_cluster.apis()
    backend = KubernetesBackend(k8s_settings, batch_api=batch, core_api=core, informers=False)
    try:
        backend.launch(spec)
        pod = fake_cluster.start_pod("sbx-victim")
        # What `kubectl get jobs,pods -o yaml` shows anyone with read access to them.
        pods = json.loads(core.list_namespaced_pod(NAMESPACE, _preload_content=False).data)
        readable = json.dumps([fake_cluster.job("sbx-victim"), pods["items"]])
        assert pod in readable
    finally:
        backend.close()
    secrets = {k: v for k, v in spec.env.to_environ().items() if k in SECRET_ENV_NAMES}
    assert secrets["SIMPLE_SANDBOX_TOKEN"] == "victim-token-8c1f0e"
    leaked = [name for name, value in secrets.items() if value in readable]
    assert leaked == [], f"readable in the Job or Pod: {leaked}"
    # ...and the sandbox still gets them, from its own Secret.
    assert fake_cluster.secret("sbx-victim-env")["stringData"] == secrets


def test_the_controllers_account_cannot_start_a_pod_that_escapes_to_the_node(
    helm: str, k8s_settings: Settings, make_spec: MakeSpec  # noqa: F811
) -> None:
    [doc] = [d for d in render(helm) if d["kind"] == "ValidatingAdmissionPolicy"]
    policy = Policy(doc)
    assert policy.matches(CONTROLLER_USER)
    job = KubernetesBackend(k8s_settings).render(make_spec("sbx-escape"))
    assert policy.refusals(job) == []
    # The classic escape: privileged, root, the node's namespaces and its filesystem.
    escape = copy.deepcopy(job)
    pod = escape["spec"]["template"]["spec"]
    pod.update(hostPID=True, hostNetwork=True, automountServiceAccountToken=True,
               securityContext={"runAsUser": 0})
    pod["volumes"].append({"name": "node", "hostPath": {"path": "/"}})
    # ...and the cluster's: a powerful service account's token, a node port, no seccomp
    pod["serviceAccountName"] = "default"
    pod["volumes"].append({"name": "sa", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token"}}]}})
    container = pod["containers"][0]
    container["securityContext"] = {"privileged": True, "runAsUser": 0,
                                    "capabilities": {"add": ["SYS_ADMIN"]},
                                    "seccompProfile": {"type": "Unconfined"}}
    container["ports"] = [{"containerPort": 22, "hostPort": 22}]
    container["volumeMounts"].append({"name": "node", "mountPath": "/host"})
    refusals = policy.refusals(escape)
    assert len(refusals) == len(policy.validations), refusals  # every rule objects
