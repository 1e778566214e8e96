# ruff: noqa: F811 - the fixtures imported from tests.services are parameters here
"""The S3 store against a real S3 server (rclone, which checks signatures like AWS does).

Presigned URLs are used the way a sandbox uses them: a plain HTTP client with no
credentials, allowed exactly one key and one method until the URL expires.
"""

from __future__ import annotations

import logging
import random
import secrets
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from controller.attempts.finisher import Finisher, Outcome
from controller.backends.process.backend import ProcessBackend
from controller.catalog.templates import load_catalog
from controller.db.engine import create_db_engine, upgrade
from controller.db.schema import result_runs, sandboxes
from controller.errors import ConfigError, PayloadTooLargeError, StoreError, UnavailableError
from controller.planning.model import PlanRequest
from controller.runs import create_run
from controller.settings import REPO_CATALOG_DIR, Settings
from controller.states import SandboxStatus
from controller.store import create_store
from controller.store.base import snapshot_key
from controller.store.s3 import S3Store
from sandbox_image.contract import SNAPSHOT_SCHEMA_SQL
from tests.services import (  # noqa: F401 - fixtures
    TEST_BUCKET,
    RcloneS3Server,
    S3Server,
    s3_prefix,
    s3_private_server,
    s3_server,
    s3_settings,
)

pytestmark = pytest.mark.s3


def make_store(server: S3Server, prefix: str, **overrides: str) -> S3Store:
    options = {"endpoint_url": server.endpoint_url, "access_key_id": server.access_key_id,
               "secret_access_key": server.secret_access_key, **overrides}
    return S3Store(options.pop("bucket", TEST_BUCKET), prefix, connect_timeout_s=1.0,
                   read_timeout_s=5.0, max_attempts=2, **options)


@pytest.fixture
def store(s3_server: S3Server, s3_prefix: str) -> S3Store:
    return make_store(s3_server, s3_prefix)


def test_put_get_size_under_the_prefix(store: S3Store, s3_server: S3Server,
                                       s3_prefix: str) -> None:
    data = b"SQLite format 3\x00 and more"
    store.put("snapshots/run-1/sbx-1/attempt-1.sqlite", data)
    assert store.get("snapshots/run-1/sbx-1/attempt-1.sqlite") == data
    assert store.size("snapshots/run-1/sbx-1/attempt-1.sqlite") == len(data)
    assert set(s3_server.objects(TEST_BUCKET, s3_prefix)) == \
        {"snapshots/run-1/sbx-1/attempt-1.sqlite"}


def test_put_replaces_atomically(store: S3Store) -> None:
    store.put("logs/a.log", b"first")
    store.put("logs/a.log", b"second, longer")
    assert store.get("logs/a.log") == b"second, longer"


def test_absent_keys_are_none(store: S3Store) -> None:
    assert store.get("snapshots/none.sqlite") is None
    assert store.size("snapshots/none.sqlite") is None


def test_get_refuses_objects_over_the_limit(store: S3Store) -> None:
    store.put("big", b"x" * 1000)
    with pytest.raises(PayloadTooLargeError, match="1000 bytes"):
        store.get("big", max_bytes=999)
    assert store.get("big", max_bytes=1000) == b"x" * 1000


def test_create_store_picks_s3(s3_settings: Settings) -> None:
    store = create_store(s3_settings)
    assert isinstance(store, S3Store)
    store.check()


def test_store_url_without_bucket_is_a_config_error(settings: Settings) -> None:
    with pytest.raises(ConfigError, match="no bucket"):
        create_store(settings.model_copy(update={"store_url": "s3:///prefix"}))


# --- presigned uploads -------------------------------------------------------------------


def test_presigned_put_needs_no_credentials(store: S3Store) -> None:
    url = store.presigned_put_url("snapshots/r/s/attempt-1.sqlite", 600)
    assert "X-Amz-Signature=" in url and "X-Amz-Expires=600" in url
    response = httpx.put(url, content=b"snapshot bytes",
                         headers={"Content-Type": "application/octet-stream"})
    assert response.status_code == 200, response.text
    assert store.get("snapshots/r/s/attempt-1.sqlite") == b"snapshot bytes"


