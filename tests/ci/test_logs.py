"""SIMPLE_LOG_FORMAT=json: one JSON object per line, with the ids, and never a token."""

from __future__ import annotations

import io
import json
import logging
import re

import httpx

from controller.logs import JsonFormatter, RedactingFormatter, log_context, redact
from tests.ci.conftest import ServeFactory


def test_redact_hides_tokens_and_signatures() -> None:
    line = ('Authorization: Bearer abc.DEF-123 PUT /v1/sandboxes/s/snapshot?attempt=1&'
            'signature=0f0f0f0f&x=1 {"token": "tok-1"} SIMPLE_SANDBOX_TOKEN=tok-2 '
            "X-Amz-Signature=deadbeef&X-Amz-Credential=AKIA/2026 api_token: tok-3")
    clean = redact(line)
    for secret in ("abc.DEF-123", "0f0f0f0f", "tok-1", "tok-2", "deadbeef", "AKIA", "tok-3"):
        assert secret not in clean, clean
    assert clean.count("[redacted]") == 7
    assert "attempt=1&" in clean and "x=1" in clean, "what is not secret stays"


def _record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("controller.test", logging.INFO, __file__, 1, message, args, None)
    record.__dict__.update(extra)
    return record


def test_json_lines_carry_the_bound_ids() -> None:
    formatter = JsonFormatter()
    with log_context(run_id="run-1", sandbox_id="sbx-1", attempt=2):
        with log_context(request_id="req-1"):
            entry = json.loads(formatter.format(_record("ended %s", "Bearer s3cret")))
        outer = json.loads(formatter.format(_record("x", sandbox_id="sbx-other")))
    assert entry["message"] == "ended Bearer [redacted]"
    assert (entry["run_id"], entry["sandbox_id"], entry["attempt"], entry["request_id"]) == (
        "run-1", "sbx-1", 2, "req-1")
    assert (entry["level"], entry["logger"]) == ("INFO", "controller.test")
    assert "request_id" not in outer and outer["sandbox_id"] == "sbx-other"
    assert "run_id" not in json.loads(formatter.format(_record("outside"))), "unbound again"
    text = RedactingFormatter("%(message)s").format(_record("token=abc"))
    assert text == "token=[redacted]"


def test_a_served_controller_logs_json_without_tokens(serve: ServeFactory) -> None:
    served = serve(SIMPLE_LOG_FORMAT="json")
    result = served.simplectl(*served.remote("run", "ci_token", "ci_ok", "--json"))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    run_id = report["run_id"]
    [sandbox_id] = [s["sandbox_id"] for s in report["sandboxes"] if s["template_id"] == "ci_token"]
    logs = served.simplectl(*served.remote("logs", sandbox_id))
    sandbox_token = re.search(r"^SANDBOX_TOKEN=(\S+)$", logs.stdout, re.M)
    assert sandbox_token, logs.stdout
    response = httpx.get(f"{served.url}/v1/runs/{run_id}",
                         headers={**served.headers, "X-Request-ID": "req-from-ci-42"}, timeout=10)
    assert response.headers["x-request-id"] == "req-from-ci-42"
    served.process.terminate()
    served.process.wait(timeout=30)

    lines = [line for line in served.log().splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"time", "level", "logger", "message"} <= set(e) for e in entries)
    ended = [e for e in entries if re.match(r"sandbox \S+ ended ", e["message"])]
    assert ended and all(e["run_id"] == run_id and e["attempt"] == 1 for e in ended), ended
    assert {e["sandbox_id"] for e in ended} >= {sandbox_id}
    access = [e for e in entries if e.get("request_id") == "req-from-ci-42"]
    assert access and access[0]["run_id"] == run_id, "the access line has the request's ids"
    assert any(e.get("request_id") and "/events" in e["message"] for e in entries)
    log = served.log()
    for secret in (*served.tokens, sandbox_token.group(1)):
        assert secret not in log, "a token is in the server's log"


def test_text_format_is_redacted_too() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(RedactingFormatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("controller.test.text")
    logger.addHandler(handler)
    try:
        logger.warning("upload to %s failed", "http://h/x?signature=abcdef")
    finally:
        logger.removeHandler(handler)
    assert stream.getvalue() == "WARNING upload to http://h/x?signature=[redacted] failed\n"
