"""Issue 25, finding 9: tokens on command lines.

compose.yaml's header, docs/docker.md and docs/ci.md recommended `--token "$(…)"`, which
every local user (process sandboxes included) reads in `/proc/<pid>/cmdline`. Now the
docs give the token as SIMPLE_TOKEN or a file (`--token-file`, SIMPLE_TOKEN_FILE), and
`--token` still works but warns on stderr.
"""

from __future__ import annotations

import re
from pathlib import Path

from controller.cli.common import TOKEN_ON_COMMAND_LINE
from tests.ci.conftest import Served

ROOT = Path(__file__).resolve().parents[2]
# --token "$(…)", --token $SIMPLE_TOKEN, curl -H "Authorization: Bearer $SIMPLE_TOKEN"
TOKEN_ARGUMENT = re.compile(r"--token[ =]+[\"']?\$|-H [\"']Authorization: Bearer \$")


def test_no_doc_puts_a_token_on_a_command_line() -> None:
    files = [ROOT / "README.md", ROOT / "compose.yaml", *sorted((ROOT / "docs").rglob("*.md")),
             *sorted((ROOT / "docs" / "examples").glob("*.yml")),
             ROOT / "charts" / "simple" / "templates" / "NOTES.txt"]
    found = [f"{path.relative_to(ROOT)}:{number}"
             for path in files
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if TOKEN_ARGUMENT.search(line)]
    assert found == []


def test_the_token_from_a_file_or_the_environment_and_a_warning_for_token(
    served: Served, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(served.token + "\n")
    token_file.chmod(0o600)
    from_file = served.simplectl("--server", served.url, "--token-file", str(token_file),
                                 "status")
    assert from_file.returncode == 0, from_file.stderr
    assert TOKEN_ON_COMMAND_LINE not in from_file.stderr
    from_env = served.simplectl("status", "--server", served.url,
                                env={"SIMPLE_TOKEN_FILE": str(token_file)})
    assert from_env.returncode == 0, from_env.stderr
    quiet = served.simplectl("status", "--server", served.url,
                             env={"SIMPLE_TOKEN": served.token})
    assert quiet.returncode == 0 and TOKEN_ON_COMMAND_LINE not in quiet.stderr
    warned = served.simplectl("status", "--server", served.url, "--token", served.token)
    assert warned.returncode == 0, warned.stderr
    assert TOKEN_ON_COMMAND_LINE in warned.stderr
    empty = tmp_path / "empty"
    empty.write_text("")
    refused = served.simplectl("--server", served.url, "--token-file", str(empty), "status")
    assert refused.returncode == 2 and "is empty" in refused.stderr
