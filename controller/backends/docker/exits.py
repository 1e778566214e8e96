"""How a container ended, read from the engine's own record of it (`State.ExitCode`,
`State.OOMKilled`, `State.FinishedAt`), never guessed from exit code 137."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from controller.backends.base import Observed, ObservedState
from sandbox_image.contract import LABEL_CONTROLLER

logger = logging.getLogger(__name__)


def epoch_seconds(timestamp: str | None) -> float | None:
    """The engine's RFC 3339 time ("2026-11-21T05:42:23.123456789Z") in epoch seconds."""
    if not timestamp or timestamp.startswith("0001-"):  # the zero time: never happened
        return None
    try:
        moment = datetime.fromisoformat(timestamp)  # 3.11+: "Z" and nanoseconds are fine
    except ValueError:
        logger.warning("unreadable time from the Docker engine: %r", timestamp)
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def exit_from_inspect(info: dict[str, Any], sandbox_id: str, run_id: str, attempt: int
                      ) -> Observed:
    """The container's end from an inspect of it (running, if it runs again)."""
    state = info["State"]
    if state.get("Running"):
        return Observed(sandbox_id, run_id, attempt, ObservedState.RUNNING)
    labels = (info.get("Config") or {}).get("Labels") or {}
    return Observed(
        sandbox_id,
        run_id,
        attempt,
        ObservedState.EXITED,
        exit_code=int(state.get("ExitCode", -1)),
        oom_killed=bool(state.get("OOMKilled")),
        reason=state.get("Error") or None,
        exited_at=epoch_seconds(state.get("FinishedAt")),
        controller_id=labels.get(LABEL_CONTROLLER),
    )
