"""The CI examples and docs keep their promises: valid YAML, reports published, and every
`simplectl` command line in them uses only subcommands and options simplectl has.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import typer
import yaml

from controller.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
GITHUB = ROOT / "docs" / "examples" / "github-actions.yml"
GITLAB = ROOT / "docs" / "examples" / "gitlab-ci.yml"
GUIDE = ROOT / "docs" / "ci.md"
README = ROOT / "README.md"
COMMAND = re.compile(r"\bsimplectl\s+([^|;&)\n>#`]*)")


def _commands() -> dict[str, Any]:
    """simplectl's subcommands, from the typer app itself (typer's click objects)."""
    commands: dict[str, Any] = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    return commands


def _options(command: Any) -> set[str]:
    names = {"--help"}
    for param in command.params:
        names.update(o for o in [*param.opts, *param.secondary_opts] if o.startswith("-"))
    return names


def _envvars() -> set[str]:
    found: set[str] = set()
    for command in _commands().values():
        for param in command.params:
            envvar = param.envvar
            found.update([envvar] if isinstance(envvar, str) else envvar or [])
    return found


def _command_lines(shell: str) -> list[list[str]]:
    """Every `simplectl ...` invocation in a shell snippet, as argv after `simplectl`."""
    joined = re.sub(r"\\\n\s*", " ", shell)
    joined = re.sub(r"\$\{\{[^}]*\}\}", "EXPR", joined)  # GitHub expressions
    return [shlex.split(match.group(1)) for match in COMMAND.finditer(joined)]


def _global_options() -> set[str]:
    names: set[str] = set()
    for param in typer.main.get_command(app).params:
        names.update(o for o in [*param.opts, *param.secondary_opts] if o.startswith("-"))
    return names


def _check(argv: list[str], where: str) -> None:
    commands = _commands()
    flags = {"--require-server", "--version"}  # global options that take no value
    if argv == ["--version"]:
        return
    while argv and argv[0] in _global_options():
        argv = argv[1:] if argv[0] in flags else argv[2:]
    assert argv and argv[0] in commands, f"{where}: unknown subcommand in simplectl {argv}"
    known = _options(commands[argv[0]])
    used = {token.split("=", 1)[0] for token in argv[1:] if token.startswith("-")}
    assert used <= known, f"{where}: simplectl {argv[0]} has no {sorted(used - known)}"


def _github_shell(workflow: dict[str, Any]) -> list[str]:
    return [
        str(step["run"])
        for job in workflow["jobs"].values()
        for step in job["steps"]
        if "run" in step
    ]


def _gitlab_shell(pipeline: dict[str, Any]) -> list[str]:
    return [
        str(line)
        for job in pipeline.values()
        if isinstance(job, dict)
        for key in ("before_script", "script", "after_script")
        for line in job.get(key, [])
    ]


def _markdown_shell(text: str) -> list[str]:
    blocks = re.findall(r"```(?:sh|bash)?\n(.*?)```", text, re.S)
    spans = [" ".join(s.split()) for s in re.findall(r"`([^`\n]*(?:\n[^`\n]*)?)`", text)]
    return blocks + [s for s in spans if s.startswith("simplectl ")]


def test_the_github_workflow_runs_the_suite_and_publishes_the_reports() -> None:
    workflow = yaml.safe_load(GITHUB.read_text())
    assert workflow.get("on", workflow.get(True)), "triggers"  # YAML 1.1 reads `on` as True
    (job,) = workflow["jobs"].values()
    assert job["env"]["SIMPLE_SERVER"] == "${{ secrets.SIMPLE_SERVER }}"
    assert job["env"]["SIMPLE_TOKEN"] == "${{ secrets.SIMPLE_TOKEN }}"
    assert "github.run_id" in job["env"]["SIMPLE_IDEMPOTENCY_KEY"]
    steps = job["steps"]
    run = next(s for s in steps if "simplectl --require-server run" in s.get("run", ""))
    (argv,) = _command_lines(run["run"])
    assert {"--wait", "--junit", "--markdown"} <= set(argv)
    assert argv[argv.index("--junit") + 1] == "report.xml"
    assert argv[argv.index("--markdown") + 1] == "summary.md"
    assert "$GITHUB_OUTPUT" in run["run"], "the exit code is kept for the last step"
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()" and "report.xml" in upload["with"]["path"]
    summary = next(s for s in steps if "$GITHUB_STEP_SUMMARY" in s.get("run", ""))
    assert summary["if"] == "always()" and "summary.md" in summary["run"]
    assert any(s.get("run", "").rstrip().endswith('exit "$CODE"') for s in steps), "fails the job"
    assert any("pip install" in s.get("run", "") for s in steps)


def test_the_gitlab_job_publishes_the_junit_report() -> None:
    pipeline = yaml.safe_load(GITLAB.read_text())
    job = pipeline["simple"]
    assert job["artifacts"]["reports"]["junit"] == "report.xml"
    assert job["artifacts"]["when"] == "always"
    assert any("pip install" in line for line in job["before_script"])
    (argv,) = [a for line in job["script"] for a in _command_lines(line)]
    assert {"--wait", "--junit", "--markdown"} <= set(argv)
    assert argv[argv.index("--junit") + 1] == "report.xml"
    assert "CI_PIPELINE_ID" in job["variables"]["SIMPLE_IDEMPOTENCY_KEY"]


def test_every_simplectl_command_line_uses_real_options() -> None:
    readme = README.read_text()
    ci_section = readme.split("## Use from CI", 1)[1].split("\n## ", 1)[0]
    sources = {
        GITHUB.name: _github_shell(yaml.safe_load(GITHUB.read_text())),
        GITLAB.name: _gitlab_shell(yaml.safe_load(GITLAB.read_text())),
        GUIDE.name: _markdown_shell(GUIDE.read_text()),
        "README.md#use-from-ci": _markdown_shell(ci_section),
    }
    checked = 0
    for where, snippets in sources.items():
        for snippet in snippets:
            for argv in _command_lines(snippet):
                _check(argv, where)
                checked += 1
    assert checked >= 10, checked


def test_the_environment_the_examples_set_is_what_simplectl_reads() -> None:
    envvars = _envvars()
    assert {"SIMPLE_SERVER", "SIMPLE_TOKEN", "SIMPLE_IDEMPOTENCY_KEY"} <= envvars
    workflow = yaml.safe_load(GITHUB.read_text())
    pipeline = yaml.safe_load(GITLAB.read_text())
    named = {
        *(k for job in workflow["jobs"].values() for k in job.get("env", {})),
        *(k for job in pipeline.values() if isinstance(job, dict) for k in job["variables"]),
    }
    simple = {name for name in named if name.startswith("SIMPLE_")}
    assert simple and simple <= envvars, simple - envvars


def test_the_readme_points_at_the_guide_and_the_examples() -> None:
    readme = README.read_text()
    assert readme.index("## Use from CI") < readme.index("## Settings")
    section = readme.split("## Use from CI", 1)[1].split("\n## ", 1)[0]
    for path in ("docs/ci.md", "docs/examples/github-actions.yml", "docs/examples/gitlab-ci.yml"):
        assert f"]({path})" in section and (ROOT / path).exists(), path
    guide = GUIDE.read_text()
    for must in ("SIMPLE_API_TOKENS", "--idempotency-key", "| `4` |", "?format=junit",
                 "Last-Event-ID", "curl"):
        assert must in guide, must


def test_pipelines_require_the_server_keep_tokens_off_command_lines_and_skip_forks() -> None:
    workflow = yaml.safe_load(GITHUB.read_text())
    pipeline = yaml.safe_load(GITLAB.read_text())
    shells = {
        GITHUB.name: _github_shell(workflow),
        GITLAB.name: _gitlab_shell(pipeline),
        GUIDE.name: re.findall(r"```sh\n(.*?)```", GUIDE.read_text(), re.S),
    }
    for where, snippets in shells.items():
        # (a bare `simplectl run` is prose in a comment)
        runs = [a for s in snippets for a in _command_lines(s) if "run" in a and len(a) > 1]
        assert runs and all("--require-server" in argv for argv in runs), where
        assert not any("--token" in argv for s in snippets for argv in _command_lines(s)), where
    (job,) = workflow["jobs"].values()
    assert "head.repo.full_name == github.repository" in job["if"], "fork pull requests skip"
    rule = pipeline["simple"]["rules"][0]
    assert "$SIMPLE_SERVER" in rule["if"] and rule["when"] == "never"
    guide = GUIDE.read_text()
    assert "## Pull requests from forks" in guide and "pull_request_target" in guide


def test_the_exit_codes_tables_list_every_code() -> None:
    from controller.cli.exits import Exit

    for text in (README.read_text(), GUIDE.read_text()):
        for code in Exit:
            assert f"| `{int(code)}` |" in text, code
        assert "`130`, `143`" in text
