"""The dashboard's run page for a 1,000-sandbox run: server render time, and the SSE
fan-out of that run's stream to 20 viewers, each against a baseline measured alongside.

A run of 1,000 sandboxes (mixed states, retries, 2-3 events each) is written straight
into a fresh SQLite database; a controller serves it from a subprocess (no reconciler,
so nothing launches or changes the rows but this bench).

- render: GET /runs/{id} (the HTML page: 1,000 rows, the SVG timeline, 200 events)
  against GET /v1/runs/{id} (the same run as JSON, no template) — medians;
- fan-out: N viewers hold /v1/runs/{id}/stream?after=<last event> open, as the page
  does; the bench then stores one new event and one sandbox change, and measures how
  long until every viewer has both, for 1 viewer (baseline) and for 20 — medians of
  the slowest viewer per round. Also the size of one `run` message.
- browser (when Debian's chromium and chromedriver are installed): headless Chromium
  loads the page (DOMContentLoaded, median), and the page's script applies one `run`
  message with every sandbox changed, and one with none changed (medians).
The last line is the verdict: `bench-dashboard: ... : OK|MISS` (render under 1 s).

    python -m bench.dashboard_bench [--sandboxes 1000] [--viewers 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from sqlalchemy import create_engine, func, insert, select, update

from bench.support import free_port, served
from controller.db.schema import events, sandboxes
from tests.web.seed import seed_run

RUN_ID = "run-bench1000"
TARGET_RENDER_S = 1.0
SERVER = """
import sys, uvicorn
from controller.api.app import create_app
from controller.db.engine import upgrade
from controller.service import Controller
from controller.settings import Settings
settings = Settings(data_dir=sys.argv[1], database_url=sys.argv[2])
controller = Controller(settings)
upgrade(controller.engine)
print("migrated", flush=True)
uvicorn.run(create_app(controller, manage_lifecycle=False), host="127.0.0.1",
            port=int(sys.argv[3]), log_level="warning", access_log=False)
"""


def timed_get(http: httpx.Client, path: str, rounds: int) -> tuple[float, int]:
    http.get(path).raise_for_status()  # warm
    times = []
    size = 0
    for _ in range(rounds):
        started = time.perf_counter()
        response = http.get(path)
        times.append(time.perf_counter() - started)
        response.raise_for_status()
        size = len(response.content)
    return statistics.median(times), size


class Viewer(threading.Thread):
    """One browser's stream: records when each message id / run change arrives."""

    def __init__(self, base: str, after: int) -> None:
        super().__init__(daemon=True)
        self.url = f"{base}/v1/runs/{RUN_ID}/stream?after={after}"
        self.seen_events: dict[int, float] = {}
        self.run_messages: list[tuple[float, int, str]] = []
        self.ready = threading.Event()
        self.client = httpx.Client(timeout=120)

    def close(self) -> None:
        self.client.close()  # ends the stream: the server stops serving this viewer

    def run(self) -> None:
        with contextlib.suppress(httpx.HTTPError, RuntimeError, OSError):  # closed by the bench
            self._read()

    def _read(self) -> None:
        with self.client.stream("GET", self.url) as response:
            kind, data = "", ""
            for line in response.iter_lines():
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    data = line[5:].strip()
                elif not line and data:
                    now = time.perf_counter()
                    if kind == "run":
                        self.run_messages.append((now, len(data), data))
                        self.ready.set()
                    elif kind == "sandbox-event":
                        self.seen_events[json.loads(data)["id"]] = now
                    data = ""


