"""build_container_spec: the hardened container of one sandbox, and Kubernetes quantities."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from controller.backends.base import SandboxSpec
from controller.backends.docker.spec import (
    TMPFS_MOUNTS,
    build_container_spec,
    parse_cpu,
    parse_memory,
)
from controller.errors import InputError
from sandbox_image.contract import (
    ENV_NAMES,
    LABEL_ATTEMPT,
    LABEL_MANAGED_BY,
    LABEL_RUN_ID,
    LABEL_SANDBOX_ID,
    LABEL_TEMPLATE_ID,
)

MakeSpec = Callable[..., SandboxSpec]  # the `make_spec` fixture of conftest.py


def test_names_the_container_after_the_sandbox(make_spec: MakeSpec) -> None:
    spec = make_spec("sbx-name", command=["python", "-c", "print(1)"], image="my/image:1")
    kwargs = build_container_spec(spec)
    assert kwargs["name"] == "sbx-name"
    assert kwargs["image"] == "my/image:1"
    assert kwargs["command"] == ["python", "-c", "print(1)"]
    assert kwargs["detach"] is True
    assert kwargs["auto_remove"] is False


def test_empty_command_keeps_the_image_default(make_spec: MakeSpec) -> None:
    assert build_container_spec(make_spec(command=()))["command"] is None


def test_hardening_is_always_on(make_spec: MakeSpec) -> None:
    kwargs = build_container_spec(make_spec(), user="4242:4242")
    assert kwargs["user"] == "4242:4242"
    assert kwargs["read_only"] is True
    assert kwargs["cap_drop"] == ["ALL"]
    assert kwargs["security_opt"] == ["no-new-privileges:true"]
    assert kwargs["working_dir"] == "/work"
    assert kwargs["init"] is True
    assert kwargs["pids_limit"] == 256
    assert "privileged" not in kwargs
    assert set(kwargs["tmpfs"]) == {"/work", "/tmp"}
    for options in kwargs["tmpfs"].values():
        assert "size=" in options and "mode=1777" in options


def test_tmpfs_mounts_are_copied_not_shared(make_spec: MakeSpec) -> None:
    kwargs = build_container_spec(make_spec())
    kwargs["tmpfs"]["/tmp"] = "changed"
    assert TMPFS_MOUNTS["/tmp"] != "changed"


@pytest.mark.parametrize(
    ("user", "owner"),
    [("10001:10001", ",uid=10001,gid=10001"), ("4242", ",uid=4242"), ("sandbox", "")],
)
def test_work_belongs_to_a_numeric_runtime_user(make_spec: MakeSpec, user: str, owner: str) -> None:
    tmpfs = build_container_spec(make_spec(), user=user)["tmpfs"]
    assert tmpfs["/work"] == TMPFS_MOUNTS["/work"] + owner
    assert tmpfs["/tmp"] == TMPFS_MOUNTS["/tmp"]


def test_environment_is_the_whole_contract(make_spec: MakeSpec) -> None:
    spec = make_spec("sbx-env", run_id="run-env", attempt=2)
    environment = build_container_spec(spec)["environment"]
    assert set(environment) == set(ENV_NAMES)
    assert environment == spec.env.to_environ()
    assert environment["SIMPLE_SANDBOX_ID"] == "sbx-env"
    assert environment["SIMPLE_ATTEMPT"] == "2"


def test_labels_find_the_container_again(make_spec: MakeSpec) -> None:
    labels = build_container_spec(make_spec("sbx-lab", run_id="run-lab", attempt=3))["labels"]
    assert labels == {
        LABEL_MANAGED_BY: "simple",
        LABEL_RUN_ID: "run-lab",
        LABEL_SANDBOX_ID: "sbx-lab",
        LABEL_TEMPLATE_ID: "board_meeting",
        LABEL_ATTEMPT: "3",
    }


def test_network_is_set_only_when_configured(make_spec: MakeSpec) -> None:
    assert "network_mode" not in build_container_spec(make_spec())
    assert build_container_spec(make_spec(), network="host")["network_mode"] == "host"
    assert build_container_spec(make_spec(), network="simple-net")["network_mode"] == "simple-net"


def test_limits_from_resources(make_spec: MakeSpec) -> None:
    kwargs = build_container_spec(make_spec(cpu="500m", memory="512Mi", pids=64))
    assert kwargs["mem_limit"] == 512 * 2**20
    assert kwargs["memswap_limit"] == kwargs["mem_limit"]  # no swap
    assert kwargs["nano_cpus"] == 500_000_000
    assert kwargs["pids_limit"] == 64


def test_no_limits_when_resources_are_unset(make_spec: MakeSpec) -> None:
    kwargs = build_container_spec(make_spec())
    assert not {"mem_limit", "memswap_limit", "nano_cpus"} & set(kwargs)


def test_the_engine_rotates_the_output_under_the_log_budget(make_spec: MakeSpec) -> None:
    """Issue 25 finding 1: json-file rotated at half SIMPLE_LOG_BUDGET, two files."""
    default = build_container_spec(make_spec())["log_config"]
    assert default == {"type": "json-file", "config": {"max-size": "8192k", "max-file": "2"}}
    small = build_container_spec(make_spec(), log_budget=1 << 20)["log_config"]
    assert small["config"] == {"max-size": "512k", "max-file": "2"}


def test_build_is_pure_and_repeatable(make_spec: MakeSpec) -> None:
    spec = make_spec(memory="1Gi", cpu="2")
    assert build_container_spec(spec) == build_container_spec(spec)


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [
        ("536870912", 536870912),
        ("512Mi", 512 * 2**20),
        ("1Gi", 2**30),
        ("1.5Gi", 3 * 2**29),
        ("10000Ki", 10000 * 1024),
        ("1Ti", 2**40),
        ("128M", 128 * 10**6),
        ("1G", 10**9),
        ("7000k", 7 * 10**6),
        ("7000K", 7 * 10**6),
        ("2T", 2 * 10**12),
        (" 64Mi ", 64 * 2**20),
        (10 * 2**20, 10 * 2**20),
    ],
)
def test_parse_memory(quantity: str, expected: int) -> None:
    assert parse_memory(quantity) == expected


@pytest.mark.parametrize(
    "quantity", ["", "lots", "512MB", "512mi", "-1Gi", "1.5.2Gi", "Mi", "1e9", "0", "5Mi", "64Ki"]
)
def test_bad_memory_names_value_and_forms(quantity: str) -> None:
    with pytest.raises(InputError) as info:
        parse_memory(quantity)
    assert repr(quantity) in str(info.value)
    assert "Mi" in str(info.value) and "bytes" in str(info.value)
    assert info.value.field == "resources.memory"


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [
        ("500m", 500_000_000),
        ("100m", 100_000_000),
        ("1", 1_000_000_000),
        ("1.5", 1_500_000_000),
        ("0.25", 250_000_000),
        ("2000m", 2_000_000_000),
        (2, 2_000_000_000),
    ],
)
def test_parse_cpu(quantity: str, expected: int) -> None:
    assert parse_cpu(quantity) == expected


@pytest.mark.parametrize("quantity", ["", "fast", "0", "0m", "-1", "1.5m.2", "1Gi", "500 mcpu"])
def test_bad_cpu_names_value_and_forms(quantity: str) -> None:
    with pytest.raises(InputError) as info:
        parse_cpu(quantity)
    assert repr(quantity) in str(info.value)
    assert "500m" in str(info.value)
    assert info.value.field == "resources.cpu"


def test_bad_quantity_in_spec_raises_input_error(make_spec: MakeSpec) -> None:
    with pytest.raises(InputError, match="512MB"):
        build_container_spec(make_spec(memory="512MB"))
    with pytest.raises(InputError, match="lots"):
        build_container_spec(make_spec(cpu="lots"))
