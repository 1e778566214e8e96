"""A template's secrets on Kubernetes: the Job mounts the named Secret's key by reference
(a projected volume), as a file the runtime exports; SIMPLE never reads the value."""

from __future__ import annotations

import dataclasses
import json

from controller.backends.kubernetes.backend import KubernetesBackend
from controller.backends.kubernetes.job import TEMPLATE_SECRETS_DIR
from controller.settings import Settings
from sandbox_image.contract import ENV_TEMPLATE_SECRETS_DIR
from tests.k8s.conftest import FakeCluster, MakeSpec, import_tool


def test_kubernetes_mounts_the_secret_by_reference(make_spec: MakeSpec, k8s_settings: Settings,
                                                   cluster: FakeCluster) -> None:
    spec = dataclasses.replace(make_spec("sbx-key"),
                               secrets=(("openai", "api-key", "OPENAI_API_KEY"),))
    job = KubernetesBackend(k8s_settings).render(spec)
    validate = import_tool("kubernetes_validate", "kubernetes-validate")
    assert validate.validate(job, "1.33.0", strict=True) == "1.33"
    pod = job["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "template-secrets"]
    assert volume["projected"]["sources"] == [
        {"secret": {"name": "openai", "items": [{"key": "api-key", "path": "OPENAI_API_KEY"}]}}]
    container = pod["containers"][0]
    assert {"name": "template-secrets", "mountPath": TEMPLATE_SECRETS_DIR,
            "readOnly": True} in container["volumeMounts"]
    assert {"name": ENV_TEMPLATE_SECRETS_DIR, "value": TEMPLATE_SECRETS_DIR} in container["env"]
    # launched through the API: the Job the cluster holds refers to the Secret, and SIMPLE
    # created no Secret of its own for it (it never reads the value)
    batch, core = cluster.apis()
    backend = KubernetesBackend(k8s_settings, batch_api=batch, core_api=core, informers=False)
    try:
        backend.launch(spec)
    finally:
        backend.close()
    held = cluster.job("sbx-key")["spec"]["template"]["spec"]["volumes"]
    assert any(v["name"] == "template-secrets" for v in held)
    assert "openai" not in json.dumps(cluster.secret("sbx-key-env"))
