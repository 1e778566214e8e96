"""The report as JUnit XML (one testcase per sandbox, or per item of a batch sandbox) and
as Markdown. Pure.

Errors come from sandboxes (untrusted text); characters XML 1.0 cannot hold (ANSI
escapes, NUL, other controls) are written as `\\xNN`, so CI tools can parse the file.
"""

from __future__ import annotations

import re
from typing import Any
from xml.etree import ElementTree as ET

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(value: object) -> str:
    """`value` as text that XML 1.0 (and a Markdown table) can hold."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


def report_junit(report: dict[str, Any], items: list[dict[str, Any]] | None = None) -> str:
    """JUnit XML; a batch sandbox that ran items has a testcase per item instead of one."""
    totals = report["totals"]
    suite = ET.Element(
        "testsuite",
        {
            "name": f"simple.{report['run_id']}",
            "time": f"{sum(s['duration_s'] or 0 for s in report['sandboxes']):.3f}",
        },
    )
    props = ET.SubElement(suite, "properties")
    for name in ("cost_usd", "tokens_used", "llm_calls", "mechanism_coverage_pct"):
        ET.SubElement(props, "property", {"name": name, "value": str(totals[name])})
    # The chain's last hash pins the result in the CI log (`simplectl verify RUN`).
    ET.SubElement(
        props, "property", {"name": "ledger_head", "value": str(report.get("ledger_head") or "")}
    )
    if report.get("rerun_of"):  # the lineage: this run reran (what failed in) that one
        ET.SubElement(props, "property", {"name": "rerun_of", "value": report["rerun_of"]})
    # What started the run (commit, ref, pipeline URL, --label): CI tools show properties.
    for key, value in sorted((report.get("labels") or {}).items()):
        ET.SubElement(props, "property", {"name": f"label.{_clean(key)}", "value": _clean(value)})
    by_sandbox: dict[str, list[dict[str, Any]]] = {}
    for item in items or []:
        by_sandbox.setdefault(item["sandbox_id"], []).append(item)
    for sandbox in report["sandboxes"]:
        own = by_sandbox.get(sandbox["sandbox_id"], [])
        for item in own:
            _item_case(suite, report["run_id"], sandbox, item)
        if own and sandbox["status"] == "succeeded":
            continue
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "classname": f"simple.{report['run_id']}",
                "name": sandbox["template_id"],
                "time": f"{sandbox['duration_s'] or 0:.3f}",
            },
        )
        case_props = ET.SubElement(case, "properties")
        for name in ("sandbox_id", "stage", "cost_usd", "duration_s", "attempts", "exit_code"):
            ET.SubElement(case_props, "property", {"name": name, "value": str(sandbox.get(name))})
        status = sandbox["status"]
        error = _clean(sandbox["error"] or "")
        if status == "skipped":
            ET.SubElement(case, "skipped", {"message": error or "skipped"})
        elif status != "succeeded":
            failure = ET.SubElement(
                case,
                "failure",
                {
                    "type": status,
                    "message": f"{status}: {error} (exit code {sandbox['exit_code']})",
                },
            )
            failure.text = (
                f"sandbox {sandbox['sandbox_id']}\nexit code {sandbox['exit_code']}\n{error}"
            )
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    suites = ET.Element("testsuites")
    suites.append(suite)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _item_case(suite: ET.Element, run_id: str, sandbox: dict[str, Any],
               item: dict[str, Any]) -> None:
    case = ET.SubElement(suite, "testcase", {
        "classname": f"simple.{run_id}.{sandbox['template_id']}",
        "name": _clean(item["item_id"]),
        "time": f"{(item['duration_ms'] or 0) / 1000:.3f}",
    })
    props = ET.SubElement(case, "properties")
    ET.SubElement(props, "property", {"name": "sandbox_id", "value": sandbox["sandbox_id"]})
    if item["outcome"] == "failed":
        reason = _clean(item["reason"] or "failed")
        ET.SubElement(case, "failure", {"type": "failed", "message": reason}).text = reason
    elif item["outcome"] == "errored":
        error = _clean(item["error"] or "error")
        ET.SubElement(case, "error", {"type": "errored", "message": error}).text = error
    elif item["outcome"] == "skipped":
        ET.SubElement(case, "skipped", {"message": "not run"})


def report_markdown(report: dict[str, Any], problems: list[dict[str, Any]] | None = None
                    ) -> str:
    """A summary table; with items, their counts and the failed and errored ones."""
    totals = report["totals"]
    icon = {"succeeded": "✅", "skipped": "⏭️"}
    lines = [
        f"## SIMPLE run `{report['run_id']}`: {report['status']}",
        "",
        f"**{totals['succeeded']}/{totals['sandboxes']} succeeded**, {totals['failed']} failed, "
        f"cost ${totals['cost_usd']:.2f}, {totals['tokens_used']} tokens, "
        f"{totals['llm_calls']} LLM calls, mechanism coverage "
        f"{totals['mechanism_coverage_pct']}%",
        "",
        f"Ledger head: `{report.get('ledger_head') or 'none'}` (check it with "
        f"`simplectl verify {report['run_id']}`)",
        "",
        *([f"Rerun of `{report['rerun_of']}`", ""] if report.get("rerun_of") else []),
        *_labels_line(report.get("labels") or {}),
        "| template | status | attempts | exit | duration (s) | cost ($) | error | stage |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    items = totals.get("items") or {}
    if items.get("total"):
        lines[2] += (f"; items: {items['passed']}/{items['total']} passed, "
                     f"{items['failed']} failed, {items['errored']} errored")
    for s in report["sandboxes"]:
        error = _cell(s["error"] or "")
        lines.append(
            f"| {s['template_id']} | {icon.get(s['status'], '❌')} {s['status']} | "
            f"{s['attempts']} | {s['exit_code'] if s['exit_code'] is not None else ''} | "
            f"{s['duration_s'] if s['duration_s'] is not None else ''} | "
            f"{s['cost_usd'] if s['cost_usd'] is not None else ''} | {error} | "
            f"{s.get('stage', 0)} |"
        )
    if problems:
        lines += ["", "| item | template | outcome | reason or error |",
                  "| --- | --- | --- | --- |"]
        lines += [f"| {_cell(p['item_id'])} | {p['template_id']} | {p['outcome']} | "
                  f"{_cell(p['reason'] or p['error'] or '')} |" for p in problems]
    return "\n".join(lines) + "\n"


def _labels_line(labels: dict[str, str]) -> list[str]:
    """`Labels: `commit=…` · `ref=…``, each a code span (untrusted: nothing renders), or none."""
    if not labels:
        return []
    spans = [_code(f"{key}={value}") for key, value in sorted(labels.items())]
    return ["Labels: " + " · ".join(spans), ""]


def _code(value: str) -> str:
    """Untrusted text as one inline code span, one line."""
    text = _clean(value).replace("\r", " ").replace("\n", " ")
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}"


def _cell(value: str) -> str:
    """Untrusted text as one table cell: a code span, so no Markdown, HTML or link in it
    renders (not even a bare URL); pipes escaped for the table, one line."""
    text = _clean(value).replace("\r", " ").replace("\n", " ")
    if not text.strip():
        return ""
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    escaped = text.replace("|", "\\|")
    return f"{fence} {escaped} {fence}"
