"""Cost alerts: a sandbox whose live cost passes SIMPLE_COST_ALERT_RATIO x its estimate.

Checked by the reconciler on every pass, so an alert is raised within one pass
of the crossing. Each sandbox alerts once. The alert is kept on the run
(`alerts`, in the run, the report and the stream's `run` messages) and put on
the run's stream as an `alert` event of that sandbox. A run created with
`confirm_over` then stops launching (`hold_reason`) until
`POST /v1/runs/{id}/confirm`; what runs keeps running.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import IntegrityError

from controller.db.schema import events, runs, sandboxes
from controller.errors import ConflictError, NotFoundError

logger = logging.getLogger(__name__)

ALERT_EVENT = "alert"


def over_estimate(row: Any, ratio: float) -> dict[str, Any] | None:
    """The alert a sandbox row deserves now, or None. Pure."""
    if row.cost_alerted:
        return None
    estimate = (row.spec or {}).get("estimate_max_usd")
    if estimate is None:
        return None
    cost = float(row.cost_usd or 0.0) + float(row.prior_cost_usd or 0.0)
    threshold = ratio * float(estimate)
    if cost <= threshold:
        return None
    return {
        "kind": "cost_over_estimate",
        "sandbox_id": row.id,
        "template_id": row.template_id,
        "cost_usd": round(cost, 6),
        "estimate_usd": float(estimate),
        "ratio": ratio,
        "message": (
            f"{row.template_id} has cost ${cost:.4f}, over {ratio:g} x its estimate "
            f"${float(estimate):.4f}"
        ),
    }


def raise_cost_alerts(
    engine: Engine, run: Any, rows: Sequence[Any], ratio: float, now: datetime
) -> bool:
    """Raise the alerts this pass finds; True while the run holds its launches."""
    found = [a for a in (over_estimate(r, ratio) for r in rows) if a is not None]
    if not found:
        return run.hold_reason is not None
    alerts = list(run.alerts or [])
    hold = run.hold_reason
    for alert in found:
        alert["at"] = now.isoformat()
        alerts.append(alert)
        logger.warning("run %s: cost alert: %s", run.id, alert["message"])
        if run.confirm_over:
            hold = f"waiting for confirmation: {alert['message']}"
    with engine.begin() as conn:
        conn.execute(
            update(sandboxes)
            .where(sandboxes.c.id.in_([a["sandbox_id"] for a in found]))
            .values(cost_alerted=True)
        )
        conn.execute(
            update(runs).where(runs.c.id == run.id).values(alerts=alerts, hold_reason=hold)
        )
    for alert in found:
        _stream_alert(
            engine, run.id, next(r for r in rows if r.id == alert["sandbox_id"]), alert, now
        )
    return hold is not None


def _stream_alert(
    engine: Engine, run_id: str, row: Any, alert: dict[str, Any], now: datetime
) -> None:
    """Put the alert on the run's stream, as an event of the sandbox that crossed."""
    event_id = f"simple:cost-alert:{row.attempt}"
    body = json.dumps({"type": ALERT_EVENT, "data": alert}, sort_keys=True)
    try:
        with engine.begin() as conn:
            conn.execute(
                insert(events).values(
                    sandbox_id=row.id,
                    run_id=run_id,
                    event_id=event_id,
                    attempt=row.attempt,
                    seq=0,  # not one of the sandbox's own events
                    type=ALERT_EVENT,
                    time=now,
                    data=alert,
                    body_hash=hashlib.sha256(body.encode()).hexdigest(),
                    received_at=now,
                )
            )
    except IntegrityError:  # the sandbox used this event id itself; the run keeps the alert
        logger.warning("cost alert of %s not streamed: event id %s is taken", row.id, event_id)


def confirm_run(engine: Engine, run_id: str) -> dict[str, Any]:
    """Let a held run launch again; says what was confirmed."""
    with engine.begin() as conn:
        run = conn.execute(select(runs.c.hold_reason).where(runs.c.id == run_id)).first()
        if run is None:
            raise NotFoundError(f"unknown run {run_id}", hint="list runs with `simplectl status`")
        if run.hold_reason is None:
            raise ConflictError(
                f"run {run_id} is not waiting for a confirmation",
                hint="a run holds only when created with confirm_over and a cost alert fired",
            )
        conn.execute(update(runs).where(runs.c.id == run_id).values(hold_reason=None))
    logger.info("run %s: launching confirmed (%s)", run_id, run.hold_reason)
    return {"run_id": run_id, "confirmed": run.hold_reason}
