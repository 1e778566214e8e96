"""Credentials as files (SIMPLE_SECRETS_DIR): how a sandbox on Kubernetes gets its token
and signed URLs from its mounted Secret, read by the contract's own reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_image.contract import (
    MAX_CREDENTIAL_BYTES,
    ContractError,
    SandboxEnv,
    with_credential_files,
)

PLAIN = {"SIMPLE_SANDBOX_ID": "sbx-1", "SIMPLE_RUN_ID": "run-1", "SIMPLE_TEMPLATE_ID": "t",
         "SIMPLE_ATTEMPT": "2", "SIMPLE_TEMPLATE_CONFIG": "{}", "SIMPLE_SEED": "7",
         "SIMPLE_CONTROLLER_URL": "http://ctl:8080"}


def mounted(directory: Path, **files: str) -> dict[str, str]:
    directory.mkdir()
    for name, value in files.items():
        (directory / name).write_text(value)
    return {**PLAIN, "SIMPLE_SECRETS_DIR": str(directory)}


def test_the_token_and_urls_come_from_the_files(tmp_path: Path) -> None:
    env = mounted(tmp_path / "c", SIMPLE_SANDBOX_TOKEN="tok\n",
                  SIMPLE_SNAPSHOT_URL="http://s3/x?sig=1", SIMPLE_INPUT_URL="http://ctl/in")
    read = SandboxEnv.from_environ(env)
    assert (read.sandbox_token, read.snapshot_url, read.input_url) == (
        "tok", "http://s3/x?sig=1", "http://ctl/in")
    assert read.items_url is None and read.resume_url is None  # no file: does not apply


def test_without_the_files_the_contract_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match="SIMPLE_SANDBOX_TOKEN, SIMPLE_SNAPSHOT_URL"):
        SandboxEnv.from_environ(mounted(tmp_path / "c"))


def test_the_environment_wins_and_other_files_are_not_read(tmp_path: Path) -> None:
    env = mounted(tmp_path / "c", SIMPLE_SANDBOX_TOKEN="from-file", SIMPLE_SEED="99")
    merged = with_credential_files({**env, "SIMPLE_SANDBOX_TOKEN": "from-env"})
    assert merged["SIMPLE_SANDBOX_TOKEN"] == "from-env"
    assert merged["SIMPLE_SEED"] == "7"  # only credentials may come as files


def test_an_oversized_credential_file_is_refused(tmp_path: Path) -> None:
    env = mounted(tmp_path / "c", SIMPLE_SANDBOX_TOKEN="x" * (MAX_CREDENTIAL_BYTES + 1))
    with pytest.raises(ContractError, match="over"):
        with_credential_files(env)
