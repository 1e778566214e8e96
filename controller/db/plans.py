"""Run rows with their plans, each plan read and parsed once per process.

A plan is written once, with its run, and never changes; a 1,000-sandbox run's is
~100 kB of JSON. The run page is polled every second or so by dashboards and CI, and the
reconciler reads the active runs every pass: decoding that plan each time was most of
the cost of both. So run rows are read without the plan column, and the plans of the
latest runs asked for are kept, parsed, per database engine (tests and benches run
several databases in one process), the least recently used dropped first.

Callers share the cached dict: they read it, never change it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from types import SimpleNamespace
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine, select
from sqlalchemy.sql.elements import ColumnElement

from controller.db.schema import runs

PLANS_KEPT = 64  # per engine: the latest runs asked for (a page of runs lists 25 or 50)

RUN_COLUMNS = tuple(c for c in runs.c if c.name != "plan")
"""Every column of `runs` but the plan: select these, then `with_plans`."""


class _Plans:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.kept: OrderedDict[str, Any] = OrderedDict()
        self.rendered: OrderedDict[str, bytes] = OrderedDict()


_by_engine: WeakKeyDictionary[Engine, _Plans] = WeakKeyDictionary()
_by_engine_lock = threading.Lock()


def _plans_of(engine: Engine) -> _Plans:
    with _by_engine_lock:
        found = _by_engine.get(engine)
        if found is None:
            found = _by_engine[engine] = _Plans()
        return found


def plans(conn: Connection, run_ids: Iterable[str]) -> dict[str, Any]:
    """The plans of these runs (those that exist), from the cache or read once."""
    wanted = list(dict.fromkeys(run_ids))
    cache = _plans_of(conn.engine)
    with cache.lock:
        found = {i: cache.kept[i] for i in wanted if i in cache.kept}
        for run_id in found:
            cache.kept.move_to_end(run_id)
    missing = [i for i in wanted if i not in found]
    if missing:
        query = select(runs.c.id, runs.c.plan).where(runs.c.id.in_(missing))
        read = {run_id: plan for run_id, plan in conn.execute(query)}
        found.update(read)
        with cache.lock:
            for run_id, plan in read.items():
                _keep(cache.kept, run_id, plan)
    return found


def rendered_plan(engine: Engine, run_id: str, plan: Any, render: Callable[[Any], bytes]) -> bytes:
    """`render(plan)` of this run's plan, computed once per process (the run page's JSON)."""
    cache = _plans_of(engine)
    with cache.lock:
        found = cache.rendered.get(run_id)
        if found is not None:
            cache.rendered.move_to_end(run_id)
            return found
    body = render(plan)
    with cache.lock:
        _keep(cache.rendered, run_id, body)
    return body


def _keep(kept: OrderedDict[str, Any], run_id: str, value: Any) -> None:
    """Keep `value` as the most recent; drop the least recently used past PLANS_KEPT."""
    kept[run_id] = value
    kept.move_to_end(run_id)
    while len(kept) > PLANS_KEPT:
        kept.popitem(last=False)


def select_runs(*where: ColumnElement[bool]) -> Any:
    """`select` of the runs matching `where`, every column but the plan."""
    return select(*RUN_COLUMNS).where(*where)


def with_plans(conn: Connection, rows: Sequence[Any]) -> list[SimpleNamespace]:
    """Rows selected with RUN_COLUMNS, each with its `plan` attribute back."""
    by_id = plans(conn, (r.id for r in rows))
    return [SimpleNamespace(**r._asdict(), plan=by_id[r.id]) for r in rows]


def run_with_plan(conn: Connection, run_id: str) -> SimpleNamespace | None:
    """One run row with its plan; None if there is no such run."""
    row = conn.execute(select_runs(runs.c.id == run_id)).first()
    return with_plans(conn, [row])[0] if row is not None else None
