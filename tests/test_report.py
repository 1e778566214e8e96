"""The run report: totals and coverage, the SQL behind it, and its JUnit and Markdown forms.

`build_report` is checked on hand-made rows; `fetch_report` on a real migrated
database holding a run created by `create_run` and two snapshots loaded by the aggregator.
"""

from __future__ import annotations

import json
import re
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
from sqlalchemy import Engine, update

from controller.catalog.templates import Catalog, load_catalog
from controller.db.schema import sandboxes
from controller.errors import NotFoundError
from controller.intake.aggregator import load_snapshot, read_snapshot
from controller.planning.model import PlanRequest
from controller.results.report import MECHANISMS_TOTAL, build_report, fetch_report, report_json
from controller.results.report_formats import report_junit, report_markdown
from controller.runs import create_run, sandbox_id_for
from controller.settings import REPO_CATALOG_DIR
from sandbox_image.contract import SNAPSHOT_SCHEMA_SQL, SNAPSHOT_TABLES

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def sandbox_row(sandbox_id: str, template_id: str, status: str, *, attempt: int = 1,
                exit_code: int | None = 0, error: str | None = None,
                seconds: float | None = 10.0) -> dict[str, Any]:
    return {"id": sandbox_id, "template_id": template_id, "status": status, "attempt": attempt,
            "exit_code": exit_code, "error": error,
            "launched_at": T0 if seconds is not None else None,
            "finished_at": T0 + timedelta(seconds=seconds) if seconds is not None else None}


def run_row(status: str = "failed") -> dict[str, Any]:
    return {"id": "run-abc", "status": status, "created_at": T0,
            "finished_at": T0 + timedelta(minutes=2), "plan": {"selected": []}}


def sample_report() -> dict[str, Any]:
    rows = [
        sandbox_row("abc-one", "board_meeting", "succeeded", seconds=12.5),
        sandbox_row("abc-two", "kami_shrine", "failed", attempt=3, exit_code=3,
                    error='step 2 failed: <boom> & "quotes" | pipe\nsecond line', seconds=4.25),
        sandbox_row("abc-three", "ipo_reverse", "skipped", attempt=0, exit_code=None,
                    error="over budget", seconds=None),
        sandbox_row("abc-four", "vc_pitch_pearl", "timeout", exit_code=None, error="timed out"),
        sandbox_row("abc-five", "hospital_crisis", "cancelled", exit_code=None, error=None),
    ]
    by_sandbox = {"abc-one": (2.5, 1000, 10), "abc-two": (1.25, 500, 4)}
    by_mechanism = [("M10", 1, 2.5, 2.5), ("M2", 2, 3.75, 1.875), ("M1", 1, 1.25, 1.25)]
    return build_report(run_row(), rows, (3.75, 1500, 14, 9, 11), by_sandbox,
                        [("board_meeting", 1, 2.5, 1000, 10, 5, 6)], by_mechanism)


# --- build_report ----------------------------------------------------------------------


def test_build_report_totals_and_rows() -> None:
    report = sample_report()
    assert report["run_id"] == "run-abc"
    assert report["status"] == "failed"
    assert report["created_at"] == T0.isoformat()
    totals = report["totals"]
    assert totals["sandboxes"] == 5
    assert totals["succeeded"] == 1
    assert totals["failed"] == 2  # failed and timeout
    assert totals["cancelled"] == 1
    assert totals["skipped"] == 1
    assert (totals["cost_usd"], totals["tokens_used"], totals["llm_calls"]) == (3.75, 1500, 14)
    assert (totals["entities_created"], totals["timepoints_created"]) == (9, 11)

    rows = {s["sandbox_id"]: s for s in report["sandboxes"]}
    assert [s["sandbox_id"] for s in report["sandboxes"]] == [
        "abc-one", "abc-two", "abc-three", "abc-four", "abc-five"]
    assert rows["abc-one"]["duration_s"] == 12.5
    assert rows["abc-one"]["cost_usd"] == 2.5
    assert rows["abc-one"]["tokens_used"] == 1000
    assert rows["abc-two"]["attempts"] == 3
    assert rows["abc-two"]["exit_code"] == 3
    assert rows["abc-three"]["duration_s"] is None
    assert rows["abc-three"]["cost_usd"] is None  # no snapshot, no cost
    assert rows["abc-three"]["error"] == "over budget"
    json.loads(report_json(report))


