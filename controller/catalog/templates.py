"""The template catalog: YAML files validated into frozen `Template` values.

The built-in directory comes first; directories from `--catalog` or `SIMPLE_CATALOG_DIRS`
are merged over it (a template with the same id replaces the built-in one). A bad file is
refused naming the file, the template and the field at fault.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from controller.catalog.batches import (
    ENTRYPOINT,
    MAX_BATCH_SIZE,
    WorkItem,
    check_items,
    read_items_file,
)
from controller.catalog.quantities import memory_bytes, nano_cpus
from controller.catalog.secrets import SecretRefs
from controller.catalog.stages import Stage, StagedSuiteModel, check_stages, parse_policy
from controller.errors import CatalogError, InputError, UnknownNameError

TEMPLATE_ID = re.compile(r"^[a-z0-9_]+$")
MECHANISM = re.compile(r"^M([1-9]|1[0-7])$")
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's: ~10x faster


class EstimateModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cost_usd: tuple[float, float] = Field(description="[min, max] cost in USD")
    runtime_s: tuple[float, float] = Field(description="[min, max] runtime in seconds")

    @field_validator("cost_usd", "runtime_s")
    @classmethod
    def _ordered(cls, value: tuple[float, float]) -> tuple[float, float]:
        low, high = value
        if not (math.isfinite(low) and math.isfinite(high)) or low < 0 or high < low:
            raise ValueError(f"must be [min, max] with 0 <= min <= max, got {list(value)}")
        return value


class ResourcesModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cpu: str = Field("1", description='CPU in Kubernetes notation: "500m", "1", "1.5"')
    memory: str = Field("512Mi", description='Memory in Kubernetes notation: "256Mi", "1Gi"')

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu(cls, value: object) -> str:
        try:
            nano_cpus(str(value))
        except InputError as e:
            raise ValueError(f"{e.message}; {e.hint}") from None
        return str(value)

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: object) -> str:
        try:
            memory_bytes(str(value))
        except InputError as e:
            raise ValueError(f"{e.message}; {e.hint}") from None
        return str(value)


class TemplateModel(BaseModel):
    """One catalog entry as written in YAML."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(description="[a-z0-9_]+, unique")
    category: str = Field(description="The template's category; also a suite")
    description: str = ""
    mechanisms: list[str] = Field(default_factory=list, description="M1..M17")
    tags: list[str] = Field(default_factory=list)
    estimate: EstimateModel
    timeout_s: int = Field(3600, gt=0, le=7 * 24 * 3600, strict=True)
    resources: ResourcesModel = Field(default_factory=ResourcesModel)
    image: str | None = None
    command: list[str] | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    items: list[Any] | None = Field(
        None, description='Batch template: a list of {"item_id", "data"}')
    items_file: str | None = Field(
        None, description="Batch template: a JSON Lines file of items beside the catalog file")
    batch_size: int | None = Field(
        None, ge=1, le=MAX_BATCH_SIZE, strict=True, description="Items per sandbox at most")
    entrypoint: str | None = Field(
        None, description="module:function called with each item's data")
    secrets: SecretRefs = Field(default_factory=list, description="Secrets, by reference")
    on_log_budget: Literal["keep", "stop"] = Field(
        "keep", description="Past SIMPLE_LOG_BUDGET: keep running (head and tail kept) or stop")

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint(cls, value: str | None) -> str | None:
        if value is not None and not ENTRYPOINT.match(value):
            raise ValueError(f"{value!r} must be module:function, e.g. evals.check:run")
        return value

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not TEMPLATE_ID.match(value) or len(value) > 100:
            raise ValueError(f"{value!r} must match [a-z0-9_]+ (at most 100 characters)")
        return value

    @field_validator("mechanisms")
    @classmethod
    def _mechanisms(cls, value: list[str]) -> list[str]:
        bad = [m for m in value if not MECHANISM.match(m)]
        if bad:
            raise ValueError(f"unknown mechanisms {bad}; use M1 to M17")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("must not be empty; leave it out to use the built-in runtime")
        return value


class CatalogFileModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    templates: list[dict[str, Any]] = Field(default_factory=list)
    suites: dict[str, list[str] | StagedSuiteModel] = Field(default_factory=dict)