def test_presigned_url_is_good_for_its_key_and_method_only(store: S3Store) -> None:
    url = store.presigned_put_url("snapshots/r/s/attempt-1.sqlite", 600)
    other_key = url.replace("attempt-1.sqlite", "attempt-2.sqlite")
    assert httpx.put(other_key, content=b"x").status_code == 403
    assert httpx.get(url).status_code == 403  # a PUT URL does not read
    assert httpx.delete(url).status_code == 403
    assert store.get("snapshots/r/s/attempt-2.sqlite") is None


def test_tampered_presigned_url_is_refused(store: S3Store) -> None:
    url = store.presigned_put_url("snapshots/r/s/attempt-1.sqlite", 600)
    signature = url.rsplit("X-Amz-Signature=", 1)[1]
    forged = url.replace(signature, ("0" if signature[0] != "0" else "1") + signature[1:])
    assert httpx.put(forged, content=b"x").status_code == 403
    longer = url.replace("X-Amz-Expires=600", "X-Amz-Expires=6000")
    assert httpx.put(longer, content=b"x").status_code == 403
    assert store.get("snapshots/r/s/attempt-1.sqlite") is None


def test_expired_presigned_url_is_refused(store: S3Store) -> None:
    url = store.presigned_put_url("snapshots/r/s/attempt-1.sqlite", 1)
    time.sleep(2.1)
    response = httpx.put(url, content=b"late")
    assert response.status_code in (400, 403), response.text
    assert store.get("snapshots/r/s/attempt-1.sqlite") is None


def test_presigned_urls_name_the_public_endpoint(s3_server: S3Server, s3_prefix: str) -> None:
    """Sandboxes may reach S3 at another address than the controller (Docker, a proxy)."""
    store = make_store(s3_server, s3_prefix, public_endpoint_url="http://s3.example:9000")
    assert store.presigned_put_url("k", 60).startswith(
        f"http://s3.example:9000/{TEST_BUCKET}/{s3_prefix}/k?")


def test_presigned_expiry_is_capped_at_seven_days(store: S3Store) -> None:
    assert "X-Amz-Expires=604800" in store.presigned_put_url("k", 10**9)


# --- what goes wrong ---------------------------------------------------------------------


def test_check_names_a_missing_bucket(s3_server: S3Server) -> None:
    store = make_store(s3_server, "p", bucket="no-such-bucket-" + secrets.token_hex(3))
    with pytest.raises(UnavailableError, match="does not exist") as caught:
        store.check()
    assert "no-such-bucket-" in caught.value.message
    assert caught.value.hint and "mb" in caught.value.hint


def test_missing_bucket_is_not_transient(s3_server: S3Server) -> None:
    store = make_store(s3_server, "p", bucket="no-such-bucket-" + secrets.token_hex(3))
    with pytest.raises(StoreError) as caught:
        store.put("k", b"x")
    assert caught.value.transient is False


def test_check_names_wrong_credentials(s3_server: S3Server, s3_prefix: str) -> None:
    store = make_store(s3_server, s3_prefix, secret_access_key="wrong-secret")
    with pytest.raises(UnavailableError, match="refused the credentials") as caught:
        store.check()
    assert caught.value.hint and "SIMPLE_S3_SECRET_ACCESS_KEY" in caught.value.hint
    with pytest.raises(StoreError) as write_error:
        store.put("k", b"x")
    assert write_error.value.transient is False


def test_unknown_key_id_is_a_credentials_error(s3_server: S3Server, s3_prefix: str) -> None:
    store = make_store(s3_server, s3_prefix, access_key_id="nobody")
    with pytest.raises(UnavailableError, match="refused the credentials"):
        store.check()


def test_store_down_is_transient_and_named(s3_private_server: RcloneS3Server) -> None:
    store = make_store(s3_private_server, "p")
    store.put("k", b"before")
    s3_private_server.stop()
    with pytest.raises(UnavailableError, match="unreachable") as caught:
        store.check()
    assert "SIMPLE_S3_ENDPOINT_URL" in (caught.value.hint or "")
    for call in (lambda: store.put("k", b"x"), lambda: store.get("k"),
                 lambda: store.size("k")):
        with pytest.raises(StoreError) as error:
            call()
        assert error.value.transient is True
    s3_private_server.start()  # and it recovers with the server: no restart of ours
    store.check()
    assert store.get("k") == b"before"


