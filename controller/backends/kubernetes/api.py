"""The Kubernetes API at the edge of the `kubernetes` backend: its errors as BackendErrors
that name the call, the API's reason and what to do, raw answers as JSON, and the client.

The `kubernetes` package is imported only inside `load_api_client`, so importing this
module (and rendering Jobs) needs neither the package nor a cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from controller.errors import BackendError, UnavailableError


class KubernetesApiError(BackendError):
    """A Kubernetes API call failed with an HTTP status (0 when none came back)."""

    def __init__(
        self, message: str, *, status: int, hint: str | None = None, transient: bool = False
    ) -> None:
        super().__init__(message, hint=hint, transient=transient)
        self.status = status


def json_of(answer: Any) -> dict[str, Any]:
    """An API answer as the JSON dict the server sent (camelCase keys)."""
    if isinstance(answer, Mapping):
        return dict(answer)
    data = body_bytes(answer)
    return dict(json.loads(data)) if data else {}


def body_bytes(response: Any) -> bytes:
    if isinstance(response, bytes):
        return response
    if isinstance(response, str):
        return response.encode()
    return bytes(response.data)


def body_chunks(response: Any, size: int = 64 * 1024) -> Iterator[bytes]:
    """A raw answer's body a chunk at a time (a streamed urllib3 response), connection
    given back at the end; bytes or text answers (fakes) as one chunk."""
    if isinstance(response, bytes | str):
        yield body_bytes(response)
        return
    stream = getattr(response, "stream", None)
    if stream is None:
        yield body_bytes(response)
        return
    try:
        yield from stream(size, decode_content=True)
    finally:
        release = getattr(response, "release_conn", None)
        if release is not None:
            release()


# -- API errors -------------------------------------------------------------------------


def is_transient(status: int) -> bool:
    return status == 429 or 500 <= status <= 599


def retry_after(e: Any) -> float | None:
    headers = getattr(e, "headers", None) or {}
    try:
        return float(str(headers.get("Retry-After")))
    except (TypeError, ValueError):
        return None


def api_error(
    e: Any, verb: str, resource: str, namespace: str, attempts: int
) -> KubernetesApiError:
    """A BackendError that names the call, the API's reason, and what to do."""
    status = int(e.status or 0)
    message = _status_message(e)
    what = f"cannot {verb} {resource} in namespace {namespace!r}: {e.reason} ({status})"
    if message:
        what += f": {message}"
    hint: str | None = None
    transient = False
    if is_transient(status):
        what += f" after {attempts} attempts"
        hint, transient = "the API server is overloaded or restarting; try again later", True
    elif status == 403 and "exceeded quota" in message:
        hint, transient = (
            ("the namespace's ResourceQuota is used up; lower max_parallel or raise the quota"),
            True,
        )
    elif status == 403:
        hint = (
            f"the controller's ServiceAccount needs `{verb}` on `{resource}` in namespace "
            f"{namespace!r} (the chart's Role grants it; see docs/kubernetes.md)"
        )
    elif status == 401:
        hint = "the API server refused the controller's credentials: check its token or kubeconfig"
    elif status == 404:
        hint = f"check that namespace {namespace!r} exists (SIMPLE_KUBERNETES_NAMESPACE)"
    elif status in (400, 422):
        hint = (
            "the API server refused the manifest; see it with "
            "`simplectl run --backend kubernetes --dry-run -o yaml`"
        )
    elif status == 0:
        hint = "no HTTP answer: check the API server address and its TLS certificate"
    return KubernetesApiError(what, status=status, hint=hint, transient=transient)


def _status_message(e: Any) -> str:
    """The `message` of the Status object the API server answers errors with."""
    body = getattr(e, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not body:
        return ""
    try:
        decoded = json.loads(body)
    except ValueError:
        return str(body)[:300]
    return str(decoded.get("message", "")) if isinstance(decoded, dict) else ""


def load_api_client() -> Any:
    """An ApiClient from in-cluster config, else kubeconfig; reads files, contacts nothing."""
    try:
        from kubernetes import client, config
    except ImportError as e:
        raise UnavailableError(
            "the kubernetes backend needs the `kubernetes` package",
            hint="pip install 'simple-orchestrator[kubernetes]'",
        ) from e
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        try:
            config.load_kube_config(client_configuration=configuration)
        except (config.ConfigException, OSError) as e:
            raise UnavailableError(
                f"no Kubernetes credentials: not in a cluster and no usable kubeconfig ({e})",
                hint="run the controller in-cluster with its ServiceAccount, or set KUBECONFIG",
            ) from e
    configuration.retries = 0  # retries are this module's policy, not urllib3's
    return client.ApiClient(configuration)
