"""Issue 25, finding 5: transfers with the local store.

Measured on main 738f0bb: `PUT …/snapshot` buffered up to 64 MiB per request in memory,
then wrote it with a blocking call inside the async route; 12 parallel 48 MB uploads from
one sandbox were all accepted, one after another; input downloads read whole objects.
Now uploads are spooled to a temporary file in worker threads, downloads streamed, and
one attempt has at most one upload and one download under way (429 beyond).
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from controller.api.transfers import TransferSlots, send
from controller.errors import BusyError
from tests.ci.conftest import CATALOG, GARBLED_SCRIPT, TOKEN_SCRIPT, Served, ServeFactory
from tests.e2e_helpers import wait_for
from tests.security.test_bodies import vm_hwm_kib

MIB = 1 << 20
UPLOADS = 12
UPLOAD_BYTES = 48 * MIB

# Says it is ready, waits for the test's go, then PUTs the input file (streamed from disk,
# so the sandboxes themselves stay small) to SIMPLE_SNAPSHOT_URL, and waits for the test's
# done (what is measured is the transfers, not the aggregation after the exits).
STREAM_UPLOAD_SCRIPT = """
import os, time, urllib.error, urllib.request
base = os.path.splitext(__file__)[0]
open(f"{base}.ready-{os.environ['SIMPLE_SANDBOX_ID']}", "w").close()
while not os.path.exists(base + ".go"):
    time.sleep(0.02)
