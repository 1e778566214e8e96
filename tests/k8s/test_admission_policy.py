"""The chart's ValidatingAdmissionPolicy, its CEL rules evaluated offline (cel-python).

The policy is read from `helm template` output, as a cluster would get it; its variables
and validations are evaluated the way the API server does (variables first, each
validation must be true), against the Jobs the kubernetes backend itself renders
(`KubernetesBackend.render`, i.e. `build_job`) and the Pods made from them: allowed. Then
against copies with one hardening field broken at a time, in the main container, an
initContainer and an ephemeral container: refused, by the rule whose message names it.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from controller.backends.base import SandboxSpec
from controller.backends.kubernetes.backend import KubernetesBackend
from controller.settings import Settings
from tests.k8s.conftest import MakeSpec, import_tool
from tests.k8s.test_chart import NAMESPACE, controller, env_of, render

CONTROLLER_USER = f"system:serviceaccount:{NAMESPACE}:simple"
Mutation = Callable[[dict[str, Any], dict[str, Any]], None]  # (pod spec, container)


class Policy:
    """A rendered ValidatingAdmissionPolicy, compiled with cel-python."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.celpy = import_tool("celpy", "cel-python")
        self.env = self.celpy.Environment()
        spec = doc["spec"]
        self.match_conditions = [self._compile(c["expression"]) for c in spec["matchConditions"]]
        self.variables = [(v["name"], self._compile(v["expression"]))
                          for v in spec.get("variables", [])]
        self.validations = [(self._compile(v["expression"]), v["message"])
                            for v in spec["validations"]]

    def _compile(self, expression: str) -> Any:
        return self.env.program(self.env.compile(expression))

    def matches(self, username: str) -> bool:
        request = self.celpy.json_to_cel({"userInfo": {"username": username}})
        return all(bool(p.evaluate({"request": request})) for p in self.match_conditions)

    def refusals(self, obj: dict[str, Any]) -> list[str]:
        """The messages of the validations `obj` fails; [] means admitted. An evaluation
        error counts as a refusal too (failurePolicy: Fail), with the error in the message."""
        celtypes = self.celpy.celtypes
        activation: dict[str, Any] = {"object": self.celpy.json_to_cel(obj)}
        variables: dict[Any, Any] = {}
        for name, program in self.variables:
            activation["variables"] = celtypes.MapType(variables)
            variables[celtypes.StringType(name)] = program.evaluate(activation)
        activation["variables"] = celtypes.MapType(variables)
        refused = []
        for program, message in self.validations:
            try:
                result = program.evaluate(activation)
            except self.celpy.CELEvalError as e:
                refused.append(f"evaluation error ({e}): {message}")
                continue
            if result is not True and not (isinstance(result, celtypes.BoolType) and result):
                refused.append(message)
        return refused


@pytest.fixture(scope="module")
def chart_docs(helm: str) -> list[dict[str, Any]]:
    return render(helm)


@pytest.fixture(scope="module")
def policy(chart_docs: list[dict[str, Any]]) -> Policy:
    [doc] = [d for d in chart_docs if d["kind"] == "ValidatingAdmissionPolicy"]
    return Policy(doc)


@pytest.fixture
def backend(chart_docs: list[dict[str, Any]]) -> KubernetesBackend:
    """The backend as the chart configures it (namespace, sandbox account, TTL)."""
    env = env_of(controller(chart_docs))
    return KubernetesBackend(Settings.model_validate({
        "backend": "kubernetes",
        "kubernetes_namespace": NAMESPACE,
        "kubernetes_sandbox_service_account": env["SIMPLE_KUBERNETES_SANDBOX_SERVICE_ACCOUNT"],
        "kubernetes_job_ttl_s": int(env["SIMPLE_KUBERNETES_JOB_TTL_S"]),
    }))


def the_backends_jobs(backend: KubernetesBackend, make_spec: MakeSpec) -> list[dict[str, Any]]:
    specs: list[SandboxSpec] = [
        make_spec(),
        make_spec("sbx-bare", cpu=None, memory=None, command=()),
        make_spec("sbx-retry", attempt=3, image="registry.example/team/sim:2.1"),
        # a template's Secret, mounted by reference (a projected volume of secrets)
        dataclasses.replace(make_spec("sbx-keyed"),
                            secrets=(("openai", "api-key", "OPENAI_API_KEY"),)),
    ]
    return [backend.render(spec) for spec in specs]