def test_build_report_mechanism_coverage() -> None:
    totals = sample_report()["totals"]
    assert totals["mechanisms_covered"] == ["M1", "M2", "M10"]  # numeric order
    assert MECHANISMS_TOTAL == 17
    assert totals["mechanism_coverage_pct"] == pytest.approx(100 * 3 / 17, abs=0.05)


def test_build_report_all_mechanisms_is_100_percent() -> None:
    every = [(f"M{n}", 1, 1.0, 1.0) for n in range(1, 18)]
    report = build_report(run_row("succeeded"), [], (0, 0, 0, 0, 0), {}, [], every)
    assert report["totals"]["mechanism_coverage_pct"] == 100.0
    assert report["totals"]["sandboxes"] == 0


def test_build_report_without_results() -> None:
    rows = [sandbox_row("abc-one", "board_meeting", "failed", exit_code=1,
                        error="no snapshot was uploaded")]
    report = build_report(run_row(), rows, (0, 0, 0, 0, 0), {}, [], [])
    assert report["totals"]["cost_usd"] == 0
    assert report["totals"]["mechanisms_covered"] == []
    assert report["totals"]["mechanism_coverage_pct"] == 0
    assert report["sandboxes"][0]["cost_usd"] is None


# --- fetch_report on a real database ---------------------------------------------------


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog([REPO_CATALOG_DIR])


def snapshot_bytes(path: Path, runs: list[dict[str, Any]],
                   steps: tuple[tuple[Any, ...], ...] = ()) -> bytes:
    conn = sqlite3.connect(path)
    conn.executescript(SNAPSHOT_SCHEMA_SQL)
    columns = SNAPSHOT_TABLES["runs"]
    conn.executemany(f"INSERT INTO runs VALUES ({', '.join('?' * len(columns))})",
                     [tuple(r.get(c) for c in columns) for r in runs])
    conn.executemany("INSERT INTO steps VALUES (?,?,?,?,?,?,?)", list(steps))
    conn.commit()
    conn.close()
    return path.read_bytes()


def result(run_id: str, template_id: str, cost: float, tokens: int, calls: int, entities: int,
           timepoints: int, mechanisms: list[str]) -> dict[str, Any]:
    return {"run_id": run_id, "template_id": template_id, "status": "completed",
            "cost_usd": cost, "tokens_used": tokens, "llm_calls": calls,
            "entities_created": entities, "timepoints_created": timepoints,
            "mechanisms_used": json.dumps(mechanisms)}


@pytest.fixture
def loaded_run(engine: Engine, catalog: Catalog, tmp_path: Path) -> dict[str, Any]:
    """A three-sandbox run: two with loaded snapshots, one failed without one."""
    body = {"templates": ["board_meeting", "kami_shrine", "ipo_reverse"]}
    run_id, created = create_run(engine, catalog, PlanRequest(templates=tuple(body["templates"])),
                                 body, backend="process", default_image="simple-sandbox:test")
    assert created
    with engine.connect() as conn:
        ids = {r.template_id: r.id for r in conn.execute(
            sandboxes.select().where(sandboxes.c.run_id == run_id))}
    snapshots = {
        "board_meeting": [result("a1", "board_meeting", 2.5, 1000, 10, 6, 7, ["M1", "M3", "M11"]),
                          result("a2", "board_meeting", 0.75, 200, 3, 1, 1, ["M1"])],
        "kami_shrine": [result("b1", "kami_shrine", 1.25, 400, 5, 2, 3, ["M16", "M3"])],
    }
    for template_id, rows in snapshots.items():
        data = snapshot_bytes(tmp_path / f"{template_id}.sqlite", rows,
                              ((rows[0]["run_id"], 1, 50, 2, 0, rows[0]["cost_usd"], 10),))
        with engine.begin() as conn:
            load_snapshot(conn, run_id, ids[template_id], read_snapshot(data, 10**7))
    with engine.begin() as conn:
        for template_id, seconds in (("board_meeting", 30), ("kami_shrine", 12)):
            conn.execute(update(sandboxes).where(sandboxes.c.id == ids[template_id]).values(
                status="succeeded", attempt=1, exit_code=0, launched_at=T0,
                finished_at=T0 + timedelta(seconds=seconds)))
        conn.execute(update(sandboxes).where(sandboxes.c.id == ids["ipo_reverse"]).values(
            status="failed", attempt=2, exit_code=1, launched_at=T0,
            finished_at=T0 + timedelta(seconds=5), error="no snapshot was uploaded"))
    return {"run_id": run_id, "ids": ids, "snapshots": snapshots}


