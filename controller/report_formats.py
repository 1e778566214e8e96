"""The report as JUnit XML (one testcase per sandbox) and as Markdown. Pure.

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


def report_junit(report: dict[str, Any]) -> str:
    totals = report["totals"]
    suite = ET.Element(
        "testsuite",
        {
            "name": f"simple.{report['run_id']}",
            "tests": str(totals["sandboxes"]),
            "failures": str(totals["failed"] + totals["cancelled"]),
            "skipped": str(totals["skipped"]),
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
    for sandbox in report["sandboxes"]:
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
    suites = ET.Element("testsuites")
    suites.append(suite)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def report_markdown(report: dict[str, Any]) -> str:
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
        "| template | status | attempts | exit | duration (s) | cost ($) | error | stage |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in report["sandboxes"]:
        error = _clean(s["error"] or "").replace("|", "\\|").replace("\n", " ")
        lines.append(
            f"| {s['template_id']} | {icon.get(s['status'], '❌')} {s['status']} | "
            f"{s['attempts']} | {s['exit_code'] if s['exit_code'] is not None else ''} | "
            f"{s['duration_s'] if s['duration_s'] is not None else ''} | "
            f"{s['cost_usd'] if s['cost_usd'] is not None else ''} | {error} | "
            f"{s.get('stage', 0)} |"
        )
    return "\n".join(lines) + "\n"
