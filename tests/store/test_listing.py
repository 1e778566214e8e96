"""Listing and deleting store objects (what retention uses), on the local store and S3:
a prefix matches keys, not directories of a longer name; deleting is idempotent; the
local store leaves no empty directories behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.store.base import ObjectStore, StoredObject
from controller.store.local import LocalStore
from tests.services import TEST_BUCKET, RcloneS3Server, s3_private_server  # noqa: F401


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "local":
        yield LocalStore(tmp_path / "store")
        return
    from controller.store.s3 import S3Store

    server: RcloneS3Server = request.getfixturevalue("s3_private_server")
    yield S3Store(TEST_BUCKET, "some/prefix", endpoint_url=server.endpoint_url,
                  access_key_id=server.access_key_id,
                  secret_access_key=server.secret_access_key)


def test_list_by_prefix_then_delete(store: ObjectStore, tmp_path: Path) -> None:
    store.put("logs/run-a/sb-1/attempt-1.log", b"12345")
    store.put("logs/run-a/sb-2/attempt-1.log", b"1")
    store.put("logs/run-ab/sb-1/attempt-1.log", b"keep me")
    store.put("snapshots/run-a/sb-1/attempt-1.sqlite", b"snap")

    assert store.list_objects("logs/run-a/") == [
        StoredObject("logs/run-a/sb-1/attempt-1.log", 5),
        StoredObject("logs/run-a/sb-2/attempt-1.log", 1),
    ]
    assert store.list_objects("inputs/run-a/") == []
    store.delete_objects(["logs/run-a/sb-1/attempt-1.log", "logs/run-a/sb-2/attempt-1.log",
                          "logs/run-a/never-was.log"])
    assert store.list_objects("logs/run-a/") == []
    assert store.get("logs/run-ab/sb-1/attempt-1.log") == b"keep me"
    assert store.get("snapshots/run-a/sb-1/attempt-1.sqlite") == b"snap"
    if isinstance(store, LocalStore):
        assert not (store.root / "logs" / "run-a").exists()
        assert (store.root / "logs" / "run-ab" / "sb-1").is_dir()


def test_delete_more_than_one_request_holds(store: ObjectStore) -> None:
    keys = [f"items/run-b/sb/attempt-{n}.jsonl" for n in range(1005)]
    for key in keys[:3] + keys[-2:]:
        store.put(key, b"x")
    store.delete_objects(keys)  # S3: two DeleteObjects calls (1000 keys at most each)
    assert store.list_objects("items/") == []
