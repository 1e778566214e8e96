"""The docker backend: one hardened container per sandbox attempt on a Docker engine.

Containers are named after the sandbox id and carry the labels of docs/architecture.md, so
`observe` finds them by label after a controller restart. The exit code and the
OOM flag come from the engine's container state (`exits`), never guessed from exit
code 137. Containers are kept after they exit until the controller has archived their
logs and calls `remove`. The `docker` package is imported here (and in `errors`, which
only this module loads), so the embedded default never loads it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import requests

from controller.backends import logbudget
from controller.backends.base import Backend, LogView, Notify, Observed, ObservedState, SandboxSpec
from controller.backends.docker.exits import exit_from_inspect
from controller.backends.docker.spec import build_container_spec
from controller.backends.template_secrets import resolve
from controller.errors import BackendError, ConfigError, NotFoundError, UnavailableError
from sandbox_image.contract import (
    LABEL_ATTEMPT,
    LABEL_CONTROLLER,
    LABEL_MANAGED_BY,
    LABEL_MANAGED_BY_VALUE,
    LABEL_RUN_ID,
    LABEL_SANDBOX_ID,
)

# Submodules, not `import docker`: the repo's docker/ scripts dir would shadow the SDK for mypy.
try:
    from docker.client import DockerClient
    from docker.errors import APIError, DockerException, NotFound
    from docker.models.containers import _create_container_args
except ImportError as e:  # pragma: no cover - depends on the installed extras
    raise ConfigError(
        "the docker backend needs the docker package",
        hint="pip install 'simple-orchestrator[docker]'",
    ) from e

# After the check above: these import the docker package too.
from controller.backends.docker.errors import (
    ENGINE_HINT,
    describe,
    engine_call_error,
    launch_error,
    unreachable,
)

if TYPE_CHECKING:
    from controller.settings import Settings

logger = logging.getLogger(__name__)

CLIENT_TIMEOUT_S = 30  # every engine call, so a hung engine cannot hang the reconciler
STOP_GRACE_S = 3  # SIGTERM, then SIGKILL after this many seconds
EVENTS_RETRY_S = 5.0
MANAGED_FILTER = f"{LABEL_MANAGED_BY}={LABEL_MANAGED_BY_VALUE}"

_RUNNING_STATES = {"running", "restarting", "paused"}
_EXITED_STATES = {"exited", "dead", "removing"}


class DockerBackend(Backend):
    """Runs each sandbox attempt as one container; see `build_container_spec` for its limits."""

    name = "docker"
    supports_oom_detection = True

    def __init__(
        self,
        settings: Settings,
        notify: Notify | None = None,
        *,
        client_factory: Callable[[], DockerClient] | None = None,
    ) -> None:
        super().__init__(notify)
        self._settings = settings
        self._client_factory = client_factory or (
            lambda: DockerClient.from_env(timeout=CLIENT_TIMEOUT_S)
        )
        self._client: DockerClient | None = None
        self._lock = threading.Lock()
        # Exited containers never change: inspect each once, keyed by container id.
        self._exited: dict[str, Observed] = {}
        self._closed = threading.Event()
        self._watch_events = notify is not None  # nobody to tell: no event stream needed
        self._watcher: threading.Thread | None = None
        self._events: Any = None

    # -- the Backend interface ------------------------------------------------

    def render(self, spec: SandboxSpec) -> dict[str, Any]:
        return build_container_spec(
            spec,
            user=self._settings.docker_runtime_user,
            network=self._settings.docker_network,
            log_budget=self._settings.log_budget,
        )

    def check(self) -> None:
        try:
            self._docker().ping()
        except BackendError as e:
            raise UnavailableError(e.message, hint=e.hint) from e
        except (DockerException, requests.RequestException) as e:
            raise unreachable(e) from e
        network = self._settings.docker_network
        if not network or network in ("host", "bridge", "none", "default"):
            return
        try:
            self._docker().networks.get(network)
        except NotFound as e:
            raise UnavailableError(
                f"Docker network {network!r} does not exist",
                hint=f"create it with `docker network create {network}` "
                "or unset SIMPLE_DOCKER_NETWORK",
            ) from e
        except (DockerException, requests.RequestException) as e:
            raise unreachable(e) from e

    def launch(self, spec: SandboxSpec) -> None:
        kwargs = self.render(spec)
        kwargs["environment"].update(
            resolve(spec.secrets, self._settings.template_secrets_dir))
        client = self._docker()
        self._start_watcher()  # listening before the container starts: no exit slips by
        try:
            try:
                container_id = _create(client, kwargs)
            except APIError as e:
                if e.status_code != 409:
                    raise
                self.remove(spec.sandbox_id)  # a leftover of an earlier attempt holds the name
                container_id = _create(client, kwargs)
        except (DockerException, requests.RequestException) as e:
            raise launch_error(spec, "create", e) from e
        try:
            client.api.start(container_id)
        except (DockerException, requests.RequestException) as e:
            self._remove_quietly(spec.sandbox_id)
            raise launch_error(spec, "start", e) from e
        logger.info(
            "launched sandbox %s (run %s, attempt %d) as container %s",
            spec.sandbox_id,
            spec.env.run_id,
            spec.env.attempt,
            container_id[:12],
        )

    def observe(self) -> list[Observed]:
        try:
            summaries = self._docker().api.containers(all=True, filters={"label": MANAGED_FILTER})
        except (DockerException, requests.RequestException) as e:
            raise engine_call_error("list containers", e) from e
        seen: list[Observed] = []
        for summary in summaries:
            observed = self._observe_one(summary)
            if observed is not None:
                owner = (summary.get("Labels") or {}).get(LABEL_CONTROLLER)
                seen.append(replace(observed, controller_id=owner))
        present = {s["Id"] for s in summaries}
        self._exited = {cid: o for cid, o in self._exited.items() if cid in present}
        self._start_watcher()
        return seen

    def stop(self, sandbox_id: str) -> None:
        try:
            self._docker().api.stop(sandbox_id, timeout=STOP_GRACE_S)
        except NotFound:
            return
        except (DockerException, requests.RequestException) as e:
            raise engine_call_error(f"stop sandbox {sandbox_id}", e) from e
        logger.info("stopped sandbox %s", sandbox_id)

    def read_logs(self, sandbox_id: str) -> bytes:
        return b"".join(self.open_logs(sandbox_id).chunks)

    def open_logs(self, sandbox_id: str) -> LogView:
        """The engine's log stream (bounded on disk by the container's log options), read a
        frame at a time through the log budget into a temporary directory: never the
        whole log in memory."""
        try:
            stream = self._docker().api.logs(
                sandbox_id, stdout=True, stderr=True, stream=True, follow=False
            )
            try:
                kept, dropped = logbudget.spool(stream, self._settings.log_budget)
            finally:
                close = getattr(stream, "close", None)
                if close is not None:
                    close()
        except NotFound as e:
            raise NotFoundError(
                f"no container for sandbox {sandbox_id}",
                hint="it was removed; read the archived logs instead",
            ) from e
        except (DockerException, requests.RequestException) as e:
            raise engine_call_error(f"read logs of sandbox {sandbox_id}", e) from e
        return LogView(kept, dropped)

    def follow_logs(
        self, sandbox_id: str, is_running: Callable[[], bool], poll_s: float = 0.5
    ) -> Iterator[bytes]:
        """Stream from the engine; when the stream ends or breaks, poll for the rest."""
        sent = 0
        try:
            stream = self._docker().api.logs(
                sandbox_id, stdout=True, stderr=True, stream=True, follow=True
            )
            try:
                for chunk in stream:
                    sent += len(chunk)
                    yield chunk
            finally:
                stream.close()
        except NotFound as e:
            raise NotFoundError(f"no container for sandbox {sandbox_id}") from e
        except (DockerException, requests.RequestException) as e:
            # The stream also ends quietly after CLIENT_TIMEOUT_S without output.
            logger.info("log stream of sandbox %s broke (%s); polling", sandbox_id, describe(e))
        skip = sent
        for chunk in super().follow_logs(sandbox_id, is_running, poll_s):
            if skip >= len(chunk):
                skip -= len(chunk)
                continue
            yield chunk[skip:]
            skip = 0

    def remove(self, sandbox_id: str) -> None:
        try:
            self._docker().api.remove_container(sandbox_id, force=True)
        except NotFound:
            return
        except APIError as e:
            if e.status_code == 409 and "already in progress" in describe(e):
                return
            raise engine_call_error(f"remove sandbox {sandbox_id}", e) from e
        except (DockerException, requests.RequestException) as e:
            raise engine_call_error(f"remove sandbox {sandbox_id}", e) from e
        logger.info("removed container of sandbox %s", sandbox_id)

    def close(self) -> None:
        self._closed.set()
        events = self._events
        if events is not None:
            events.close()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- helpers --------------------------------------------------------------

    def _docker(self) -> DockerClient:
        """The engine client, created on first use so `render` works without an engine.

        Creating it asks the engine for its API version, so it can fail (transient).
        """
        with self._lock:
            if self._client is None:
                try:
                    self._client = self._client_factory()
                except (DockerException, requests.RequestException) as e:
                    # Launch and observe callers retry this; `check` reports it as unavailable.
                    raise BackendError(
                        f"Docker engine unreachable: {describe(e)}",
                        hint=ENGINE_HINT,
                        transient=True,
                    ) from e
            return self._client

    def _observe_one(self, summary: dict[str, Any]) -> Observed | None:
        labels = summary.get("Labels") or {}
        state = summary.get("State", "")
        try:
            sandbox_id, run_id = labels[LABEL_SANDBOX_ID], labels[LABEL_RUN_ID]
            attempt = int(labels.get(LABEL_ATTEMPT, 1))
        except (KeyError, ValueError):
            logger.warning("container %s has incomplete SIMPLE labels; ignored", summary["Id"][:12])
            return None
        if state in _RUNNING_STATES:
            return Observed(sandbox_id, run_id, attempt, ObservedState.RUNNING)
        if state not in _EXITED_STATES:  # "created": not started yet
            return Observed(sandbox_id, run_id, attempt, ObservedState.PENDING)
        cached = self._exited.get(summary["Id"])
        if cached is not None:
            return cached
        try:
            return self._inspect_exit(summary["Id"], sandbox_id, run_id, attempt)
        except NotFound:
            return None  # removed between the list and now
        except (DockerException, requests.RequestException) as e:
            raise engine_call_error(f"inspect sandbox {sandbox_id}", e) from e

    def _inspect_exit(
        self, container_id: str, sandbox_id: str, run_id: str, attempt: int
    ) -> Observed:
        """How an exited container ended, from the engine's state; cached (it never changes)."""
        info = self._docker().api.inspect_container(container_id)
        observed = exit_from_inspect(info, sandbox_id, run_id, attempt)
        if observed.state == ObservedState.EXITED:
            self._exited[container_id] = observed
        return observed

    def _remove_quietly(self, sandbox_id: str) -> None:
        try:
            self.remove(sandbox_id)
        except BackendError as e:
            logger.warning("could not remove the failed container of %s: %s", sandbox_id, e)

    def _start_watcher(self) -> None:
        """Report each managed container's exit as the engine announces it (`die` events)."""
        with self._lock:
            wanted = self._watch_events or self._on_exit is not None
            if not wanted or self._watcher is not None or self._closed.is_set():
                return
            self._watcher = threading.Thread(
                target=self._watch_exits, name="docker-backend-events", daemon=True
            )
            self._watcher.start()

    def _watch_exits(self) -> None:
        labels = [MANAGED_FILTER]
        if self._settings.controller_id:  # only this controller's containers
            labels.append(f"{LABEL_CONTROLLER}={self._settings.controller_id}")
        filters = {"type": "container", "event": ["die"], "label": labels}
        while not self._closed.is_set():
            try:
                events = self._docker().events(decode=True, filters=filters)
                self._events = events
                if self._closed.is_set():  # `close` ran before the stream was published
                    events.close()
                    return
                self._notify()  # a pass catches what died before the stream was up
                for event in events:
                    self._report_exit(event)
            except Exception as e:  # the watcher must never die of an engine hiccup
                if not self._closed.is_set():
                    logger.warning("Docker event stream failed (%s); retrying", e)
            self._closed.wait(EVENTS_RETRY_S)

    def _report_exit(self, event: dict[str, Any]) -> None:
        """One `die` event: hand its exit on. A clean exit (code 0) is read from the event
        itself; any other is inspected once, for the OOM flag and the engine's error."""
        actor = event.get("Actor") or {}
        attributes = actor.get("Attributes") or {}
        try:
            sandbox_id, run_id = attributes[LABEL_SANDBOX_ID], attributes[LABEL_RUN_ID]
            attempt = int(attributes.get(LABEL_ATTEMPT, 1))
            if attributes.get("exitCode") == "0" and event.get("timeNano"):
                observed = Observed(
                    sandbox_id,
                    run_id,
                    attempt,
                    ObservedState.EXITED,
                    exit_code=0,
                    exited_at=int(event["timeNano"]) / 1e9,
                    controller_id=attributes.get(LABEL_CONTROLLER),
                )
                self._exited[actor["ID"]] = observed
            else:
                observed = self._inspect_exit(actor["ID"], sandbox_id, run_id, attempt)
        except (KeyError, ValueError, DockerException, requests.RequestException) as e:
            logger.info("could not read a container's exit (%s); the next pass will", e)
            self._notify()
            return
        if observed.state == ObservedState.EXITED:
            self._exit_seen(observed)


def _create(client: Any, kwargs: dict[str, Any]) -> str:
    """Create the container and return its id: two engine calls per launch (create, then
    start), where the SDK's `containers.create` adds a third, an inspect of the new one."""
    args = _create_container_args({**kwargs, "version": client.api._version})
    return str(client.api.create_container(**args)["Id"])
