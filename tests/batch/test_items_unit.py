"""Items, their limits and the snapshot's `items` table, unit by unit."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from controller.catalog.batches import MAX_ITEM_DATA_BYTES, check_items, split
from controller.errors import InputError, SnapshotRejected
from controller.intake.aggregator import read_snapshot
from sandbox_image.batch import Item, ItemsError, evaluate, load_entrypoint, parse_items
from sandbox_image.contract import SNAPSHOT_SCHEMA_SQL
from sandbox_image.simulation_config import ConfigError

GOOD = ("i-1", "succeeded", 1, None, None, 3, '{"n": 1}')


def snapshot(tmp_path: Path, rows: list[tuple[object, ...]], schema: str = SNAPSHOT_SCHEMA_SQL
             ) -> bytes:
    path = tmp_path / "s.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(schema)
    conn.execute("INSERT INTO runs VALUES ('sb', 't', 'completed', NULL, NULL, 0, 0, 0, 0, 0, "
                 "'[]')")
    if rows:
        conn.executemany("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    conn.commit()
    conn.close()
    return path.read_bytes()


def test_items_rows_are_read(tmp_path: Path) -> None:
    rows = [GOOD, ("i-2", "failed", None, None, "ValueError: x", 1, "null"),
            ("i-3", "succeeded", 0, "no", None, None, None), ("i-4", "skipped", None, None,
                                                              None, None, '"s"')]
    assert read_snapshot(snapshot(tmp_path, rows), 10**7).items == rows


def test_a_snapshot_without_items_is_no_batch(tmp_path: Path) -> None:
    schema = SNAPSHOT_SCHEMA_SQL.split("CREATE TABLE IF NOT EXISTS items")[0]
    path = tmp_path / "s.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(schema)
    conn.execute("INSERT INTO runs VALUES ('sb', 't', 'completed', NULL, NULL, 0, 0, 0, 0, 0, "
                 "'[]')")
    conn.commit()
    conn.close()
    assert read_snapshot(path.read_bytes(), 10**7).items == []


@pytest.mark.parametrize("bad", [
    ("i-1", "done", 1, None, None, 3, None),          # status outside the contract
    ("i-1", "succeeded", 2, None, None, 3, None),     # passed not 0/1
    ("i-1", "succeeded", 1, None, None, -3, None),    # negative duration
    ("i-1", "succeeded", 1, None, None, 3, "{nope"),  # data not JSON
    ("x" * 201, "succeeded", 1, None, None, 3, None),  # item_id too long
    ("i-1", "failed", None, None, "e" * 4001, 3, None),  # error too long
    (b"\x00id", "succeeded", 1, None, None, 3, None),  # item_id a blob, not text
])
def test_a_bad_item_row_rejects_the_snapshot(tmp_path: Path, bad: tuple[object, ...]) -> None:
    with pytest.raises(SnapshotRejected, match="items"):
        read_snapshot(snapshot(tmp_path, [bad]), 10**7)


def test_repeated_item_ids_reject_the_snapshot(tmp_path: Path) -> None:
    schema = SNAPSHOT_SCHEMA_SQL.replace("item_id TEXT PRIMARY KEY", "item_id TEXT")
    with pytest.raises(SnapshotRejected, match="repeats an item_id"):
        read_snapshot(snapshot(tmp_path, [GOOD, GOOD], schema), 10**7)


def test_an_items_table_without_a_contract_column_is_rejected(tmp_path: Path) -> None:
    schema = SNAPSHOT_SCHEMA_SQL.replace("duration_ms INTEGER, data TEXT);", "data TEXT);")
    with pytest.raises(SnapshotRejected, match="lacks columns: duration_ms"):
        read_snapshot(snapshot(tmp_path, [], schema), 10**7)


def test_each_verdict_form_and_an_exception_become_a_row() -> None:
    assert evaluate(lambda d: True, Item("a", 1)).passed is True
    row = evaluate(lambda d: (False, "too short"), Item("b", 1))
    assert (row.status, row.passed, row.reason) == ("succeeded", False, "too short")
    row = evaluate(lambda d: {"passed": False, "reason": "no"}, Item("c", 1))
    assert (row.passed, row.reason) == (False, "no")
    row = evaluate(lambda d: 1 / 0, Item("d", 1))
    assert (row.status, row.passed) == ("failed", None)
    assert row.error == "ZeroDivisionError: division by zero"
    row = evaluate(lambda d: "yes", Item("e", 1))
    assert row.status == "failed" and "returned str" in (row.error or "")


def test_the_builtin_evaluator_follows_raise_and_expect() -> None:
    builtin = load_entrypoint(None)
    assert evaluate(builtin, Item("a", {"x": 1})).passed is True
    assert evaluate(builtin, Item("b", {"raise": "boom"})).error == "ItemFailed: boom"
    row = evaluate(builtin, Item("c", {"expect": False}))
    assert (row.passed, row.reason) == (False, "data.expect is false")


def test_a_bad_entrypoint_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="module:function"):
        load_entrypoint("nocolon")
    with pytest.raises(ConfigError, match="cannot be loaded"):
        load_entrypoint("no_such_module_xyz:run")


def test_the_items_file_is_checked_line_by_line() -> None:
    assert parse_items(b'{"item_id": "a", "data": 1}\n\n') == [Item("a", 1)]
    with pytest.raises(ItemsError, match="line 2 is not JSON"):
        parse_items(b'{"item_id": "a"}\nnope\n')
    with pytest.raises(ItemsError, match="repeats"):
        parse_items(b'{"item_id": "a"}\n{"item_id": "a"}\n')


def test_client_items_are_bounded_and_named() -> None:
    with pytest.raises(InputError, match="item 2 \\(b\\): data is"):
        check_items([{"item_id": "a", "data": 1},
                     {"item_id": "b", "data": "x" * MAX_ITEM_DATA_BYTES}], "request")
    with pytest.raises(InputError, match="item 2: item_id 'a' repeats"):
        check_items([{"item_id": "a"}, {"item_id": "a"}], "request")
    with pytest.raises(InputError, match="must be 1-200 characters"):
        check_items([{"item_id": "a b"}], "request")
    with pytest.raises(InputError, match="with `item_id` and `data` only"):
        check_items([{"item_id": "a", "extra": 1}], "request")


def test_split_keeps_batches_at_most_batch_size_and_even() -> None:
    items = check_items([{"item_id": f"i{n}"} for n in range(25)], "t")
    assert [len(b) for b in split(items, 10)] == [9, 8, 8]
    assert [len(b) for b in split(items, 100)] == [25]
    assert [len(b) for b in split(items, 1)] == [1] * 25
    assert [i for b in split(items, 7) for i in b] == list(items)
