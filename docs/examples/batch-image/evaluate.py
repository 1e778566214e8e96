"""A minimal batch image for SIMPLE: standard library only, written from docs/batch.md.

It reads its items from SIMPLE_ITEMS_URL, checks each one (here: is `data.text` a
palindrome?), records one `items` row per item, reports progress, checkpoints every
10 items, and on a retry restores what SIMPLE_RESUME_URL holds and goes on from there.
Replace `check` with your own evaluation.
"""

import json
import os
import sqlite3
import sys
import time
import urllib.request
import uuid

ENV = os.environ
SANDBOX = ENV["SIMPLE_SANDBOX_ID"]
EVENTS = f"{ENV['SIMPLE_CONTROLLER_URL'].rstrip('/')}/v1/sandboxes/{SANDBOX}/events"
SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, template_id TEXT NOT NULL,
  status TEXT NOT NULL, started_at TEXT, finished_at TEXT, cost_usd REAL,
  tokens_used INTEGER, llm_calls INTEGER, entities_created INTEGER,
  timepoints_created INTEGER, mechanisms_used TEXT);
CREATE TABLE IF NOT EXISTS steps (run_id TEXT NOT NULL, step INTEGER NOT NULL,
  duration_ms INTEGER, actions INTEGER, failures INTEGER, cost_usd REAL, tokens INTEGER,
  PRIMARY KEY (run_id, step));
CREATE TABLE IF NOT EXISTS items (item_id TEXT PRIMARY KEY, status TEXT NOT NULL,
  passed INTEGER, reason TEXT, error TEXT, duration_ms INTEGER, data TEXT);
"""
seq = 0


def check(data):
    """Your evaluation: return (passed, reason); raising marks the item errored."""
    text = data["text"]  # a KeyError here is recorded as the item's error
    return text == text[::-1], None if text == text[::-1] else f"{text!r} is no palindrome"


def http(method, url, body=None, headers=None):
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read()


def send(kind, data):
    """One event (a real image batches them and retries on 429/503: see the contract)."""
    global seq
    seq += 1
    event = {"id": uuid.uuid4().hex, "seq": seq, "type": kind, "data": data,
             "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    http("POST", EVENTS, json.dumps({"events": [event]}).encode(),
         {"Authorization": f"Bearer {ENV['SIMPLE_SANDBOX_TOKEN']}",
          "Content-Type": "application/json"})


def upload(db):
    """PUT a consistent copy of the database to SIMPLE_SNAPSHOT_URL (checkpoint or final)."""
    copy = sqlite3.connect("upload.sqlite")
    db.backup(copy)
    copy.close()
    with open("upload.sqlite", "rb") as handle:
        http("PUT", ENV["SIMPLE_SNAPSHOT_URL"], handle.read())
    os.remove("upload.sqlite")


def restore(db):
    """Copy an earlier attempt's checkpoint in; the number of items it finished."""
    if not ENV.get("SIMPLE_RESUME_URL"):
        return 0
    with open("resume.sqlite", "wb") as handle:
        handle.write(http("GET", ENV["SIMPLE_RESUME_URL"]))
    db.execute("ATTACH 'resume.sqlite' AS old")
    db.execute("INSERT INTO items SELECT * FROM old.items")
    db.execute("INSERT INTO steps SELECT * FROM old.steps WHERE run_id = ?", (SANDBOX,))
    db.commit()
    db.execute("DETACH old")
    return db.execute("SELECT COUNT(*) FROM steps").fetchone()[0]


def write_run(db, status):
    db.execute("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, NULL, NULL, 0, 0, 0, 0, 0, '[]')",
               (SANDBOX, ENV["SIMPLE_TEMPLATE_ID"], status))


def main():
    db = sqlite3.connect("results.sqlite")
    db.executescript(SCHEMA)
    done = restore(db)
    # The items file holds only the items an earlier attempt left without a result.
    items = [json.loads(line) for line in http("GET", ENV["SIMPLE_ITEMS_URL"]).splitlines()
             if line.strip()]
    send("started", {"attempt": int(ENV["SIMPLE_ATTEMPT"]), "steps_total": done + len(items),
                     "resumed_from_step": done or None})
    for step, item in enumerate(items, done + 1):
        began = time.monotonic()
        try:
            passed, reason = check(item["data"])
            row = ("succeeded", int(passed), reason, None)
        except Exception as e:  # one item's error never stops the batch
            row = ("failed", None, None, f"{type(e).__name__}: {e}")
        ms = int((time.monotonic() - began) * 1000)
        db.execute("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (item["item_id"], *row, ms, json.dumps(item["data"])))
        db.execute("INSERT INTO steps VALUES (?, ?, ?, 1, ?, 0, 0)",
                   (SANDBOX, step, ms, int(row[3] is not None)))
        write_run(db, "running")
        db.commit()
        send("progress", {"step": step, "steps_total": done + len(items),
                          "item_id": item["item_id"]})
        if step % 10 == 0:
            upload(db)  # a checkpoint: a retry resumes from the latest one
    write_run(db, "completed")
    db.commit()
    upload(db)
    send("completed", {"steps_completed": done + len(items)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
