"""SIMPLE end to end on the real Docker engine: the Done-when of the docker backend.

- `simplectl run quick --backend docker` succeeds 7/7 and leaves no container;
- memory, timeout and exit-code templates end `oom`, `timeout`, `failed` (42);
- `kill -9` of the controller mid-run, then a new one on the same database and
  URL: running sandboxes are adopted, an exit that happened meanwhile is recorded,
  a container removed meanwhile is `lost` and retried;
- a probe run as a template sees a locked-down container (read from its archived log).

Sandboxes reach the controller on 127.0.0.1 through host networking.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from controller.cli.embedded import EmbeddedServer
from controller.settings import Settings
from sandbox_image.contract import (
    LABEL_ATTEMPT,
    LABEL_MANAGED_BY,
    LABEL_MANAGED_BY_VALUE,
    LABEL_RUN_ID,
    LABEL_SANDBOX_ID,
    LABEL_TEMPLATE_ID,
)
from tests.docker_e2e.conftest import SIMPLECTL, RunContainers, ServeDocker, cli_env
from tests.docker_support import PROBE
from tests.e2e_helpers import report, start_run, wait_for, wait_run

pytestmark = pytest.mark.docker


def _catalog(write: Callable[[str], Path], templates: dict[str, dict[str, Any]]) -> Path:
    """A catalog directory with small, fast templates; fields override the defaults."""
    entries = [
        {
            "id": template_id,
            "category": "docker_e2e",
            "mechanisms": ["M1"],
            "estimate": {"cost_usd": [0.1, 0.5], "runtime_s": [1, 5]},
            "timeout_s": fields.get("timeout_s", 120),
            "resources": {"cpu": "1", "memory": fields.get("memory", "256Mi")},
            "config": {"agents": 2, "steps": 2, "llm_latency_ms": 5, **fields.get("config", {})},
            **({"command": fields["command"]} if "command" in fields else {}),
        }
        for template_id, fields in templates.items()
    ]
    return write(yaml.safe_dump({"templates": entries}, sort_keys=False))


def _embedded(settings: Settings, catalog: Path, **extra: Any) -> EmbeddedServer:
    return EmbeddedServer(settings.model_copy(update={"catalog_dirs": [catalog], **extra}))


def _by_template(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["template_id"]: s for s in run["sandboxes"]}


def _get(url: str) -> dict[str, Any]:
    response = httpx.get(url, timeout=30)
    response.raise_for_status()
    return dict(response.json())


def _docker_ps(run_id: str) -> list[str]:
    """What `docker ps -a --filter label=simple.dev/run-id=RUN` lists (names)."""
    result = subprocess.run(
        [
            "docker",
            "ps",
            "-a",
            "--filter",
            f"label={LABEL_RUN_ID}={run_id}",
            "--format",
            "{{.Names}}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return result.stdout.split()


def _created_containers(engine: Any, run_id: str, since: float) -> int:
    """How many containers the engine created for the run since `since` (its events)."""
    events = engine.events(
        since=int(since) - 1,
        until=int(time.time()) + 1,
        decode=True,
        filters={"type": "container", "event": "create", "label": f"{LABEL_RUN_ID}={run_id}"},
    )
    return sum(1 for _ in events)


def test_quick_suite_succeeds_and_leaves_no_container(
    docker_settings: Settings, run_containers: RunContainers
) -> None:
    env = cli_env(docker_settings, SIMPLE_DOCKER_NETWORK="host")
    result = subprocess.run(
        [*SIMPLECTL, "run", "quick", "--backend", "docker", "--wait", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    result_report = json.loads(result.stdout)
    run_id = run_containers.track(result_report["run_id"])
    totals = result_report["totals"]
    assert result_report["status"] == "succeeded"
    assert totals["sandboxes"] == 7 and totals["succeeded"] == 7
    assert [s["attempts"] for s in result_report["sandboxes"]] == [1] * 7
    for key in ("cost_usd", "tokens_used", "llm_calls", "entities_created", "timepoints_created"):
        assert totals[key] > 0, key
    assert _docker_ps(run_id) == [], "every container is removed once its logs are archived"
    sandbox_id = result_report["sandboxes"][0]["sandbox_id"]
    logs = subprocess.run(
        [*SIMPLECTL, "logs", sandbox_id], capture_output=True, text=True, timeout=60, env=env
    )
    assert logs.returncode == 0, logs.stderr
    assert "workload completed" in logs.stdout, "the archived log outlives the container"


def test_memory_timeout_and_exit_code_are_classified(
    docker_settings: Settings,
    run_containers: RunContainers,
    catalog_dir: Callable[[str], Path],
) -> None:
    catalog = _catalog(
        catalog_dir,
        {
            "hog": {"memory": "64Mi", "config": {"memory_mb": 200}},
            "slow": {"timeout_s": 2, "config": {"sleep_s": 60}},
            "exit42": {"config": {"exit_code": 42}},
        },
    )
    with _embedded(docker_settings, catalog, max_attempts=1) as server:
        run_id = run_containers.track(
            start_run(server.url, {"templates": ["hog", "slow", "exit42"], "priority": "speed"})
        )
        run = wait_run(server.url, run_id, 120)
    rows = _by_template(run)
    assert rows["hog"]["status"] == "oom", rows["hog"]
    assert "out of memory (limit 64Mi)" in rows["hog"]["error"]
    assert rows["slow"]["status"] == "timeout", rows["slow"]
    assert "timed out after 2 s" in rows["slow"]["error"]
    assert rows["exit42"]["status"] == "failed" and rows["exit42"]["exit_code"] == 42
    assert all(s["attempts"] == 1 for s in run["sandboxes"])
    assert run["status"] == "failed"
    assert run_containers.of_run(run_id) == []


def test_kill_9_controller_then_a_new_one_adopts_running_sandboxes(
    docker_engine: Any,
    run_containers: RunContainers,
    serve_docker: ServeDocker,
    catalog_dir: Callable[[str], Path],
) -> None:
    names = [f"steady{i}" for i in range(4)]
    catalog = _catalog(catalog_dir, {name: {"config": {"sleep_s": 4}} for name in names})
    server = serve_docker(SIMPLE_CATALOG_DIRS=str(catalog)).start()
    began = time.time()
    run_id = run_containers.track(
        start_run(server.url, {"templates": names, "priority": "speed", "max_parallel": 4})
    )
    wait_for(
        lambda: len(run_containers.of_run(run_id, running_only=True)) == 4,
        timeout_s=60,
        what="four running containers",
    )
    server.kill_9()
    assert len(run_containers.of_run(run_id, running_only=True)) == 4, (
        "the sandboxes outlive their controller"
    )
    server.start()  # a new controller: same port, URL and database
    # They cannot finish without a controller (the final snapshot upload needs one).
    assert len(run_containers.of_run(run_id, running_only=True)) == 4
    run = wait_run(server.url, run_id, 120)
    result = report(server.url, run_id)
    assert run["status"] == "succeeded", server.output()
    assert sorted(s["template_id"] for s in run["sandboxes"] if s["status"] == "succeeded") == names
    assert [s["attempts"] for s in run["sandboxes"]] == [1] * 4, "adopted, not relaunched"
    assert _created_containers(docker_engine, run_id, began) == 4, "no container was relaunched"
    assert result["totals"]["succeeded"] == 4 and result["totals"]["cost_usd"] > 0
    assert _docker_ps(run_id) == []


def test_exit_and_removal_while_the_controller_is_down(
    docker_engine: Any,
    run_containers: RunContainers,
    serve_docker: ServeDocker,
    catalog_dir: Callable[[str], Path],
) -> None:
    catalog = _catalog(
        catalog_dir,
        {
            # Exits on its own a few seconds in, without calling the controller.
            "ends_alone": {"command": ["python", "-c", "import time; time.sleep(3)"]},
            "removed": {"config": {"sleep_s": 3}},
        },
    )
    server = serve_docker(SIMPLE_CATALOG_DIRS=str(catalog), SIMPLE_MAX_ATTEMPTS="3").start()
    run_id = run_containers.track(
        start_run(server.url, {"templates": ["ends_alone", "removed"], "priority": "speed"})
    )
    wait_for(
        lambda: len(run_containers.of_run(run_id, running_only=True)) == 2,
        timeout_s=60,
        what="two running containers",
    )
    ids = {
        s["template_id"]: s["sandbox_id"]
        for s in _get(f"{server.url}/v1/runs/{run_id}")["sandboxes"]
    }
    server.kill_9()
    wait_for(
        lambda: docker_engine.containers.get(ids["ends_alone"]).status == "exited",
        timeout_s=30,
        what="the container to exit while its controller is down",
    )
    subprocess.run(
        ["docker", "rm", "-f", ids["removed"]], check=True, capture_output=True, timeout=30
    )
    restarted = datetime.now(UTC)
    server.start()
    run = wait_run(server.url, run_id, 120)
    assert run["status"] == "succeeded", server.output()
    ended = _get(f"{server.url}/v1/sandboxes/{ids['ends_alone']}")
    assert ended["attempts"] == 1 and ended["exit_code"] == 0
    (attempt,) = ended["attempt_history"]
    assert attempt["status"] == "succeeded"
    exited = datetime.fromisoformat(attempt["exited_at"]).replace(tzinfo=UTC)
    assert exited < restarted, "the engine's exit time, recorded by the new controller"
    removed = _get(f"{server.url}/v1/sandboxes/{ids['removed']}")
    assert [a["status"] for a in removed["attempt_history"]] == ["lost", "succeeded"]
    assert removed["status"] == "succeeded" and removed["attempts"] == 2
    assert _docker_ps(run_id) == []


def test_probe_inside_a_sandbox_sees_a_locked_down_container(
    docker_settings: Settings,
    run_containers: RunContainers,
    catalog_dir: Callable[[str], Path],
) -> None:
    catalog = _catalog(catalog_dir, {"probe": {"command": ["python", "-c", PROBE]}})
    with _embedded(docker_settings, catalog) as server:
        run_id = run_containers.track(start_run(server.url, {"templates": ["probe"]}))
        run = wait_run(server.url, run_id, 60)
        (sandbox,) = run["sandboxes"]
        assert sandbox["status"] == "succeeded", sandbox
        assert run_containers.of_run(run_id) == [], "the log is read from the archive"
        response = httpx.get(f"{server.url}/v1/sandboxes/{sandbox['sandbox_id']}/logs", timeout=30)
    assert response.status_code == 200, response.text
    probe = json.loads(response.text.strip().splitlines()[-1])
    assert probe["sandbox_id"] == sandbox["sandbox_id"]
    assert probe["uid"] != 0 and probe["gid"] != 0
    assert probe["root_writable"] is False and probe["work_writable"] is True
    assert int(probe["cap_eff"], 16) == 0
    assert probe["no_new_privs"] == "1"


def test_a_controller_leaves_another_controllers_sandboxes_alone(
    docker_engine: Any,
    docker_settings: Settings,
    run_containers: RunContainers,
    catalog_dir: Callable[[str], Path],
) -> None:
    foreign_run = run_containers.track(f"run-foreign{uuid.uuid4().hex[:8]}")
    sandbox_id = f"{foreign_run[4:]}-other"
    docker_engine.containers.run(
        "simple-sandbox:latest",
        ["python", "-c", "import time; time.sleep(60)"],
        name=sandbox_id,
        detach=True,
        labels={
            LABEL_MANAGED_BY: LABEL_MANAGED_BY_VALUE,
            LABEL_RUN_ID: foreign_run,
            LABEL_SANDBOX_ID: sandbox_id,
            LABEL_TEMPLATE_ID: "other",
            LABEL_ATTEMPT: "1",
        },
    )
    catalog = _catalog(catalog_dir, {"idle": {}})
    with _embedded(docker_settings, catalog) as server:
        passes = server.controller.reconciler.passes
        wait_for(
            lambda: server.controller.reconciler.passes >= passes + 3,
            timeout_s=30,
            what="three reconcile passes",
        )
    assert [c.name for c in run_containers.of_run(foreign_run)] == [sandbox_id]


def test_a_missing_image_fails_at_once_naming_the_image(
    docker_settings: Settings,
    run_containers: RunContainers,
    catalog_dir: Callable[[str], Path],
) -> None:
    catalog = catalog_dir(
        yaml.safe_dump(
            {
                "templates": [
                    {
                        "id": "ghost",
                        "category": "docker_e2e",
                        "estimate": {"cost_usd": [0.1, 0.5], "runtime_s": [1, 5]},
                        "image": "simple-no-such-image:latest",
                    }
                ]
            }
        )
    )
    # A short lost grace only keeps today's failure (lost after 3 attempts) quick.
    with _embedded(docker_settings, catalog, lost_grace_s=0.5) as server:
        run_id = run_containers.track(start_run(server.url, {"templates": ["ghost"]}))
        run = wait_run(server.url, run_id, 60)
    (ghost,) = run["sandboxes"]
    assert ghost["status"] == "failed" and ghost["attempts"] == 1, "not transient: no retry"
    assert "simple-no-such-image:latest" in ghost["error"] and "not found" in ghost["error"]
    assert run_containers.of_run(run_id) == []