@dataclass(frozen=True)
class Template:
    """A validated catalog entry."""

    id: str
    category: str
    description: str
    mechanisms: tuple[str, ...]
    tags: tuple[str, ...]
    cost_usd: tuple[float, float]
    runtime_s: tuple[float, float]
    timeout_s: int
    cpu: str
    memory: str
    image: str | None
    command: tuple[str, ...] | None
    config: dict[str, Any] = field(hash=False, compare=False)
    source: str = ""
    items: tuple[WorkItem, ...] = field(default=(), hash=False, compare=False)
    batch_size: int | None = None
    entrypoint: str | None = None
    secrets: tuple[tuple[str, str, str], ...] = ()  # (name, key, as): never values
    on_log_budget: str = "keep"

    def public(self) -> dict[str, Any]:
        """The template as the API shows it."""
        return {
            "id": self.id,
            "category": self.category,
            "description": self.description,
            "mechanisms": list(self.mechanisms),
            "tags": list(self.tags),
            "estimate": {"cost_usd": list(self.cost_usd), "runtime_s": list(self.runtime_s)},
            "timeout_s": self.timeout_s,
            "resources": {"cpu": self.cpu, "memory": self.memory},
            "image": self.image,
            "command": list(self.command) if self.command else None,
            "config": self.config,
            "items": len(self.items) or None,
            "batch_size": self.batch_size,
            "entrypoint": self.entrypoint,
            "secrets": [{"name": n, "key": k, "as": a} for n, k, a in self.secrets],
        }


@dataclass(frozen=True)
class Catalog:
    """Templates by id (catalog order) and suites by name (categories included).

    A staged suite is in `suites` too, as all its templates, and in `staged` as stages.
    """

    templates: dict[str, Template]
    suites: dict[str, tuple[str, ...]]
    staged: dict[str, tuple[Stage, ...]] = field(default_factory=dict)

    def template(self, template_id: str) -> Template:
        try:
            return self.templates[template_id]
        except KeyError:
            raise UnknownNameError(
                f"unknown template {template_id!r}",
                hint="list them with `simplectl templates`",
                field="templates",
            ) from None

    def suite(self, name: str) -> tuple[str, ...]:
        try:
            return self.suites[name]
        except KeyError:
            raise UnknownNameError(
                f"unknown suite {name!r}",
                hint=f"known suites: {', '.join(sorted(self.suites))}",
                field="suites",
            ) from None

    def categories(self) -> set[str]:
        return {t.category for t in self.templates.values()}


def load_catalog(dirs: Iterable[Path]) -> Catalog:
    """Load and merge catalog directories, later ones over earlier ones."""
    templates: dict[str, Template] = {}
    suites: dict[str, tuple[list[str] | StagedSuiteModel, Path]] = {}
    for directory in dirs:
        if not directory.is_dir():
            raise CatalogError(
                f"catalog directory {directory} does not exist",
                hint="pass an existing directory to --catalog or SIMPLE_CATALOG_DIRS",
            )
        in_directory: dict[str, Path] = {}
        for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
            file_templates, file_suites = _load_file(path)
            for template in file_templates:
                if template.id in in_directory:
                    raise CatalogError(
                        f"{path}: template {template.id!r}: field 'id': already defined in "
                        f"{in_directory[template.id]}",
                        hint="one directory defines a template once; a later directory "
                        "may override it",
                        field="id",
                    )
                in_directory[template.id] = path
                templates[template.id] = template
            suites.update({name: (members, path) for name, members in file_suites.items()})
    return _finish(templates, suites)


def _load_file(path: Path) -> tuple[list[Template], dict[str, list[str] | StagedSuiteModel]]:
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER) or {}
    except (OSError, yaml.YAMLError) as e:
        raise CatalogError(f"{path}: cannot read YAML: {e}") from e
    try:
        parsed = CatalogFileModel.model_validate(raw)
    except ValidationError as e:
        raise CatalogError(
            f"{path}: {_describe(e)}", hint="a catalog file has `templates:` and `suites:`"
        ) from e
    seen: set[str] = set()
    result = []
    for index, entry in enumerate(parsed.templates):
        name = str(entry.get("id", f"#{index + 1}"))
        try:
            model = TemplateModel.model_validate(entry)
        except ValidationError as e:
            raise CatalogError(
                f"{path}: template {name!r}: {_describe(e)}",
                hint="see the catalog format in the README",
                field=_first_field(e),
            ) from e
        if model.id in seen:
            raise CatalogError(
                f"{path}: template {model.id!r}: field 'id': duplicate id in this file"
            )
        seen.add(model.id)
        result.append(_to_template(model, str(path), _template_items(model, path)))
    return result, parsed.suites


