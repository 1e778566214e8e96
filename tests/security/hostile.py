"""What the hostile sandboxes run, and the snapshot bombs they upload.

Each script reads its input from the file next to it (`<script>.input`), which the
test writes before starting the run, so one catalog serves every attack.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sandbox_image.contract import SNAPSHOT_SCHEMA_SQL

# PUT the input file to SIMPLE_SNAPSHOT_URL, say so, exit 0.
UPLOAD_SCRIPT = """
import os, urllib.request
data = open(os.path.splitext(__file__)[0] + ".input", "rb").read()
request = urllib.request.Request(os.environ["SIMPLE_SNAPSHOT_URL"], data=data, method="PUT")
with urllib.request.urlopen(request, timeout=60) as response:
    print("UPLOADED", response.status, flush=True)
"""

# The input is {template_id: {"delay_s", "bodies": [raw JSON text], "after_s"}}: wait, POST
# each body as this sandbox, print each answer, wait again, exit 0.
EVENTS_SCRIPT = """
import json, os, time, urllib.error, urllib.request
plan = json.load(open(os.path.splitext(__file__)[0] + ".input"))[os.environ["SIMPLE_TEMPLATE_ID"]]
url = (f"{os.environ['SIMPLE_CONTROLLER_URL'].rstrip('/')}/v1/sandboxes/"
       f"{os.environ['SIMPLE_SANDBOX_ID']}/events")
headers = {"Authorization": f"Bearer {os.environ['SIMPLE_SANDBOX_TOKEN']}",
           "Content-Type": "application/json"}
time.sleep(plan.get("delay_s", 0))
for body in plan["bodies"]:
    request = urllib.request.Request(url, data=body.encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    print("ANSWER", status, text[:400].replace("\\n", " "), flush=True)
print("DONE", flush=True)
time.sleep(plan.get("after_s", 0))
"""

QUIET_SCRIPT = """
import os, time
print("hello from a quiet sandbox", flush=True)
print("CWD", os.getcwd(), flush=True)
time.sleep(60)
"""

# Point the process backend's record of this sandbox's process group at the
# controller's own group, so that stopping the sandbox would signal the controller.
ESCAPE_SCRIPT = """
import json, os, time
# The test names its own controller (never another process on the machine).
target = os.getpgid(int(open(os.path.splitext(__file__)[0] + ".input").read()))
# The working directory is not inside it: the supervisor's is (same user, so readable).
attempt_dir = os.readlink(f"/proc/{os.getppid()}/cwd")
for name in ("child.json",):
    path = os.path.join(attempt_dir, name)
    try:
        with open(path, "w") as handle:
            json.dump({"pid": target, "pgid": target}, handle)
        print("REWROTE", name, target, flush=True)
    except OSError as e:
        print("CANNOT", name, e, flush=True)
print("READY", flush=True)
time.sleep(60)
"""

# A grandchild in the sandbox's process group grows past the 64 MiB limit while the
# direct child stays small.
HOG_SCRIPT = """
import subprocess, sys, time
grandchild = "b = bytearray(); print('GROWING', flush=True)\\n" \\
             "while True:\\n    b.extend(b'x' * (16 << 20)); __import__('time').sleep(0.05)"
subprocess.Popen([sys.executable, "-c", grandchild])
time.sleep(60)
"""

BOMB_EXPRESSION = "printf('%.*c', 2e8 + length(run_id) - length(run_id), 'x')"
# Written first, then swapped for the bomb in the schema text (as an attacker would, with
# `writable_schema`): building the file costs nothing, reading it would cost the bomb.
_CHEAP = BOMB_EXPRESSION.replace("2e8", "2e0")


def write_snapshot(path: Path, schema: str = SNAPSHOT_SCHEMA_SQL, run_rows: int = 1,
                   extra_sql: str = "") -> bytes:
    """A snapshot at `path` with `run_rows` rows in `runs` (one step each); its bytes."""
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript(schema.replace(BOMB_EXPRESSION, _CHEAP))
    for i in range(run_rows):
        conn.execute(
            "INSERT INTO runs (run_id, template_id, status, cost_usd, tokens_used) "
            "VALUES (?, 'upload_file', 'completed', 1.5, 10)",
            (f"r{i}",),
        )
        conn.execute("INSERT INTO steps VALUES (?, 1, 10, 1, 0, 0.5, 5)", (f"r{i}",))
    conn.executescript(extra_sql.replace(BOMB_EXPRESSION, _CHEAP))
    conn.commit()
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute("UPDATE sqlite_schema SET sql = replace(sql, ?, ?)", (_CHEAP, BOMB_EXPRESSION))
    conn.commit()
    conn.close()
    return path.read_bytes()


def generated_column_bomb(path: Path, rows: int = 30) -> bytes:
    """The review's bomb: a VIRTUAL generated column building a 200 MB string per row."""
    schema = SNAPSHOT_SCHEMA_SQL.replace(
        "mechanisms_used TEXT);",
        f"mechanisms_used TEXT, payload TEXT GENERATED ALWAYS AS ({BOMB_EXPRESSION}) VIRTUAL);",
    )
    assert schema != SNAPSHOT_SCHEMA_SQL
    return write_snapshot(path, schema, run_rows=rows)