def pod_of(job: dict[str, Any]) -> dict[str, Any]:
    """The Pod the Job controller creates from the Job's template."""
    template = job["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{job['metadata']['name']}-abcde",
                         "namespace": job["metadata"]["namespace"],
                         "labels": template["metadata"]["labels"]},
            "spec": copy.deepcopy(template["spec"])}


# -- the policy as rendered ----------------------------------------------------------------


def test_the_policy_is_bound_to_deny_and_fails_closed(chart_docs: list[dict[str, Any]]) -> None:
    [policy] = [d for d in chart_docs if d["kind"] == "ValidatingAdmissionPolicy"]
    [binding] = [d for d in chart_docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert binding["spec"] == {"policyName": policy["metadata"]["name"],
                               "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    rules = {(group, resource, op) for rule in policy["spec"]["matchConstraints"]["resourceRules"]
             for group in rule["apiGroups"] for resource in rule["resources"]
             for op in rule["operations"]}
    assert {("batch", "jobs", "CREATE"), ("", "pods", "CREATE"),
            ("", "pods/ephemeralcontainers", "UPDATE")} <= rules
    assert NAMESPACE in policy["metadata"]["name"]  # cluster-scoped: one per release


def test_it_applies_only_to_the_controllers_service_account(policy: Policy) -> None:
    assert policy.matches(CONTROLLER_USER)
    assert not policy.matches("system:serviceaccount:kube-system:job-controller")
    assert not policy.matches(f"system:serviceaccount:{NAMESPACE}:simple-sandbox")
    assert not policy.matches("system:serviceaccount:other:simple")
    assert not policy.matches("kubernetes-admin")


def test_it_can_be_turned_off(helm: str) -> None:
    kinds = {d["kind"] for d in render(helm, "admissionpolicy-off-values.yaml")}
    assert not kinds & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


# -- the backend's own Jobs are admitted ---------------------------------------------------


def test_the_backends_jobs_and_their_pods_are_admitted(policy: Policy, backend: KubernetesBackend,
                                                      make_spec: MakeSpec) -> None:
    for job in the_backends_jobs(backend, make_spec):
        assert policy.refusals(job) == [], job["metadata"]["name"]
        assert policy.refusals(pod_of(job)) == [], job["metadata"]["name"]


# -- one hardening field broken at a time is refused -----------------------------------------


def _context(container: dict[str, Any]) -> dict[str, Any]:
    return container.setdefault("securityContext", {})


MUTATIONS: dict[str, tuple[Mutation, str]] = {
    "runAsNonRoot false": (lambda pod, c: _context(c).update(runAsNonRoot=False),
                           "runAsNonRoot: true"),
    "runAsNonRoot unset everywhere": (
        lambda pod, c: (_context(c).pop("runAsNonRoot"),
                        pod["securityContext"].pop("runAsNonRoot")), "runAsNonRoot: true"),
    "runAsUser 0": (lambda pod, c: _context(c).update(runAsUser=0), "uid 0"),
    "pod runAsUser 0": (lambda pod, c: pod["securityContext"].update(runAsUser=0), "uid 0"),
    "allowPrivilegeEscalation true": (
        lambda pod, c: _context(c).update(allowPrivilegeEscalation=True),
        "allowPrivilegeEscalation: false"),
    "allowPrivilegeEscalation unset": (
        lambda pod, c: _context(c).pop("allowPrivilegeEscalation"),
        "allowPrivilegeEscalation: false"),
    "privileged": (lambda pod, c: _context(c).update(privileged=True), "privileged"),
    "capabilities not dropped": (lambda pod, c: _context(c).update(capabilities={}),
                                 "drop ALL capabilities"),
    "a capability dropped, not ALL": (
        lambda pod, c: _context(c).update(capabilities={"drop": ["NET_RAW"]}),
        "drop ALL capabilities"),
    "a capability added": (
        lambda pod, c: _context(c)["capabilities"].update(add=["NET_ADMIN"]),
        "drop ALL capabilities"),
    "readOnlyRootFilesystem false": (
        lambda pod, c: _context(c).update(readOnlyRootFilesystem=False),
        "readOnlyRootFilesystem: true"),
    "readOnlyRootFilesystem unset": (
        lambda pod, c: _context(c).pop("readOnlyRootFilesystem"),
        "readOnlyRootFilesystem: true"),
    "no securityContext at all": (lambda pod, c: c.pop("securityContext"),
                                  "allowPrivilegeEscalation: false"),
    "hostNetwork": (lambda pod, c: pod.update(hostNetwork=True), "host's network"),
    "hostPID": (lambda pod, c: pod.update(hostPID=True), "host's network, PID"),
    "hostIPC": (lambda pod, c: pod.update(hostIPC=True), "PID or IPC"),
    "a hostPath volume": (
        lambda pod, c: pod["volumes"].append({"name": "host", "hostPath": {"path": "/"}}),
        "hostPath"),
    "automountServiceAccountToken true": (
        lambda pod, c: pod.update(automountServiceAccountToken=True),
        "automountServiceAccountToken: false"),
    "automountServiceAccountToken unset": (
        lambda pod, c: pod.pop("automountServiceAccountToken"),
        "automountServiceAccountToken: false"),
    # issue 25, finding 8
    "another serviceAccountName": (lambda pod, c: pod.update(serviceAccountName="default"),
                                   "the sandbox service account"),
    "serviceAccountName unset": (lambda pod, c: pod.pop("serviceAccountName"),
                                 "the sandbox service account"),
    "the deprecated serviceAccount field": (
        lambda pod, c: pod.update(serviceAccount="simple"), "the sandbox service account"),
    "a projected service-account token volume": (
        lambda pod, c: pod["volumes"].append({"name": "token", "projected": {"sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}}),
        "projected service-account token"),
    "a hostPort": (
        lambda pod, c: c.setdefault("ports", []).append(
            {"containerPort": 8080, "hostPort": 8080}), "hostPort"),
    "pod seccomp Unconfined": (
        lambda pod, c: pod["securityContext"].update(seccompProfile={"type": "Unconfined"}),
        "seccompProfile RuntimeDefault"),
    "pod seccomp unset": (lambda pod, c: pod["securityContext"].pop("seccompProfile"),
                          "seccompProfile RuntimeDefault"),
    "container seccomp Unconfined": (
        lambda pod, c: _context(c).update(seccompProfile={"type": "Unconfined"}),
        "no container may set Unconfined"),
}
POD_LEVEL = {"pod runAsUser 0", "hostNetwork", "hostPID", "hostIPC", "a hostPath volume",
             "automountServiceAccountToken true", "automountServiceAccountToken unset",
             "another serviceAccountName", "serviceAccountName unset",
             "the deprecated serviceAccount field", "a projected service-account token volume",
             "pod seccomp Unconfined", "pod seccomp unset"}
WHERE = ("containers", "initContainers", "ephemeralContainers")
CASES = [(name, where) for name in MUTATIONS
         for where in (("containers",) if name in POD_LEVEL else WHERE)]


def broken(job: dict[str, Any], mutation: Mutation, where: str, as_pod: bool
           ) -> dict[str, Any]:
    """A copy of `job` (or of its Pod) with a second, hardened container in `where` (none
    for `containers`: the sandbox container itself) and the mutation applied there."""
    obj = pod_of(job) if as_pod else copy.deepcopy(job)
    pod = obj["spec"] if as_pod else obj["spec"]["template"]["spec"]
    if where != "containers":
        extra = copy.deepcopy(pod["containers"][0])
        extra["name"] = f"extra-{where.lower()}"
        pod[where] = [extra]
    mutation(pod, pod[where][0])
    return obj


@pytest.mark.parametrize("as_pod", [False, True], ids=["Job", "Pod"])
@pytest.mark.parametrize(("name", "where"), CASES)
def test_breaking_one_hardening_field_is_refused_with_its_message(
    policy: Policy, backend: KubernetesBackend, make_spec: MakeSpec, name: str, where: str,
    as_pod: bool,
) -> None:
    mutation, expected = MUTATIONS[name]
    job = backend.render(make_spec())
    refusals = policy.refusals(broken(job, mutation, where, as_pod))
    assert refusals, f"{name} in {where} was admitted"
    assert all(not r.startswith("evaluation error") for r in refusals), refusals
    assert any(expected in r for r in refusals), refusals
    assert all(r.startswith("SIMPLE sandbox hardening: ") for r in refusals)


def test_every_rule_is_exercised_by_some_mutation(policy: Policy, backend: KubernetesBackend,
                                                 make_spec: MakeSpec) -> None:
    job = backend.render(make_spec())
    failed: set[str] = set()
    for mutation, _ in MUTATIONS.values():
        failed.update(policy.refusals(broken(job, mutation, "containers", as_pod=False)))
    assert failed == {message for _, message in policy.validations}
