"""Controller settings: one `BaseSettings` class, every field from a `SIMPLE_*` variable."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SecretsSettingsSource,
    SettingsConfigDict,
)
from sqlalchemy.engine import make_url

from controller import __version__
from controller.errors import ConfigError

BackendName = Literal["process", "docker", "kubernetes"]

# The built-in catalog ships inside the package (package-data), so a wheel carries it.
BUILTIN_CATALOG_DIR = Path(__file__).resolve().parent / "catalog" / "builtin"
REPO_CATALOG_DIR = BUILTIN_CATALOG_DIR  # the older name, kept for callers


class Settings(BaseSettings):
    """Everything the controller can be told, with the embedded default for each."""

    model_config = SettingsConfigDict(env_prefix="SIMPLE_", extra="ignore")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then the environment, then SIMPLE_SECRETS_DIR's files: a Kubernetes
        Secret mounted as files keeps credentials out of the process environment."""
        sources = (init_settings, env_settings, dotenv_settings)
        secrets_dir = os.environ.get("SIMPLE_SECRETS_DIR")
        if not secrets_dir:
            return sources
        if not Path(secrets_dir).is_dir():
            raise ConfigError(
                f"SIMPLE_SECRETS_DIR={secrets_dir!r} is not a directory",
                hint="mount the Secret there, or unset the variable",
            )
        return (*sources, SecretsSettingsSource(settings_cls, secrets_dir=secrets_dir))

    secrets_dir: Path | None = Field(
        None,
        description="A directory of files named like SIMPLE_* variables (e.g. a mounted "
        "Kubernetes Secret: SIMPLE_API_TOKENS, SIMPLE_DATABASE_URL); each file's content is "
        "that setting, unless the variable itself is set.",
    )
    data_dir: Path = Field(
        Path(".simple"),
        description="Where the embedded default keeps its SQLite file, store and sandbox dirs.",
    )
    database_url: str | None = Field(
        None,
        description="SQLAlchemy URL; default sqlite:///<data_dir>/simple.db. "
        "PostgreSQL: postgresql+psycopg://user:pass@host/db.",
    )
    store_url: str | None = Field(
        None,
        description="Object store: file:///dir (default <data_dir>/store) or s3://bucket/prefix.",
    )
    s3_endpoint_url: str | None = Field(
        None, description="S3 endpoint (MinIO, rclone); None = AWS."
    )
    s3_region: str = Field("us-east-1", description="S3 region name.")
    s3_access_key_id: str | None = Field(None, description="S3 key id; else boto3's own chain.")
    s3_secret_access_key: str | None = Field(None, description="S3 secret; else boto3's own chain.")
    s3_public_endpoint_url: str | None = Field(
        None,
        description="S3 endpoint written into sandboxes' presigned upload URLs, when sandboxes "
        "reach S3 at another address than the controller; default SIMPLE_S3_ENDPOINT_URL.",
    )
    backend: BackendName = Field("process", description="How sandboxes are started.")
    catalog_dirs: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="Extra catalog directories (colon-separated), merged over the built-in one.",
    )
    builtin_catalog_dir: Path = Field(
        BUILTIN_CATALOG_DIR, description="The built-in catalog directory (inside the package)."
    )
    api_tokens: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated bearer tokens for /v1; empty = no auth (loopback only).",
    )
    allow_unauthenticated: bool = Field(
        False, description="Let `serve` listen beyond loopback without API tokens (unsafe)."
    )
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated Host names answered besides the loopback names and "
        "SIMPLE_CONTROLLER_URL's host (400 for any other; `*` for any, unsafe).",
    )
    host: str = Field("127.0.0.1", description="Address `simplectl serve` listens on.")
    port: int = Field(8080, description="Port `simplectl serve` listens on.")
    controller_url: str | None = Field(
        None,
        description="Base URL sandboxes use to reach the controller; default http://<host>:<port>.",
    )
    default_image: str = Field(
        f"simple-sandbox:{__version__}",
        description="Image of templates without one (this version's own; `make images` "
        "builds it), never a moving tag such as :latest.",
    )
    max_attempts: int = Field(3, ge=1, le=20, description="Attempts per sandbox, retries included.")
    retry_base_s: float = Field(1.0, ge=0, description="First retry delay; doubles each attempt.")
    retry_max_s: float = Field(60.0, ge=0, description="Cap of the retry delay.")
    reconcile_interval_s: float = Field(1.0, gt=0, description="Longest pause between passes.")
    snapshot_max_bytes: int = Field(
        64 * 1024 * 1024, gt=0, description="Largest snapshot accepted."
    )
    max_body_bytes: int = Field(
        1024 * 1024, gt=0, description="Largest request body of the API routes (413 beyond)."
    )
    events_max_body_bytes: int = Field(
        8 * 1024 * 1024, gt=0, description="Largest body of one event batch (413 beyond)."
    )
    events_max_per_attempt: int = Field(
        50_000, gt=0, description="Events one sandbox attempt may post (429 beyond)."
    )
    events_max_bytes_per_attempt: int = Field(
        64 * 1024 * 1024,
        gt=0,
        description="Bytes of event batches one attempt may post (413 beyond).",
    )
    log_budget: int = Field(
        16 * 1024 * 1024,
        ge=4096,
        description="Bytes of a sandbox attempt's output kept: the first and last halves; "
        "the middle is dropped and counted, on every backend.",
    )
    log_followers_per_sandbox: int = Field(
        8, gt=0, description="Clients following one sandbox's logs at once (429 beyond)."
    )
    log_followers_total: int = Field(
        64, gt=0, description="Clients following logs at once, all sandboxes (429 beyond)."
    )
    signing_key: str | None = Field(
        None,
        description="Key of the upload URLs' signatures; default a random key kept in "
        "<data_dir>/signing.key (mode 0600). Never stored in the database.",
    )
    store_retry_s: float = Field(
        600.0,
        gt=0,
        description="How long aggregation retries a failing store before it "
        "records the sandbox without its snapshot.",
    )
    retention_days: int = Field(
        30,
        ge=0,
        le=36_500,
        description="Days after a run ends that its archived logs, item files, resume copies, "
        "stage inputs and event rows are kept; then `simplectl gc` (and the reconciler, "
        "daily) removes them. Reports, results and snapshots stay. 0 keeps everything.",
    )
    cost_alert_ratio: float = Field(
        1.2,
        gt=0,
        description="Raise a cost alert when a sandbox's cost passes this many times its "
        "estimate (max); runs created with confirm_over then wait for a confirmation.",
    )
    lost_grace_s: float = Field(
        10.0, ge=0, description="How long a launched sandbox may be unseen before it is lost."
    )
    process_user: str = Field(
        "auto",
        pattern=r"^\S+$",
        description="Whom process-backend sandboxes run as: `auto` (each its own unprivileged "
        "uid when the controller runs as root, else the controller's user), `self` (the "
        "controller's user), or a user name or uid (every sandbox as that user).",
    )
    process_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="CPU priority of process-backend sandboxes below the controller's (a nice "
        "value, set on each sandbox's session too): a host full of busy sandboxes cannot "
        "starve the controller that supervises them. 0 runs them level with it.",
    )
    process_python: str | None = Field(
        None,
        description="The interpreter `python` in a process-backend template's command means; "
        "default the controller's own. It must import sandbox_image and httpx.",
    )
    docker_network: str | None = Field(
        None, description="Docker network for sandboxes ('host', a user network, or bridge)."
    )
    docker_runtime_user: str = Field("10001:10001", description="uid:gid sandboxes run as.")
    template_secrets_dir: Path | None = Field(
        None,
        description="Docker and process backends: where templates' secrets are read at launch, "
        "<dir>/<name>/<key> (Kubernetes mounts the Secrets themselves).",
    )
    kubernetes_namespace: str = Field("default", description="Namespace of sandbox Jobs.")
    kubernetes_sandbox_service_account: str = Field(
        "simple-sandbox", description="ServiceAccount of sandbox Pods."
    )
    kubernetes_job_ttl_s: int = Field(3600, description="ttlSecondsAfterFinished of Jobs.")
    ingest_queue_max_events: int = Field(
        20_000,
        ge=1,
        description="Events waiting to be stored before the events endpoint answers 429.",
    )
    ingest_retry_after_s: int = Field(
        1, ge=1, description="Retry-After (seconds) of a 429 from a full ingest queue."
    )
    metrics_token: str | None = Field(
        None, description="A bearer token accepted for GET /metrics only (besides API tokens)."
    )
    log_format: str = Field("text", pattern="^(text|json)$", description="`text` or `json`.")
    confirm_above_usd: float = Field(
        25.0,
        ge=0,
        description="The principal (chat) asks before starting a run whose max estimate is "
        "above this, or that a budget cut short.",
    )
    chat_max_conversations: int = Field(
        1000, ge=1, le=100_000, description="Conversations the principal keeps (oldest go first)."
    )
    chat_idle_s: float = Field(
        3600.0, gt=0, description="A conversation idle this long is dropped."
    )
    role: str = Field(
        "all", pattern="^(all|api|reconciler)$",
        description="`all` (one process), `api` (HTTP only) or `reconciler` (passes, backend).",
    )
    lease_backend: str = Field(
        "database", pattern="^(database|kubernetes)$",
        description="Where reconcilers contend for leadership: a PostgreSQL row or a "
        "Kubernetes coordination.k8s.io/v1 Lease.",
    )
    lease_name: str = Field("simple-reconciler", description="Name of the leader lease.")
    lease_namespace: str | None = Field(
        None, description="Namespace of the Kubernetes Lease; default the sandboxes' one."
    )
    lease_duration_s: float = Field(
        15.0, gt=0, description="A lease not renewed for this long may be taken over."
    )
    lease_renew_deadline_s: float = Field(
        10.0, gt=0, description="A leader that could not renew for this long steps down."
    )
    lease_retry_s: float = Field(
        2.0, gt=0, description="How often a leader renews and a standby tries to take over."
    )
    holder_id: str | None = Field(
        None, description="This process's name in the lease; default host name and pid."
    )
    llm_base_url: str | None = Field(
        None,
        description="OpenAI-compatible API (e.g. http://127.0.0.1:11434/v1) the principal may use "
        "to phrase answers and propose actions; unset = deterministic only.",
    )
    llm_model: str = Field("llama3.1", description="Model name sent to SIMPLE_LLM_BASE_URL.")
    llm_api_key: str | None = Field(None, description="Bearer key for SIMPLE_LLM_BASE_URL.")
    llm_timeout_s: float = Field(
        20.0, gt=0, le=300, description="Timeout of one LLM call; then the deterministic answer."
    )

    @field_validator("catalog_dirs", mode="before")
    @classmethod
    def _split_dirs(cls, value: object) -> object:
        if isinstance(value, str):
            return [Path(p) for p in value.split(":") if p.strip()]
        return value

    @field_validator("api_tokens", "allowed_hosts", mode="before")
    @classmethod
    def _split_tokens(cls, value: object) -> object:
        if isinstance(value, str):
            return [t.strip() for t in value.split(",") if t.strip()]
        return value

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir.resolve() / 'simple.db'}"

    @property
    def resolved_store_url(self) -> str:
        return self.store_url or (self.data_dir.resolve() / "store").as_uri()

    @property
    def controller_id(self) -> str:
        """Names this controller's sandboxes: one per database, stable across restarts."""
        url = make_url(self.resolved_database_url).render_as_string(hide_password=True)
        return hashlib.sha256(url.encode()).hexdigest()[:12]

    @property
    def resolved_controller_url(self) -> str:
        if self.controller_url:
            return self.controller_url.rstrip("/")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"


# Never echoed in an error: they hold passwords, keys or tokens.
SECRET_FIELDS = frozenset({
    "database_url", "s3_access_key_id", "s3_secret_access_key", "api_tokens", "signing_key",
    "metrics_token", "llm_api_key",
})  # fmt: skip


def load_settings() -> Settings:
    """The settings from the environment; a variable that does not parse is refused with
    its name, its value (unless secret) and why, not a validation traceback."""
    try:
        return Settings()
    except ValidationError as e:
        problems = []
        for error in e.errors():
            field = str(error["loc"][0]) if error["loc"] else ""
            name = f"SIMPLE_{field.upper()}"
            value = os.environ.get(name)
            shown = f"={value!r}" if value is not None and field not in SECRET_FIELDS else ""
            problems.append(f"{name}{shown}: {error['msg']}")
        raise ConfigError(
            "bad setting: " + "; ".join(problems),
            hint="fix or unset it; the README's settings table gives each one's values",
        ) from None
