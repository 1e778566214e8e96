"""The controller's own start-up (what it does once per process), and what each controller
owns: two in one process do not share a key, a database or a queue."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from sqlalchemy import select

from controller.attempts.urls import input_key
from controller.cli.embedded import EmbeddedServer
from controller.db.schema import events, sandboxes
from controller.intake.tokens import hash_token
from controller.settings import Settings
from tests.sandbox_rows import seed_running

REPO = Path(__file__).resolve().parent.parent

# Two controllers in one fresh interpreter: the first start freezes start-up's objects
# out of the collector's full collections, the second freezes nothing more.
SCRIPT = textwrap.dedent("""
    import gc, json, tempfile
    from pathlib import Path
    from controller.service import Controller
    from controller.settings import Settings

    counts = [gc.get_freeze_count()]
    for _ in range(2):
        data = Path(tempfile.mkdtemp())
        controller = Controller(Settings(data_dir=data, database_url=f"sqlite:///{data}/s.db",
                                         process_user="self"))
        controller.start()
        counts.append(gc.get_freeze_count())
        controller.close()
    print(json.dumps(counts))
""")


def test_start_up_objects_are_frozen_out_of_full_collections_once() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    before, first, second = json.loads(done.stdout.strip().splitlines()[-1])
    assert before == 0 and first > 50_000, (before, first)  # the frameworks, the catalog
    assert second <= first  # a second controller freezes nothing more (some were freed)


def test_two_controllers_in_one_process_keep_their_own_keys_databases_and_stamps(
    tmp_path: Path,
) -> None:
    """Each controller owns its signing key, event intake and stamps: the same sandbox
    (same id, same token) in both databases, yet a URL one signed is refused by the other,
    and events and stamps land in the database of the controller they were given to."""
    servers = [EmbeddedServer(Settings(data_dir=tmp_path / name, signing_key=f"key-{name}"),
                              start_controller=False) for name in ("a", "b")]
    with servers[0] as a, servers[1] as b:
        for served in (a, b):
            seed_running(served.controller.engine, "run-x", {"sb-1": "token-1"})
            served.controller.store.put(input_key("items", "run-x", "sb-1", 1), b"{}\n")
        signed = {"a": _signed_paths(a), "b": _signed_paths(b)}
        assert signed["a"] != signed["b"], "two keys, two signatures"
        for own, other in ((a, b), (b, a)):
            mine = signed["a" if own is a else "b"]
            assert httpx.get(other.url + mine["items"], timeout=10).status_code == 401
            assert httpx.put(other.url + mine["snapshot"], content=b"x",
                             timeout=10).status_code == 401
            assert httpx.get(own.url + mine["items"], timeout=10).content == b"{}\n"
            assert httpx.put(own.url + mine["snapshot"], content=b"x",
                             timeout=10).status_code == 201

        event = {"id": "only-in-a", "seq": 1, "type": "started", "time": "2026-11-21T12:00:00Z",
                 "data": {}}
        posted = httpx.post(f"{a.url}/v1/sandboxes/sb-1/events", json={"events": [event]},
                            headers={"Authorization": "Bearer token-1"}, timeout=10)
        assert posted.status_code == 200, posted.text
        a.controller.stamps.stamp("sb-1", 1, "logs/from-a", None)
        assert _stored(a) == (["only-in-a"], "logs/from-a")
        assert _stored(b) == ([], None)


def _signed_paths(served: EmbeddedServer) -> dict[str, str]:
    """The items and snapshot URLs the controller signs for sb-1's first attempt."""
    urls, token_hash = served.controller.urls, hash_token("token-1")
    return {"items": _path(urls.input("items", "run-x", "sb-1", 1, token_hash, 60)),
            "snapshot": _path(urls.snapshot("run-x", "sb-1", 1, token_hash, 60))}


def _path(url: str) -> str:
    """The path and query of a URL its controller signed (its host aside)."""
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def _stored(served: EmbeddedServer) -> tuple[list[str], str | None]:
    with served.controller.engine.connect() as conn:
        ids = list(conn.execute(select(events.c.event_id)).scalars())
        log = conn.execute(select(sandboxes.c.log_key)).scalar_one()
    return ids, log