path = base + ".input"
with open(path, "rb") as body:
    request = urllib.request.Request(
        os.environ["SIMPLE_SNAPSHOT_URL"], data=body, method="PUT",
        headers={"Content-Length": str(os.path.getsize(path)),
                 "Content-Type": "application/octet-stream"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            print("UPLOADED", response.status, flush=True)
    except urllib.error.HTTPError as e:
        print("REFUSED", e.code, e.read()[:300].decode(), flush=True)
while not os.path.exists(base + ".done"):  # the test measures, then lets them end
    time.sleep(0.02)
"""

# Starts one upload and sends half its body; meanwhile PUTs again until refused (or 20 s);
# then finishes the first. The first may lose the race to take the attempt's slot (its
# route checks its signature in a worker thread meanwhile): answered at once, it starts
# again.
TWO_UPLOADS_SCRIPT = """
import http.client, os, select, time, urllib.error, urllib.parse, urllib.request
url = os.environ["SIMPLE_SNAPSHOT_URL"]
parts = urllib.parse.urlsplit(url)
size = 4 << 20

def start_first():
    first = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    first.putrequest("PUT", parts.path + "?" + parts.query)
    first.putheader("Content-Length", str(size))
    first.putheader("Content-Type", "application/octet-stream")
    first.endheaders()
    first.send(b"\\0" * (size // 2))
    return first

first = start_first()
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    if select.select([first.sock], [], [], 0)[0]:  # answered before its body: it lost
        try:
            print("RESTARTED after", first.getresponse().status, flush=True)
        except OSError as e:
            print("RESTARTED after", e, flush=True)
        first.close()
        first = start_first()
        continue
    request = urllib.request.Request(url, data=b"\\0" * 1024, method="PUT")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, text = response.status, ""
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    print("SECOND", status, text[:300], flush=True)
    if status == 429:
        break
    time.sleep(0.05)
first.send(b"\\0" * (size - size // 2))
print("FIRST", first.getresponse().status, flush=True)
"""

TRANSFER_CATALOG = """
  - id: stream_upload
    category: hostile
    description: waits for the test's go, then PUTs a big file as its snapshot
    estimate: {cost_usd: [0.0, 0.1], runtime_s: [1, 2]}
    timeout_s: 300
    command: [python, {stream_upload_script}]
  - id: two_uploads
    category: hostile
    description: two uploads of its snapshot at once
    estimate: {cost_usd: [0.0, 0.1], runtime_s: [1, 2]}
    timeout_s: 120
    command: [python, {two_uploads_script}]
"""


@pytest.fixture
def ci_catalog(tmp_path: Path, catalog_dir: Callable[..., Path]) -> Path:
    """The `ci` catalog plus the uploading templates (overrides the conftest's)."""
    text = CATALOG.replace("suites:", TRANSFER_CATALOG.lstrip("\n") + "suites:", 1)
    scripts = {"token_script": TOKEN_SCRIPT, "garbled_script": GARBLED_SCRIPT,
               "stream_upload_script": STREAM_UPLOAD_SCRIPT,
               "two_uploads_script": TWO_UPLOADS_SCRIPT}
    for name, source in scripts.items():
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        text = text.replace("{" + name + "}", json.dumps(str(path)))
    return catalog_dir(text, "ci.yaml")


def start(served: Served, template: str) -> str:
    with served.client() as http:
        response = http.post("/v1/runs", json={"templates": [template]})
    assert response.status_code in (200, 201, 202), response.text
    return str(response.json()["run_id"])


def logs_of(served: Served, run_id: str) -> str:
    with served.client() as http:
        sandbox = http.get(f"/v1/runs/{run_id}").json()["sandboxes"][0]["sandbox_id"]
        return http.get(f"/v1/sandboxes/{sandbox}/logs").text


@pytest.mark.slow
def test_twelve_parallel_48_mb_uploads_cost_under_100_mb(
    serve: ServeFactory, tmp_path: Path
) -> None:
    served = serve()
    script = tmp_path / "stream_upload_script.py"
    with open(script.with_suffix(".input"), "wb") as handle:
        handle.truncate(UPLOAD_BYTES)
    runs = [start(served, "stream_upload") for _ in range(UPLOADS)]
    wait_for(lambda: len(list(tmp_path.glob("stream_upload_script.ready-*"))) == UPLOADS,
             timeout_s=120, what="every uploader ready")
    with served.client() as http:  # the routes warm before the baseline
        http.get("/v1/runs")
    before_kib = vm_hwm_kib(served.process.pid)
    script.with_suffix(".go").touch()

    def answered() -> list[str] | None:
        answers = [logs_of(served, run_id) for run_id in runs]
        return answers if all("UPLOADED" in a or "REFUSED" in a for a in answers) else None

    answers = wait_for(answered, timeout_s=180, what="every upload answered")
    grown_mib = (vm_hwm_kib(served.process.pid) - before_kib) / 1024
    script.with_suffix(".done").touch()
    for run_id in runs:
        served.wait_run(run_id, timeout_s=180)
    after_mib = (vm_hwm_kib(served.process.pid) - before_kib) / 1024
    print(f"12 parallel 48 MiB uploads: controller peak +{grown_mib:.1f} MiB "
          f"(+{after_mib:.1f} MiB once their snapshots were read)")
    assert all("UPLOADED 201" in text for text in answers), answers
    assert grown_mib < 100, f"the controller's peak memory grew by {grown_mib:.0f} MiB"
    # and reading the twelve snapshots after the exits streams them too
    assert after_mib < 100, f"reading the snapshots raised the peak by {after_mib:.0f} MiB"
    stored = list((served.data_dir / "store" / "snapshots").rglob("attempt-1.sqlite"))
    assert [p.stat().st_size for p in stored] == [UPLOAD_BYTES] * UPLOADS
    assert not list((served.data_dir / "store").rglob(".upload-*"))  # no spool left behind


def test_a_second_concurrent_upload_of_one_attempt_gets_429(serve: ServeFactory) -> None:
    served = serve()
    run_id = start(served, "two_uploads")
    served.wait_run(run_id, timeout_s=120)
    text = logs_of(served, run_id)
    assert "SECOND 429" in text, text[-1500:]
    assert "already has an upload under way; one upload at a time" in text
    assert "FIRST 201" in text, text


def test_one_download_per_attempt_and_the_slot_comes_back() -> None:
    slots = TransferSlots()
    stream = send(iter([b"a", b"b"]), slots.take("sbx-1", 1, "download"))
    with pytest.raises(BusyError, match="already has a download under way; one download at a time"):
        slots.take("sbx-1", 1, "download")
    slots.take("sbx-1", 1, "upload").release()  # each direction has its own slot
    slots.take("sbx-1", 2, "download").release()  # and each attempt
    assert b"".join(stream) == b"ab"
    assert slots.busy() == 0  # read to its end: given back
    dropped = send(iter([b"never read"]), slots.take("sbx-1", 1, "download"))
    del dropped  # a client that went away before the first chunk
    slots.take("sbx-1", 1, "download").release()
