"""The README keeps its promises: every setting listed, the quick start is two commands."""

from __future__ import annotations

import re
from pathlib import Path

from controller.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_every_setting_is_in_the_readme() -> None:
    missing = [
        f"SIMPLE_{name.upper()}"
        for name in Settings.model_fields
        if f"`SIMPLE_{name.upper()}`" not in README
    ]
    assert not missing, f"add these settings to the README's table: {missing}"


def test_quick_start_is_two_commands_and_ci_runs_the_test_one() -> None:
    section = README.split("## Quick start", 1)[1].split("##", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    commands = [line for line in block.group(1).splitlines() if line.strip()]
    assert commands == ["make quick", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_users_copy_of_the_contract_names_every_env_var_and_event_type() -> None:
    from sandbox_image.contract import ENV_NAMES, EventType

    doc = (ROOT / "docs" / "architecture.md").read_text()
    missing = [n for n in ENV_NAMES if f"`{n}`" not in doc]
    missing += [t.value for t in EventType if f"`{t.value}`" not in doc]
    assert not missing, f"docs/architecture.md does not describe: {missing}"


def test_no_hint_points_at_a_file_users_do_not_have() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("controller", "sandbox_image")
        for path in (ROOT / folder).rglob("*.py")
        if "ARCHITECTURE" in path.read_text()
    ]
    assert not offenders, f"point these at docs/architecture.md: {offenders}"
