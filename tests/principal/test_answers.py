"""Questions answered from the database: every kind, each answer citing the runs it read,
and a question never starting or proposing a run (through the chat's own door)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import Engine, select, update

from controller.catalog.templates import Catalog
from controller.db.schema import runs, sandboxes
from controller.planning.plan import PlanRequest
from controller.principal.conversation import Principal
from controller.principal.questions import answer, recognise
from controller.runs import create_run, get_run

QUICK3 = ("board_meeting", "kami_shrine", "jefferson_dinner")


def _run(engine: Engine, catalog: Catalog, templates: tuple[str, ...], ago_s: float,
         outcome: dict[str, tuple[str, float, int, str | None]]) -> str:
    """A run created `ago_s` seconds ago; `outcome`: template -> (status, cost, tokens, error)."""
    run_id, _ = create_run(engine, catalog, PlanRequest(templates=templates), {"t": ago_s},
                           backend="process", default_image="x")
    created = datetime.now(UTC) - timedelta(seconds=ago_s)
    with engine.begin() as conn:
        conn.execute(update(runs).where(runs.c.id == run_id).values(
            created_at=created, started_at=created, status="succeeded",
            finished_at=created + timedelta(seconds=120)))
        for s in get_run(engine, run_id)["sandboxes"]:
            status, cost, tokens, error = outcome.get(s["template_id"], ("pending", 0, 0, None))
            conn.execute(update(sandboxes).where(sandboxes.c.id == s["sandbox_id"]).values(
                status=status, cost_usd=cost, tokens=tokens, error=error,
                exit_code=1 if error else (0 if status == "succeeded" else None)))
    return run_id


@pytest.fixture
def history(engine: Engine, builtin: Catalog) -> dict[str, str]:
    """Three runs of the same three quick templates, and one of two corporate ones."""
    ok = ("succeeded", 0.5, 1000, None)
    return {
        "first": _run(engine, builtin, QUICK3, 3 * 86400, {
            "board_meeting": ok, "kami_shrine": ("failed", 0.2, 300, "boom: agent crashed"),
            "jefferson_dinner": ok}),
        "second": _run(engine, builtin, QUICK3, 2 * 86400, {
            "board_meeting": ("succeeded", 0.6, 1200, None), "jefferson_dinner": ok,
            "kami_shrine": ("failed", 0.3, 400, "boom again")}),
        "corporate": _run(engine, builtin, ("ipo_reverse", "ai_pricing_war"), 86400, {
            "ipo_reverse": ("succeeded", 1.9, 5000, None), "ai_pricing_war": ok}),
        "last": _run(engine, builtin, QUICK3, 60, {
            "board_meeting": ("timeout", 0.7, 900, "timed out after 129 s"),
            "kami_shrine": ("succeeded", 0.4, 800, None), "jefferson_dinner": ok}),
    }


def ask(engine: Engine, catalog: Catalog, text: str, followed: str | None = None) -> Any:
    question = recognise(catalog, text)
    assert question is not None, text
    return answer(engine, catalog, question, followed)


def test_the_last_run_and_the_previous_run_cost(engine: Engine, builtin: Catalog,
                                                history: dict[str, str]) -> None:
    last = ask(engine, builtin, "what did the last run cost?")
    assert last.data["runs"] == [history["last"]] and last.data["cost_usd"] == 1.6
    assert history["last"] in last.text and "$1.60" in last.text
    before = ask(engine, builtin, "how much did the run before last cost?")
    assert before.data["runs"] == [history["corporate"]] and before.data["cost_usd"] == 2.4


def test_a_template_over_time(engine: Engine, builtin: Catalog, history: dict[str, str]) -> None:
    reply = ask(engine, builtin, "how much has board_meeting cost across its runs?")
    assert reply.data["sandboxes"] == 3 and reply.data["total_usd"] == pytest.approx(1.8)
    assert reply.data["runs"] == [history["last"], history["second"], history["first"]]
    assert "estimate is $0.29-0.71" in reply.text and history["first"] in reply.text
    tokens = ask(engine, builtin, "how many tokens did kami_shrine burn through?")
    assert tokens.data["tokens"] == 1500 and history["second"] in tokens.text


def test_the_most_expensive_and_the_least_reliable(engine: Engine, builtin: Catalog,
                                                   history: dict[str, str]) -> None:
    expensive = ask(engine, builtin, "which templates are the most expensive?")
    assert [t["template_id"] for t in expensive.data["templates"]][:2] == [
        "ipo_reverse", "board_meeting"]
    assert history["corporate"] in expensive.text
    in_last = ask(engine, builtin, "which ones were the most expensive in the last run?")
    assert in_last.data["templates"][0]["template_id"] == "board_meeting"
    assert in_last.data["runs"] == [history["last"]]
    flaky = ask(engine, builtin, "which templates keep failing?")
    worst = flaky.data["templates"][0]
    assert worst["template_id"] == "kami_shrine" and worst["value"] == pytest.approx(2 / 3)
    assert "2 of 3 failed" in flaky.text and "boom again" in flaky.text
    assert history["first"] in flaky.text and history["second"] in flaky.text


def test_failures_of_a_run_and_of_a_template(engine: Engine, builtin: Catalog,
                                             history: dict[str, str]) -> None:
    last = ask(engine, builtin, "what failed in the last run?")
    assert [s["template_id"] for s in last.data["failed"]] == ["board_meeting"]
    assert "timed out after 129 s" in last.text and last.data["runs"] == [history["last"]]
    kami = ask(engine, builtin, "why is kami_shrine failing")
    assert len(kami.data["failed"]) == 2 and "boom: agent crashed" in kami.text
    assert kami.data["runs"] == [history["second"], history["first"]]


def test_a_run_against_the_previous_run_of_the_same_request(
        engine: Engine, builtin: Catalog, history: dict[str, str]) -> None:
    reply = ask(engine, builtin, "how does this run compare to the previous one?")
    # The corporate run came in between: the previous run of the same request is "second".
    assert reply.data["runs"] == [history["last"], history["second"]]
    assert reply.data["changes"] == {"newly failing": ["board_meeting"], "fixed": ["kami_shrine"]}
    assert "cost $1.60 against $1.40 (+$0.20)" in reply.text


def test_what_waits_and_why(engine: Engine, builtin: Catalog) -> None:
    run_id, _ = create_run(engine, builtin, PlanRequest(templates=QUICK3, max_parallel=1),
                           {"w": 1}, backend="process", default_image="x")
    ids = [s["sandbox_id"] for s in get_run(engine, run_id)["sandboxes"]]
    with engine.begin() as conn:
        conn.execute(update(runs).where(runs.c.id == run_id).values(status="running"))
        conn.execute(update(sandboxes).where(sandboxes.c.id == ids[0]).values(status="running"))
    reply = ask(engine, builtin, "what is waiting and why?")
    assert len(reply.data["waiting"]) == 2 and reply.data["runs"] == [run_id]
    assert "all 1 slots of the run are taken (1 running)" in reply.text
    retry = datetime.now(UTC) + timedelta(minutes=5)
    with engine.begin() as conn:
        conn.execute(update(sandboxes).where(sandboxes.c.id == ids[1]).values(
            next_attempt_at=retry, attempt=1))
    one = ask(engine, builtin, f"why is {get_run(engine, run_id)['sandboxes'][1]['template_id']}"
                               " still waiting?")
    assert [w["sandbox_id"] for w in one.data["waiting"]] == [ids[1]]
    assert "a retry after a transient failure" in one.text


def test_a_question_never_starts_or_proposes_a_run(engine: Engine, builtin: Catalog,
                                                   history: dict[str, str]) -> None:
    controller = SimpleNamespace(
        engine=engine, catalog=builtin, kick=lambda: None,
        settings=SimpleNamespace(chat_max_conversations=5, chat_idle_s=60,
                                 confirm_above_usd=25.0),
        backend=SimpleNamespace(name="process"))
    principal = Principal(controller)  # type: ignore[arg-type]
    with engine.connect() as conn:
        before = conn.execute(select(runs.c.id)).all()
    for text in ("what did the last run cost?", "which templates are the most expensive?",
                 "did board_meeting run ok?", "how many tokens did the last run use?",
                 "compare with last time", "what's in the queue?"):
        reply = principal.turn(None, text)
        assert reply["kind"] == "answer", (text, reply["text"])
        assert reply["plan"] is None and reply["run"] is None and not reply["choices"]
        assert not reply["needs_confirmation"]
        if "queue" not in text:  # no run is active here, so nothing waits and none is read
            assert reply["answer"]["runs"], text  # it cites the runs it read
    with engine.connect() as conn:
        assert conn.execute(select(runs.c.id)).all() == before
