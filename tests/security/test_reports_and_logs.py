"""Finding 8: sandbox text reached the Markdown report raw; upload signatures reached
the access log.

The Markdown is rendered here with a GFM-like renderer (tables, bare-URL links on):
nothing a sandbox wrote may become HTML, a link or an image.
"""

from __future__ import annotations

import re

import pytest
from markdown_it import MarkdownIt

from controller.results.report_formats import report_markdown
from tests.ci.conftest import Served, ServeFactory

HOSTILE = (
    '<img src=x onerror="alert(1)"> [click](https://evil.example/a) '
    "![pixel](https://evil.example/p.png) https://evil.example/bare www.evil.example "
    "<https://evil.example/auto> **bold** `tick`` | pipe"
)


def report(error: str) -> dict[str, object]:
    sandbox = {"sandbox_id": "sb-1", "template_id": "board_meeting", "status": "failed",
               "attempts": 1, "exit_code": 1, "duration_s": 1.0, "cost_usd": 0.0,
               "error": error, "stage": 0}
    totals = {"sandboxes": 1, "succeeded": 0, "failed": 1, "cancelled": 0, "skipped": 0,
              "cost_usd": 0.0, "tokens_used": 0, "llm_calls": 0, "entities_created": 0,
              "timepoints_created": 0, "mechanisms_covered": [], "mechanism_coverage_pct": 0.0}
    return {"run_id": "run-1", "status": "failed", "sandboxes": [sandbox], "totals": totals}


def render(markdown: str) -> str:
    renderer = MarkdownIt("commonmark", {"linkify": True, "html": True})
    return str(renderer.enable(["table", "linkify", "strikethrough"]).render(markdown))


def test_sandbox_text_renders_as_text_in_the_markdown_report() -> None:
    html = render(report_markdown(report(HOSTILE)))
    outside_code = re.sub(r"<code>.*?</code>", "", html, flags=re.DOTALL)
    assert "<a " not in html and "<img" not in html and "<strong>bold" not in html, html
    assert "evil" not in outside_code, html
    assert html.count("<tr>") == 2  # the pipe did not split the row: header and one row
    assert "&lt;img" in html  # the text is still there, shown as text


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_upload_signatures_and_tokens_stay_out_of_the_logs(
    serve: ServeFactory, log_format: str
) -> None:
    served: Served = serve(SIMPLE_LOG_FORMAT=log_format)
    with served.client() as http:
        body = {"templates": ["ci_ok", "ci_token"]}  # ci_ok uploads through the controller
        run_id = http.post("/v1/runs", json=body).json()["run_id"]
    finished = served.wait_run(run_id, timeout_s=60)
    printer = next(s for s in finished["sandboxes"] if s["template_id"] == "ci_token")
    with served.client() as http:
        logs = http.get(f"/v1/sandboxes/{printer['sandbox_id']}/logs").text
    token = re.search(r"SANDBOX_TOKEN=(\S+)", logs)
    assert token, logs
    controller_log = served.log()
    assert "/snapshot?attempt=" in controller_log  # the upload was logged...
    assert not re.search(r"signature=[0-9a-f]{64}", controller_log)  # ...without its signature
    assert token.group(1) not in controller_log
    assert served.token not in controller_log
