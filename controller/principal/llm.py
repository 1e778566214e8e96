"""A small client of an OpenAI-compatible chat-completions endpoint (optional).

Set `SIMPLE_LLM_BASE_URL` (e.g. `http://127.0.0.1:11434/v1`), `SIMPLE_LLM_MODEL`
and, if the server needs one, `SIMPLE_LLM_API_KEY`. One call, a timeout, a cap on
what is read back; any failure is an `LLMError` and the caller falls back to the
deterministic principal. The model only proposes: see `assistant`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

MAX_RESPONSE_BYTES = 256 * 1024
MAX_TOOL_CALLS = 4

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties},
        },
    }
    for name, description, properties in (
        ("plan", "Plan a run without starting it.", {
            "query": {"type": "string", "description": "the request in words"},
            "suites": {"type": "array", "items": {"type": "string"}},
            "templates": {"type": "array", "items": {"type": "string"}},
            "budget_usd": {"type": "number"},
            "priority": {"type": "string", "enum": ["speed", "cost", "balanced"]},
            "max_parallel": {"type": "integer"},
        }),
        ("start", "Plan and start a run (the user may be asked to confirm).", {
            "query": {"type": "string"},
            "suites": {"type": "array", "items": {"type": "string"}},
            "templates": {"type": "array", "items": {"type": "string"}},
            "budget_usd": {"type": "number"},
            "priority": {"type": "string", "enum": ["speed", "cost", "balanced"]},
            "max_parallel": {"type": "integer"},
        }),
        ("status", "Answer a question about runs: progress, failures, cost, what runs.", {
            "question": {"type": "string", "description": "the question in words"},
        }),
        ("cancel", "Cancel a run (the user is asked to confirm).", {
            "run_id": {"type": "string"},
        }),
    )
]


class LLMError(Exception):
    """The model could not be asked, or answered something unreadable."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Completion:
    content: str
    tool_calls: tuple[ToolCall, ...]


class LLMClient:
    """POST {base_url}/chat/completions with tools; one attempt, bounded."""

    def __init__(self, base_url: str, model: str, api_key: str | None, timeout_s: float) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = httpx.Timeout(timeout_s)

    def complete(self, messages: list[dict[str, str]]) -> Completion:
        body = {"model": self.model, "messages": messages, "tools": TOOLS, "tool_choice": "auto"}
        try:
            with httpx.Client(timeout=self.timeout, follow_redirects=False) as http, http.stream(
                "POST", self.url, json=body, headers=self.headers
            ) as response:
                if response.status_code != 200:
                    raise LLMError(f"{self.url} answered HTTP {response.status_code}")
                data = _read_json(response)
        except httpx.HTTPError as e:
            raise LLMError(f"{self.url}: {type(e).__name__}: {e}") from e
        return _completion(data)


def _read_json(response: httpx.Response) -> Any:
    chunks, size = [], 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            raise LLMError(f"the answer is over {MAX_RESPONSE_BYTES} bytes")
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except ValueError as e:
        raise LLMError(f"the answer is not JSON: {e}") from e


def _completion(data: Any) -> Completion:
    try:
        message = data["choices"][0]["message"]
        content = message.get("content") or ""
        calls = []
        for call in (message.get("tool_calls") or [])[:MAX_TOOL_CALLS]:
            arguments = call["function"].get("arguments") or "{}"
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
            if not isinstance(parsed, dict):
                raise ValueError("tool arguments are not an object")
            calls.append(ToolCall(str(call["function"]["name"]), parsed))
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise LLMError(f"unexpected answer shape: {e}") from e
    return Completion(str(content)[:8000], tuple(calls))