def fan_out_round(base: str, engine: object, viewers: int, step: int) -> tuple[float, int]:
    """Seconds until the slowest of VIEWERS has a new event and the sandbox change."""
    with engine.connect() as conn:  # type: ignore[attr-defined]
        after = int(conn.execute(select(func.max(events.c.id))).scalar() or 0)
    threads = [Viewer(base, after) for _ in range(viewers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        if not thread.ready.wait(60):
            raise RuntimeError("a viewer got no first message")
    sandbox_id = f"{RUN_ID.removeprefix('run-')}-tpl-0001"  # a running one
    now = datetime.now(UTC)
    started = time.perf_counter()
    with engine.begin() as conn:  # type: ignore[attr-defined]
        new_id = conn.execute(
            insert(events)
            .values(
                sandbox_id=sandbox_id,
                run_id=RUN_ID,
                event_id=f"bench-{step}-{time.time_ns()}",
                attempt=1,
                seq=100 + step,
                type="progress",
                time=now,
                data={"step": step, "steps_total": 99},
                body_hash="0" * 64,
                received_at=now - timedelta(seconds=5),  # settled at once
            )
            .returning(events.c.id)
        ).scalar_one()
        conn.execute(update(sandboxes).where(sandboxes.c.id == sandbox_id).values(step=step))
    marker = f'"step": {step}, "steps_total": 7'
    deadline = time.monotonic() + 60
    latest = 0.0
    for thread in threads:
        while time.monotonic() < deadline:
            got_event = thread.seen_events.get(new_id)
            changed = [t for t, _, d in thread.run_messages if t >= started and marker in d]
            if got_event and changed:
                latest = max(latest, got_event, changed[0])
                break
            time.sleep(0.005)
        else:
            raise RuntimeError("a viewer missed the change")
    size = threads[0].run_messages[0][1]
    for thread in threads:
        thread.close()
    time.sleep(1.0)  # the server notices the closed streams before the next round
    return latest - started, size


APPLY_JS = """
const done = arguments[arguments.length - 1];
fetch("/v1/runs/" + arguments[0]).then(r => r.json()).then(run => {
  const same = [], changed = [];
  for (let i = 0; i < arguments[1]; i++) {
    let t = performance.now(); SIMPLE.runPage.applyRun(run); same.push(performance.now() - t);
    run.sandboxes.forEach(s => { s.step = (s.step || 0) + 1; s.cost_usd += 0.01; });
    t = performance.now(); SIMPLE.runPage.applyRun(run); changed.push(performance.now() - t);
  }
  done([same, changed]);
});
"""


def browser_figures(base: str, rounds: int) -> None:
    """Load time and one update's cost in headless Chromium; skipped without one."""
    import shutil

    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        print("browser: skipped (apt-get install chromium chromium-driver)")
        return
    from tests.web.browser import start_chromium

    driver = start_chromium()
    try:
        driver.set_script_timeout(120)
        loads = []
        for _ in range(rounds):
            driver.get(f"{base}/runs/{RUN_ID}")
            loads.append(
                driver.execute_script(
                    "const t = performance.getEntriesByType('navigation')[0];"
                    "return t.domContentLoadedEventEnd - t.startTime;"
                )
            )
        same, changed = driver.execute_async_script(APPLY_JS, RUN_ID, rounds)
        print(
            f"browser: page loaded (DOMContentLoaded) in {statistics.median(loads):.0f} ms; "
            f"one `run` message applied in {statistics.median(changed):.0f} ms with every "
            f"sandbox changed, {statistics.median(same):.0f} ms with none"
        )
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sandboxes", type=int, default=1000)
    parser.add_argument("--viewers", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="simple-dashboard-bench-") as tmp:
        data = Path(tmp)
        url = f"sqlite:///{data / 'simple.db'}"
        port = free_port()
        argv = [sys.executable, "-c", SERVER, str(data), url, str(port)]
        with served(argv, port) as base:
            engine = create_engine(url)
            try:
                states = ("succeeded", "running", "failed", "running")  # nothing pending
                seed_run(engine, RUN_ID, args.sandboxes, states=states)
                with httpx.Client(base_url=base, timeout=60) as http:
                    page_s, page_bytes = timed_get(http, f"/runs/{RUN_ID}", args.rounds * 4)
                    json_s, json_bytes = timed_get(http, f"/v1/runs/{RUN_ID}", args.rounds * 4)
                print(
                    f"render  {args.sandboxes} sandboxes: page {page_s * 1000:.0f} ms "
                    f"({page_bytes / 1024:.0f} KiB) vs JSON API {json_s * 1000:.0f} ms "
                    f"({json_bytes / 1024:.0f} KiB): x{page_s / json_s:.2f}"
                )
                browser_figures(base, args.rounds)
                one, many, size = [], [], 0
                for n in range(args.rounds):
                    one.append(fan_out_round(base, engine, 1, 2 * n + 10)[0])
                    latency, size = fan_out_round(base, engine, args.viewers, 2 * n + 11)
                    many.append(latency)
                one_s, many_s = statistics.median(one), statistics.median(many)
                print(
                    f"fan-out one change to {args.viewers} viewers: {many_s * 1000:.0f} ms "
                    f"vs 1 viewer {one_s * 1000:.0f} ms: x{many_s / one_s:.2f} "
                    f"(a `run` message is {size / 1024:.0f} KiB)"
                )
            finally:
                engine.dispose()
    print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    verdict = "OK" if page_s < TARGET_RENDER_S else "MISS"
    print(
        f"bench-dashboard: run page of {args.sandboxes} sandboxes rendered in "
        f"{page_s * 1000:.0f} ms (target < {TARGET_RENDER_S * 1000:.0f} ms) : {verdict}"
    )


if __name__ == "__main__":
    main()