def test_fetch_report_sums_the_loaded_snapshots(engine: Engine, loaded_run) -> None:
    report = fetch_report(engine, loaded_run["run_id"])
    rows = [r for rs in loaded_run["snapshots"].values() for r in rs]
    totals = report["totals"]
    assert totals["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in rows))
    assert totals["tokens_used"] == sum(r["tokens_used"] for r in rows)
    assert totals["llm_calls"] == sum(r["llm_calls"] for r in rows)
    assert totals["entities_created"] == sum(r["entities_created"] for r in rows)
    assert totals["timepoints_created"] == sum(r["timepoints_created"] for r in rows)
    assert (totals["sandboxes"], totals["succeeded"], totals["failed"]) == (3, 2, 1)
    covered = {m for r in rows for m in json.loads(r["mechanisms_used"])}
    assert totals["mechanisms_covered"] == sorted(covered, key=lambda m: int(m[1:]))
    assert totals["mechanism_coverage_pct"] == round(100 * len(covered) / 17, 1)


def test_fetch_report_rows_per_sandbox(engine: Engine, loaded_run) -> None:
    report = fetch_report(engine, loaded_run["run_id"])
    assert [s["template_id"] for s in report["sandboxes"]] == list(
        report["plan"]["selected"])
    by_template = {s["template_id"]: s for s in report["sandboxes"]}
    board = loaded_run["snapshots"]["board_meeting"]
    assert by_template["board_meeting"]["cost_usd"] == pytest.approx(
        sum(r["cost_usd"] for r in board))
    assert by_template["board_meeting"]["tokens_used"] == sum(r["tokens_used"] for r in board)
    assert by_template["board_meeting"]["duration_s"] == 30
    assert by_template["board_meeting"]["sandbox_id"] == loaded_run["ids"]["board_meeting"]
    failed = by_template["ipo_reverse"]
    assert (failed["status"], failed["attempts"], failed["exit_code"]) == ("failed", 2, 1)
    assert failed["cost_usd"] is None
    assert failed["error"] == "no snapshot was uploaded"
    templates = {t["template_id"]: t for t in report["by_template"]}
    assert set(templates) == {"board_meeting", "kami_shrine"}
    assert templates["board_meeting"]["runs"] == 2
    assert templates["kami_shrine"]["cost_usd"] == 1.25


def test_fetch_report_by_mechanism(engine: Engine, loaded_run) -> None:
    report = fetch_report(engine, loaded_run["run_id"])
    rows = [r for rs in loaded_run["snapshots"].values() for r in rs]
    expected: dict[str, dict[str, Any]] = {}
    for row in rows:
        for mechanism in set(json.loads(row["mechanisms_used"])):
            entry = expected.setdefault(mechanism, {"templates": set(), "costs": []})
            entry["templates"].add(row["template_id"])
            entry["costs"].append(row["cost_usd"])
    got = {m["mechanism"]: m for m in report["by_mechanism"]}
    assert set(got) == set(expected)
    for mechanism, entry in expected.items():
        assert got[mechanism]["templates_using"] == len(entry["templates"])
        assert got[mechanism]["total_cost_usd"] == pytest.approx(sum(entry["costs"]))
        assert got[mechanism]["avg_cost_usd"] == pytest.approx(
            sum(entry["costs"]) / len(entry["costs"]))
    totals = [m["total_cost_usd"] for m in report["by_mechanism"]]
    assert totals == sorted(totals, reverse=True)


def test_fetch_report_ignores_other_runs(engine: Engine, catalog: Catalog, loaded_run,
                                         tmp_path: Path) -> None:
    body = {"templates": ["board_meeting"]}
    other, _ = create_run(engine, catalog, PlanRequest(templates=("board_meeting",)), body,
                          backend="process", default_image="simple-sandbox:test")
    data = snapshot_bytes(tmp_path / "other.sqlite",
                          [result("z1", "board_meeting", 100.0, 9, 9, 9, 9, ["M17"])])
    with engine.begin() as conn:
        load_snapshot(conn, other, sandbox_id_for(other, "board_meeting", 0),
                      read_snapshot(data, 10**7))
    report = fetch_report(engine, loaded_run["run_id"])
    own = [r["cost_usd"] for rs in loaded_run["snapshots"].values() for r in rs]
    assert report["totals"]["cost_usd"] == pytest.approx(sum(own))
    assert "M17" not in report["totals"]["mechanisms_covered"]
    assert fetch_report(engine, other)["totals"]["cost_usd"] == 100.0


def test_fetch_report_of_a_run_without_results(engine: Engine, catalog: Catalog) -> None:
    run_id, _ = create_run(engine, catalog, PlanRequest(suites=("quick",)), {"suites": ["quick"]},
                           backend="process", default_image="simple-sandbox:test")
    report = fetch_report(engine, run_id)
    assert report["status"] == "pending"
    assert report["totals"]["sandboxes"] == 7
    assert report["totals"]["cost_usd"] == 0
    assert report["by_mechanism"] == []
    assert all(s["status"] == "pending" for s in report["sandboxes"])


def test_fetch_report_unknown_run(engine: Engine) -> None:
    with pytest.raises(NotFoundError, match="run-nope"):
        fetch_report(engine, "run-nope")


# --- JUnit and Markdown ----------------------------------------------------------------


def test_junit_is_valid_xml_with_one_testcase_per_sandbox() -> None:
    report = sample_report()
    root = ET.fromstring(report_junit(report))
    assert root.tag == "testsuites"
    [suite] = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [s["template_id"] for s in report["sandboxes"]]
    assert suite.get("tests") == "5"
    assert suite.get("skipped") == "1"
    assert int(suite.get("failures", "-1")) == len(
        [c for c in cases if c.find("failure") is not None])
    assert float(suite.get("time", "0")) == pytest.approx(
        sum(s["duration_s"] or 0 for s in report["sandboxes"]))
    suite_props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert float(suite_props["cost_usd"]) == 3.75
    assert float(suite_props["mechanism_coverage_pct"]) == report["totals"][
        "mechanism_coverage_pct"]


def test_junit_failure_carries_error_and_exit_code() -> None:
    report = sample_report()
    cases = {c.get("name"): c for c in ET.fromstring(report_junit(report)).iter("testcase")}
    failed = cases["kami_shrine"]
    failure = failed.find("failure")
    assert failure is not None
    assert failure.get("type") == "failed"
    error = report["sandboxes"][1]["error"]
    assert error in (failure.text or "")
    assert "exit code 3" in (failure.text or "")
    assert "exit code 3" in failure.get("message", "")
    assert "<boom>" in failure.get("message", "")
    assert cases["board_meeting"].find("failure") is None
    assert cases["board_meeting"].find("skipped") is None
    assert cases["ipo_reverse"].find("skipped").get("message") == "over budget"
    assert cases["vc_pitch_pearl"].find("failure").get("type") == "timeout"


def test_junit_testcase_properties_hold_cost_and_duration() -> None:
    report = sample_report()
    for case, sandbox in zip(ET.fromstring(report_junit(report)).iter("testcase"),
                             report["sandboxes"], strict=True):
        props = {p.get("name"): p.get("value") for p in case.find("properties")}
        assert props["sandbox_id"] == sandbox["sandbox_id"]
        assert props["cost_usd"] == str(sandbox["cost_usd"])
        assert props["duration_s"] == str(sandbox["duration_s"])
        assert float(case.get("time")) == pytest.approx(sandbox["duration_s"] or 0)


def test_markdown_has_a_row_per_sandbox() -> None:
    report = sample_report()
    text = report_markdown(report)
    assert "run-abc" in text
    assert "1/5 succeeded" in text
    table = [line for line in text.splitlines() if line.startswith("|")]
    header, separator, *rows = table
    assert "template" in header and "status" in header
    assert set(separator.replace("|", "").split()) == {"---"}
    assert len(rows) == len(report["sandboxes"])
    width = len(re.split(r"(?<!\\)\|", header))
    for row, sandbox in zip(rows, report["sandboxes"], strict=True):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)]
        assert len(cells) == width, f"an unescaped pipe broke the row: {row}"
        assert cells[1] == sandbox["template_id"]
        assert sandbox["status"] in cells[2]
    assert "second line" in rows[1]  # the error's newline does not end the row


def test_markdown_and_junit_of_a_real_report(engine: Engine, loaded_run) -> None:
    report = fetch_report(engine, loaded_run["run_id"])
    markdown = report_markdown(report)
    for template_id in loaded_run["ids"]:
        assert re.search(rf"^\| {template_id} \|", markdown, re.MULTILINE)
    root = ET.fromstring(report_junit(report))
    assert len(list(root.iter("testcase"))) == 3
    assert len(list(root.iter("failure"))) == 1
