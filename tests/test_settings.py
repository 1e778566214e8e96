"""Settings from files: SIMPLE_SECRETS_DIR, as a Kubernetes Secret mounted as a volume.

The chart mounts the controller's credentials as files (no secret in its environment,
checkov's CKV_K8S_35); the kubelet lays a Secret volume out as symlinks into a `..data`
directory, which these tests copy.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller import settings as settings_module
from controller.errors import ConfigError
from controller.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[1]


def kubelet_secret_volume(root: Path, files: dict[str, str]) -> Path:
    """A directory laid out as the kubelet lays out a Secret volume."""
    real = root / "..2026_11_23_12_00_00.123456789"
    real.mkdir(parents=True)
    for name, content in files.items():
        (real / name).write_text(content)
    (root / "..data").symlink_to(real.name)
    for name in files:
        (root / name).symlink_to(f"..data/{name}")
    return root


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith("SIMPLE_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_credentials_are_read_from_the_secrets_dir(tmp_path: Path,
                                                   clean_env: pytest.MonkeyPatch) -> None:
    secrets = kubelet_secret_volume(tmp_path / "secrets", {
        "SIMPLE_API_TOKENS": "tok-a,tok-b\n",
        "SIMPLE_DATABASE_URL": "postgresql+psycopg://simple:pw@db:5432/simple",
        "SIMPLE_S3_SECRET_ACCESS_KEY": "s3-secret",
    })
    clean_env.setenv("SIMPLE_SECRETS_DIR", str(secrets))
    settings = Settings()
    assert settings.api_tokens == ["tok-a", "tok-b"]
    assert settings.database_url == "postgresql+psycopg://simple:pw@db:5432/simple"
    assert settings.s3_secret_access_key == "s3-secret"
    assert settings.secrets_dir == secrets


def test_the_environment_wins_over_a_file(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    secrets = kubelet_secret_volume(tmp_path / "secrets", {"SIMPLE_API_TOKENS": "from-file"})
    clean_env.setenv("SIMPLE_SECRETS_DIR", str(secrets))
    clean_env.setenv("SIMPLE_API_TOKENS", "from-env")
    assert Settings().api_tokens == ["from-env"]


def test_without_the_variable_no_file_is_read(tmp_path: Path,
                                              clean_env: pytest.MonkeyPatch) -> None:
    kubelet_secret_volume(tmp_path / "secrets", {"SIMPLE_API_TOKENS": "from-file"})
    clean_env.chdir(tmp_path / "secrets")
    assert Settings().api_tokens == []


def test_a_missing_secrets_dir_is_a_clear_error(tmp_path: Path,
                                                clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("SIMPLE_SECRETS_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match=r"SIMPLE_SECRETS_DIR=.*is not a directory") as error:
        Settings()
    assert error.value.hint and "mount the Secret" in error.value.hint


def test_a_variable_that_does_not_parse_is_named_with_its_value_and_why(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("SIMPLE_PROCESS_NICE", "25")
    clean_env.setenv("SIMPLE_MAX_ATTEMPTS", "many")
    with pytest.raises(ConfigError) as error:
        load_settings()
    message = error.value.message
    assert "SIMPLE_PROCESS_NICE='25': Input should be less than or equal to 19" in message
    assert "SIMPLE_MAX_ATTEMPTS='many'" in message
    assert error.value.hint and "README" in error.value.hint


def test_a_secret_that_does_not_parse_is_named_but_not_shown(
    clean_env: pytest.MonkeyPatch,
) -> None:
    # No secret field refuses a string today; the port stands in for one that would.
    clean_env.setattr(settings_module, "SECRET_FIELDS", frozenset({"port"}))
    clean_env.setenv("SIMPLE_PORT", "hunter2")
    with pytest.raises(ConfigError) as error:
        load_settings()
    assert "SIMPLE_PORT: Input should be a valid integer" in error.value.message
    assert "hunter2" not in str(error.value)


def test_the_default_sandbox_image_is_this_versions_own_which_make_images_tags() -> None:
    """Issue 25, finding 12: the default was `simple-sandbox:latest`, a moving tag (checkov
    CKV_K8S_14 failed on every Job `simplectl run --backend kubernetes` made)."""
    import subprocess

    from controller import __version__

    default = Settings.model_fields["default_image"].default
    assert default == f"simple-sandbox:{__version__}" and not default.endswith(":latest")
    script = (ROOT / "docker" / "build-images.sh").read_text()
    [line] = [x for x in script.splitlines() if x.startswith("VERSION=")]
    found = subprocess.run(["bash", "-c", f'{line}; echo "$VERSION"'], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert found == __version__
    assert 'docker tag "$tag" "${tag%:*}:$VERSION"' in script


def test_the_jobs_of_a_kubernetes_dry_run_name_no_moving_tag() -> None:
    """What checkov's CKV_K8S_14 checks on the quick suite's dry run: every Job's image
    has a tag, and it is not :latest."""
    from controller.catalog.templates import load_catalog
    from controller.cli.dry_run import render_run
    from controller.planning.model import PlanRequest

    settings = Settings(backend="kubernetes", kubernetes_namespace="simple")
    catalog = load_catalog([settings.builtin_catalog_dir])
    jobs = render_run(catalog, PlanRequest(suites=("quick",)), settings)["objects"]
    images = [c["image"] for job in jobs for c in job["spec"]["template"]["spec"]["containers"]]
    assert len(images) == 7
    assert all(":" in image and not image.endswith(":latest") for image in images), images