def _template_items(model: TemplateModel, path: Path) -> tuple[WorkItem, ...]:
    where = f"{path}: template {model.id!r}"
    if model.items is not None and model.items_file is not None:
        raise CatalogError(f"{where}: fields 'items' and 'items_file' exclude each other",
                           hint="keep one of them", field="items")
    try:
        if model.items is not None:
            return check_items(model.items, where)
        if model.items_file is not None:
            file = (path.parent / model.items_file).resolve()
            if not file.is_relative_to(path.parent.resolve()):
                raise CatalogError(f"{where}: field 'items_file': {model.items_file!r} is "
                                   "outside the catalog directory", field="items_file")
            return read_items_file(file)
    except CatalogError:
        raise
    except InputError as e:
        raise CatalogError(f"{where}: field 'items': {e.message}", hint=e.hint,
                           field="items") from e
    return ()


def _to_template(model: TemplateModel, source: str, items: tuple[WorkItem, ...] = ()
                 ) -> Template:
    return Template(
        id=model.id,
        category=model.category,
        description=model.description,
        mechanisms=tuple(model.mechanisms),
        tags=tuple(model.tags),
        cost_usd=model.estimate.cost_usd,
        runtime_s=model.estimate.runtime_s,
        timeout_s=model.timeout_s,
        cpu=model.resources.cpu,
        memory=model.resources.memory,
        image=model.image,
        command=tuple(model.command) if model.command else None,
        config=model.config,
        source=source,
        items=items,
        batch_size=model.batch_size,
        entrypoint=model.entrypoint,
        secrets=tuple((r.name, r.key, r.as_) for r in model.secrets),
        on_log_budget=model.on_log_budget,
    )


def _finish(
    templates: dict[str, Template], suites: dict[str, tuple[list[str] | StagedSuiteModel, Path]]
) -> Catalog:
    merged: dict[str, tuple[str, ...]] = {}
    staged: dict[str, tuple[Stage, ...]] = {}
    for template in templates.values():
        merged.setdefault(template.category, ())
        merged[template.category] += (template.id,)
    resolved: dict[str, tuple[list[str], Path]] = {
        name: (value, path) for name, (value, path) in suites.items() if isinstance(value, list)
    }
    for name, (value, path) in suites.items():
        if isinstance(value, StagedSuiteModel):
            staged[name] = _stages(name, value, path, templates, resolved)
            members = [t for stage in staged[name] for t in stage.templates]
        else:
            members = value
        missing = [m for m in members if m not in templates]
        if missing:
            raise CatalogError(
                f"{path}: suite {name!r}: field 'suites.{name}': unknown templates: "
                f"{', '.join(missing)}",
                hint="define them under `templates:` or remove them from the suite",
                field=f"suites.{name}",
            )
        merged[name] = tuple(dict.fromkeys(members))
    return Catalog(templates=templates, suites=merged, staged=staged)


def _stages(
    name: str,
    suite: StagedSuiteModel,
    path: Path,
    templates: dict[str, Template],
    flat: dict[str, tuple[list[str], Path]],
) -> tuple[Stage, ...]:
    """A staged suite's stages; a stage's `suites` must name flat suites of the catalog."""
    stages = []
    for index, model in enumerate(suite.stages):
        members = list(model.templates)
        for suite_name in model.suites:
            if suite_name not in flat:
                raise CatalogError(
                    f"{path}: suite {name!r}: field 'suites.{name}.stages.{index}.suites': "
                    f"unknown (or staged) suite {suite_name!r}",
                    hint="a stage may name templates and flat suites",
                    field=f"suites.{name}",
                )
            members += flat[suite_name][0]
        missing = [m for m in members if m not in templates]
        if missing:
            raise CatalogError(
                f"{path}: suite {name!r}: field 'suites.{name}.stages.{index}': "
                f"unknown templates: {', '.join(missing)}",
                hint="define them under `templates:` or remove them from the stage",
                field=f"suites.{name}",
            )
        stages.append(Stage(tuple(dict.fromkeys(members)), parse_policy(model.policy)))
    try:
        check_stages(stages, f"{path}: suite {name!r}")
    except ValueError as e:
        raise CatalogError(str(e), hint="see docs/stages.md", field=f"suites.{name}") from None
    return tuple(stages)


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:3]:
        where = ".".join(str(p) for p in item["loc"]) or "(file)"
        parts.append(f"field {where!r}: {item['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


def _first_field(error: ValidationError) -> str | None:
    errors = error.errors()
    return ".".join(str(p) for p in errors[0]["loc"]) if errors else None
