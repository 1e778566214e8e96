"""The template catalog: the built-in one, user directories merged over it, bad files refused.

Bad files must be refused with a `CatalogError` whose message names the file, the
template and the field at fault (docs/architecture.md, "Catalog files").
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from controller.catalog.templates import Catalog, load_catalog
from controller.errors import CatalogError, UnknownNameError
from controller.service import catalog_dirs
from controller.settings import REPO_CATALOG_DIR, Settings

ALL_MECHANISMS = {f"M{n}" for n in range(1, 18)}
CATEGORY_COUNTS = {
    "quick": 7, "full": 6, "corporate": 15, "portal-test": 4, "portal-simjudged": 12,
    "portal-timepoint": 20,
}
NAMED_SUITES = ("quick", "full", "corporate", "portal-test", "portal-simjudged",
                "portal-timepoint", "ultra")

GOOD = """
templates:
  - id: user_one
    category: mine
    description: a user template
    mechanisms: [M1, M2]
    tags: [custom]
    estimate: {cost_usd: [1.0, 2.0], runtime_s: [10, 20]}
    timeout_s: 60
    resources: {cpu: 250m, memory: 128Mi}
    config: {agents: 2, steps: 2}
suites:
  mine-suite: [user_one, board_meeting]
"""


def template_yaml(**overrides: object) -> str:
    """One valid template (id `broken`), with some fields replaced or removed (None)."""
    entry: dict[str, object] = {
        "id": "broken", "category": "mine", "mechanisms": ["M1"],
        "estimate": {"cost_usd": [1.0, 2.0], "runtime_s": [10, 20]},
    }
    for key, value in overrides.items():
        if value is None:
            entry.pop(key, None)
        else:
            entry[key] = value
    return yaml.safe_dump({"templates": [entry]})


@pytest.fixture(scope="module")
def builtin() -> Catalog:
    return load_catalog([REPO_CATALOG_DIR])


def load_user(directory: Path) -> Catalog:
    return load_catalog([REPO_CATALOG_DIR, directory])


# --- the built-in catalog -------------------------------------------------------------


def test_builtin_has_64_unique_templates(builtin: Catalog) -> None:
    assert len(builtin.templates) == 64
    ids = []
    for path in sorted(REPO_CATALOG_DIR.glob("*.yaml")):
        ids += [t["id"] for t in (yaml.safe_load(path.read_text()) or {}).get("templates", [])]
    assert len(ids) == 64, "a template id is defined twice across the built-in files"
    assert set(ids) == set(builtin.templates)
    assert all(t.id == key for key, t in builtin.templates.items())


def test_builtin_categories_and_counts(builtin: Catalog) -> None:
    counts = Counter(t.category for t in builtin.templates.values())
    assert dict(counts) == CATEGORY_COUNTS
    assert builtin.categories() == set(CATEGORY_COUNTS)


@pytest.mark.parametrize("name", NAMED_SUITES)
def test_named_suites_exist_and_name_known_templates(builtin: Catalog, name: str) -> None:
    members = builtin.suite(name)
    assert members, f"suite {name} is empty"
    assert len(set(members)) == len(members)
    assert set(members) <= set(builtin.templates)


def test_category_suites_hold_their_category(builtin: Catalog) -> None:
    for category, count in CATEGORY_COUNTS.items():
        members = builtin.suite(category)
        assert len(members) == count
        assert {builtin.templates[m].category for m in members} == {category}


def test_ultra_is_every_template(builtin: Catalog) -> None:
    assert len(builtin.suite("ultra")) == 64
    assert set(builtin.suite("ultra")) == set(builtin.templates)


def test_portal_suites_partition_portal_variants(builtin: Catalog) -> None:
    variants = [builtin.suite(f"portal-simjudged-{v}") for v in ("quick", "standard", "thorough")]
    assert [len(v) for v in variants] == [4, 4, 4]
    assert set().union(*variants) == set(builtin.suite("portal-simjudged"))
    assert set(builtin.suite("portal")) == (
        set(builtin.suite("portal-test")) | set(builtin.suite("portal-simjudged")))
    assert len(builtin.suite("portal")) == 16


def test_every_mechanism_is_covered(builtin: Catalog) -> None:
    used = {m for t in builtin.templates.values() for m in t.mechanisms}
    assert used == ALL_MECHANISMS


def test_builtin_templates_are_well_formed(builtin: Catalog) -> None:
    for template in builtin.templates.values():
        assert re.fullmatch(r"[a-z0-9_]+", template.id)
        low, high = template.cost_usd
        assert 0 <= low <= high, template.id
        assert 0 <= template.runtime_s[0] <= template.runtime_s[1], template.id
        assert template.timeout_s >= template.runtime_s[1], f"{template.id} times out too early"
        assert template.source.endswith(".yaml")
        public = template.public()
        assert public["estimate"] == {"cost_usd": [low, high],
                                      "runtime_s": list(template.runtime_s)}


def test_unknown_template_and_suite_lookups(builtin: Catalog) -> None:
    with pytest.raises(UnknownNameError, match="no_such_template") as e:
        builtin.template("no_such_template")
    assert e.value.field == "templates"
    with pytest.raises(UnknownNameError, match="no-such-suite") as e:
        builtin.suite("no-such-suite")
    assert e.value.field == "suites"
    assert "quick" in (e.value.hint or "")


# --- user catalogs merged over the built-in one ----------------------------------------


def test_user_dir_adds_templates_and_suites(catalog_dir, builtin: Catalog) -> None:
    catalog = load_user(catalog_dir(GOOD))
    assert len(catalog.templates) == 65
    user = catalog.template("user_one")
    assert user.category == "mine"
    assert (user.cpu, user.memory, user.timeout_s) == ("250m", "128Mi", 60)
    assert user.config == {"agents": 2, "steps": 2}
    assert catalog.suite("mine-suite") == ("user_one", "board_meeting")
    assert catalog.suite("mine") == ("user_one",)
    for name in NAMED_SUITES:  # the built-in suites are still there
        assert catalog.suite(name) == builtin.suite(name)


def test_same_id_replaces_the_builtin(catalog_dir, builtin: Catalog) -> None:
    directory = catalog_dir("""
        templates:
          - id: board_meeting
            category: quick
            description: replaced by the user
            mechanisms: [M17]
            estimate: {cost_usd: [0.5, 0.75], runtime_s: [1, 2]}
        """)
    catalog = load_user(directory)
    assert len(catalog.templates) == 64
    replaced = catalog.template("board_meeting")
    assert replaced.description == "replaced by the user"
    assert replaced.cost_usd == (0.5, 0.75)
    assert replaced.source == str(directory / "user.yaml")
    assert builtin.template("board_meeting").cost_usd != (0.5, 0.75)
    assert catalog.suite("quick") == builtin.suite("quick")


def test_later_directories_win_and_suites_can_be_redefined(catalog_dir) -> None:
    first = catalog_dir(GOOD)
    second = catalog_dir("""
        templates:
          - id: user_one
            category: mine
            description: second wins
            estimate: {cost_usd: [3, 4], runtime_s: [1, 2]}
        suites:
          quick: [user_one]
        """)
    catalog = load_catalog([REPO_CATALOG_DIR, first, second])
    assert catalog.template("user_one").description == "second wins"
    assert catalog.suite("quick") == ("user_one",)
    assert catalog.suite("mine-suite") == ("user_one", "board_meeting")


def test_yml_files_are_read_too(catalog_dir) -> None:
    catalog = load_user(catalog_dir(GOOD, name="extra.yml"))
    assert "user_one" in catalog.templates


def test_empty_file_adds_nothing(catalog_dir, builtin: Catalog) -> None:
    catalog = load_user(catalog_dir(""))
    assert set(catalog.templates) == set(builtin.templates)


def test_missing_directory_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(CatalogError, match=re.escape(str(missing))):
        load_catalog([REPO_CATALOG_DIR, missing])


# --- bad files -------------------------------------------------------------------------


def refused(directory: Path) -> CatalogError:
    with pytest.raises(CatalogError) as e:
        load_user(directory)
    return e.value


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"estimate": None}, "estimate"),
        ({"mechanisms": ["M1", "M99"]}, "mechanisms"),
        ({"mechanisms": ["M0"]}, "mechanisms"),
        ({"resources": {"memory": "lots"}}, "resources.memory"),
        ({"resources": {"cpu": "fast"}}, "resources.cpu"),
        ({"colour": "blue"}, "colour"),
        ({"estimate": {"cost_usd": [5.0, 1.0], "runtime_s": [1, 2]}}, "estimate.cost_usd"),
        ({"estimate": {"cost_usd": [-1.0, 1.0], "runtime_s": [1, 2]}}, "estimate.cost_usd"),
        ({"estimate": {"cost_usd": [1.0, 2.0]}}, "estimate.runtime_s"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"category": None}, "category"),
        ({"config": [1, 2]}, "config"),
    ],
)
def test_bad_template_names_file_template_and_field(catalog_dir, overrides, field) -> None:
    directory = catalog_dir(template_yaml(**overrides))
    error = refused(directory)
    assert str(directory / "user.yaml") in error.message
    assert "'broken'" in error.message
    assert f"'{field}'" in error.message
    assert error.field == field
    assert error.hint


def test_bad_mechanism_message_names_the_value(catalog_dir) -> None:
    error = refused(catalog_dir(template_yaml(mechanisms=["M99"])))
    assert "M99" in error.message


def test_bad_memory_message_names_the_value(catalog_dir) -> None:
    error = refused(catalog_dir(template_yaml(resources={"memory": "lots"})))
    assert "lots" in error.message


def test_bad_id_is_refused(catalog_dir) -> None:
    directory = catalog_dir(template_yaml(id="Bad-Id"))
    error = refused(directory)
    assert str(directory / "user.yaml") in error.message
    assert "Bad-Id" in error.message
    assert error.field == "id"


def test_missing_id_names_the_entry(catalog_dir) -> None:
    directory = catalog_dir(template_yaml(id=None))
    error = refused(directory)
    assert str(directory / "user.yaml") in error.message
    assert "#1" in error.message
    assert error.field == "id"


def test_invalid_yaml_is_refused_with_its_path(catalog_dir) -> None:
    directory = catalog_dir("templates: [\n  - id: x\n")
    error = refused(directory)
    assert str(directory / "user.yaml") in error.message
    assert "YAML" in error.message


@pytest.mark.parametrize("text", ["- just\n- a list\n", "hello\n", "templates: null\n",
                                  "templates: [not_a_mapping]\n", "extra: 1\n"])
def test_wrong_file_shape_is_refused_with_its_path(catalog_dir, text: str) -> None:
    directory = catalog_dir(text)
    error = refused(directory)
    assert str(directory / "user.yaml") in error.message


def test_duplicate_id_in_one_file_is_refused(catalog_dir) -> None:
    entry = yaml.safe_load(template_yaml())["templates"][0]
    directory = catalog_dir(yaml.safe_dump({"templates": [entry, dict(entry)]}))
    error = refused(directory)
    assert str(directory / "user.yaml") in error.message
    assert "'broken'" in error.message
    assert "'id'" in error.message
    assert "duplicate" in error.message


def test_suite_with_unknown_template_is_refused(catalog_dir) -> None:
    directory = catalog_dir("suites:\n  ghosts: [board_meeting, ghost_template]\n")
    error = refused(directory)
    assert "ghost_template" in error.message
    assert "ghosts" in error.message
    assert "board_meeting" not in error.message


def test_suite_with_unknown_template_names_its_file(catalog_dir) -> None:
    directory = catalog_dir("suites:\n  ghosts: [ghost_template]\n")
    error = refused(directory)
    assert str(directory / "user.yaml") in error.message


def test_empty_command_names_the_field(catalog_dir) -> None:
    error = refused(catalog_dir(template_yaml(command=[])))
    assert "'command'" in error.message
    assert error.field == "command"


@pytest.mark.parametrize("cost", [[1.0, float("inf")], [float("nan"), float("nan")]])
def test_non_finite_estimate_is_refused(catalog_dir, cost) -> None:
    directory = catalog_dir(template_yaml(estimate={"cost_usd": cost, "runtime_s": [1, 2]}))
    error = refused(directory)
    assert error.field == "estimate.cost_usd"


def test_a_bad_file_stops_the_whole_load(catalog_dir) -> None:
    directory = catalog_dir(GOOD, name="a_good.yaml")
    (directory / "b_bad.yaml").write_text(template_yaml(mechanisms=["M99"]))
    error = refused(directory)
    assert str(directory / "b_bad.yaml") in error.message


# --- SIMPLE_CATALOG_DIRS ---------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_catalog_env(monkeypatch) -> None:
    for name in ("SIMPLE_CATALOG_DIRS", "SIMPLE_BUILTIN_CATALOG_DIR"):
        monkeypatch.delenv(name, raising=False)


def test_catalog_dirs_env_is_colon_separated(monkeypatch, tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    monkeypatch.setenv("SIMPLE_CATALOG_DIRS", f"{first}::{second}:")
    settings = Settings()
    assert settings.catalog_dirs == [first, second]
    assert catalog_dirs(settings) == [settings.builtin_catalog_dir, first, second]


def test_catalog_dirs_default_is_builtin_only() -> None:
    settings = Settings()
    assert settings.catalog_dirs == []
    assert catalog_dirs(settings) == [REPO_CATALOG_DIR]


def test_catalog_dirs_env_is_loaded_in_order(monkeypatch, catalog_dir) -> None:
    first = catalog_dir(GOOD)
    second = catalog_dir("""
        templates:
          - id: user_one
            category: mine
            description: from the second directory
            estimate: {cost_usd: [1, 2], runtime_s: [1, 2]}
        """)
    monkeypatch.setenv("SIMPLE_CATALOG_DIRS", f"{first}:{second}")
    catalog = load_catalog(catalog_dirs(Settings()))
    assert catalog.template("user_one").description == "from the second directory"
    assert catalog.suite("mine-suite") == ("user_one", "board_meeting")
    assert len(catalog.templates) == 65
