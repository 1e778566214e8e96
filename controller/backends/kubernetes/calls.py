"""The `kubernetes` backend's way to the API server, in its namespace: the client objects
(built on first use, from in-cluster config or kubeconfig), one call with retries, paged
lists and watches.

Only what is known to be transient is retried (429, 5xx, connection errors), with capped
exponential backoff and jitter, a server's Retry-After as a floor; anything else raises a
BackendError at once that names the call and what to do (`api.api_error`).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from controller.backends.kubernetes.api import (
    KubernetesApiError,
    api_error,
    is_transient,
    json_of,
    load_api_client,
    retry_after,
)
from controller.backends.kubernetes.informer import WATCH_TIMEOUT_S, Gone
from controller.retry import backoff_s

log = logging.getLogger(__name__)


class KubeCalls:
    """API calls in one namespace; the API objects, sleeper and jitter are injectable."""

    def __init__(
        self,
        namespace: str,
        selector: str,
        *,
        batch_api: Any = None,
        core_api: Any = None,
        sleeper: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
        max_attempts: int = 4,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 8.0,
        request_timeout_s: float = 15.0,
    ) -> None:
        self.namespace = namespace
        self.selector = selector  # what watches follow
        self.lock = threading.Lock()  # guards building the API objects (and the informers)
        self._batch = batch_api
        self._core = core_api
        self._api_client: Any = None  # only when this object built the API objects
        self._sleep = sleeper
        self._jitter = jitter
        self._max_attempts = max(1, max_attempts)
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        self._request_timeout_s = request_timeout_s

    def close(self) -> None:
        if self._api_client is not None:
            self._api_client.close()
            self._api_client = None

    def list_objects(
        self, resource: str, method: Callable[..., Any], selector: str
    ) -> list[Mapping[str, Any]]:
        return self.list_versioned(resource, method, selector)[0]

    def list_versioned(
        self, resource: str, method: Callable[..., Any], selector: str
    ) -> tuple[list[Mapping[str, Any]], str | None]:
        """Every object the selector matches (paged) and the list's resourceVersion."""
        items: list[Mapping[str, Any]] = []
        token: str | None = None
        version: str | None = None
        while True:
            page_args: dict[str, Any] = {"label_selector": selector, "limit": 500}
            if token:
                page_args["_continue"] = token
            page = json_of(self.call("list", resource, method, self.namespace, **page_args))
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            version = version or meta.get("resourceVersion")
            token = meta.get("continue")
            if not token:
                return items, version

    def watch(self, lister: Callable[..., Any], version: str | None) -> Any:
        """Open one watch (a streaming answer) from `version`, with bookmarks."""
        kwargs: dict[str, Any] = {
            "label_selector": self.selector,
            "watch": True,
            "allow_watch_bookmarks": True,
            "timeout_seconds": WATCH_TIMEOUT_S,
            "_preload_content": False,
            "_request_timeout": (self._request_timeout_s, WATCH_TIMEOUT_S + 30),
        }
        if version:
            kwargs["resource_version"] = version
        from kubernetes.client.exceptions import ApiException

        try:
            return lister(self.namespace, **kwargs)
        except ApiException as e:
            if int(e.status or 0) == 410:
                raise Gone() from e
            raise

    def apis(self) -> tuple[Any, Any]:
        """The BatchV1Api and CoreV1Api, built on first use from in-cluster config or kubeconfig."""
        with self.lock:
            return self.apis_unlocked()

    def apis_unlocked(self) -> tuple[Any, Any]:
        if self._batch is None or self._core is None:
            from kubernetes import client

            self._api_client = load_api_client()
            self._batch = self._batch or client.BatchV1Api(self._api_client)
            self._core = self._core or client.CoreV1Api(self._api_client)
        return self._batch, self._core

    def call(
        self, verb: str, resource: str, method: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """One API call, its raw answer; 429, 5xx and connection errors are retried, the rest
        raise at once. `verb` and `resource` name the RBAC right the call needs, for hints."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        kwargs.setdefault("_request_timeout", self._request_timeout_s)
        # Raw answers: no model round trip that a newer server's objects could fail, and a
        # log that happens to be JSON stays bytes.
        kwargs.setdefault("_preload_content", False)
        for attempt in range(1, self._max_attempts + 1):
            last = attempt == self._max_attempts
            try:
                return method(*args, **kwargs)
            except ApiException as e:
                status = int(e.status or 0)
                if not is_transient(status) or last:
                    raise api_error(e, verb, resource, self.namespace, attempt) from e
                delay = self.backoff(attempt, retry_after(e))
                log.warning(
                    "%s %s: %s %s; retry %d/%d in %.1fs",
                    verb,
                    resource,
                    status,
                    e.reason,
                    attempt,
                    self._max_attempts - 1,
                    delay,
                )
            except (urllib3.exceptions.HTTPError, OSError) as e:
                if last:
                    raise KubernetesApiError(
                        f"cannot reach the Kubernetes API to {verb} {resource} "
                        f"after {attempt} attempts: {e}",
                        status=0,
                        transient=True,
                        hint="check the API server address (kubeconfig or in-cluster env) "
                        "and the network between the controller and the cluster",
                    ) from e
                delay = self.backoff(attempt, None)
                log.warning(
                    "%s %s: %s; retry %d/%d in %.1fs",
                    verb,
                    resource,
                    e,
                    attempt,
                    self._max_attempts - 1,
                    delay,
                )
            self._sleep(delay)
        raise AssertionError("unreachable")  # the loop returns or raises

    def backoff(self, attempt: int, retry_after_s: float | None) -> float:
        """Capped exponential backoff with equal jitter; a server's Retry-After is a floor."""
        delay = backoff_s(
            attempt, self._backoff_base_s, self._backoff_max_s, self._jitter, equal_jitter=True
        )
        if retry_after_s is not None:
            delay = max(delay, min(retry_after_s, self._backoff_max_s))
        return delay