def test_from_settings_warns_but_starts_when_the_store_is_unusable(
    s3_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    broken = s3_settings.model_copy(update={"store_url": "s3://no-such-bucket-x/p"})
    with caplog.at_level(logging.WARNING, logger="controller.store.s3"):
        store = create_store(broken)
    assert isinstance(store, S3Store)
    assert "does not exist" in caplog.text


# --- the controller waits out an outage --------------------------------------------------


def test_aggregation_waits_out_a_store_outage(s3_private_server: RcloneS3Server,
                                              settings: Settings, tmp_path: Path) -> None:
    """The finisher meets a store that is down: the sandbox stays running, unaggregated,
    and the next pass (here: the next call) aggregates it once the store is back."""
    store = make_store(s3_private_server, "outage")
    engine = create_db_engine(settings.resolved_database_url)
    upgrade(engine)
    run_id, _ = create_run(engine, load_catalog([REPO_CATALOG_DIR]),
                           PlanRequest(templates=("board_meeting",)),
                           {"templates": ["board_meeting"]}, backend="process",
                           default_image="simple-sandbox:test")
    with engine.begin() as conn:
        conn.execute(update(sandboxes).where(sandboxes.c.run_id == run_id).values(
            status="running", attempt=1, launched_at=datetime.now(UTC)))
        row = conn.execute(select(sandboxes).where(sandboxes.c.run_id == run_id)).one()
    url = store.presigned_put_url(snapshot_key(run_id, row.id, 1), 600)
    assert httpx.put(url, content=snapshot_file(tmp_path / "s.sqlite", row.id)).status_code == 200
    backend = ProcessBackend(settings)
    succeeded = Outcome(SandboxStatus.SUCCEEDED, 0, None)

    def finish() -> Any:
        Finisher(engine, backend, store, settings).finish(row, succeeded, datetime.now(UTC),
                                                          random.Random(1))
        with engine.connect() as conn:
            sandbox = conn.execute(select(sandboxes).where(sandboxes.c.id == row.id)).one()
            loaded = conn.execute(select(result_runs.c.cost_usd)
                                  .where(result_runs.c.sandbox_id == row.id)).scalars().all()
        return sandbox, loaded

    s3_private_server.stop()
    sandbox, loaded = finish()
    assert (sandbox.status, sandbox.aggregated, loaded) == ("running", False, [])
    s3_private_server.start()
    sandbox, loaded = finish()
    engine.dispose()
    assert (sandbox.status, sandbox.aggregated, loaded) == ("succeeded", True, [2.5])


def snapshot_file(path: Path, run_id: str) -> bytes:
    conn = sqlite3.connect(path)
    conn.executescript(SNAPSHOT_SCHEMA_SQL)
    conn.execute("INSERT INTO runs VALUES (?, 'board_meeting', 'completed', NULL, NULL, 2.5, "
                 "100, 3, 1, 1, '[\"M1\"]')", (run_id,))
    conn.execute("INSERT INTO steps VALUES (?, 1, 10, 1, 0, 2.5, 100)", (run_id,))
    conn.commit()
    conn.close()
    return path.read_bytes()


def test_streamed_put_and_open(store: S3Store) -> None:
    """Issue 25 finding 5: objects go in from a file and come out in chunks."""
    data = bytes(range(256)) * 20_000  # 5 MB, several chunks
    assert store.put_chunks("logs/big.log", (data[i:i + 70_000]
                                              for i in range(0, len(data), 70_000))) == len(data)
    chunks = store.open("logs/big.log")
    assert chunks is not None
    pieces = list(chunks)
    assert b"".join(pieces) == data and max(map(len, pieces)) <= 1024 * 1024
    assert store.open("logs/none.log") is None
    with pytest.raises(PayloadTooLargeError):
        store.open("logs/big.log", max_bytes=len(data) - 1)
    path = store.download("logs/big.log")
    assert path is not None and path.read_bytes() == data
    path.unlink()
