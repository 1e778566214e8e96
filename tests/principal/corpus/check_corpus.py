"""Validate the principal's evaluation corpus against the built-in catalog.

    python3 tests/principal/corpus/check_corpus.py            # the split files and dev2
    python3 tests/principal/corpus/check_corpus.py FILE ...    # any *requests*/*questions* jsonl

Checks: every line is a JSON object of the schema (README.md), ids are unique across
the halves of a file kind, texts are unique; every template id in a "select" exists in
the catalog, every "select" is non-empty, sorted and without repeats; and every
reading's "select" equals its "spec" evaluated over the catalog (suites, categories and
tags read from controller/catalog/builtin/*.yaml with PyYAML, never typed by hand).
Questions: kind is one of the nine, subject is null, "last", "previous", a run id
(run-<hex>) or a template id of the catalog. Without arguments it also checks that the
halves are the recorded seeded split (split.py), and checks the later development files
(dev2_*.jsonl, ids d2r.../d2q...) the same way on their own, plus that none of their texts
repeats a text of the split files (compared lowercased, spaces collapsed, end punctuation
dropped). A repeat is reported by ids only, never by its text, so that running this
prints no held-out line. Exit 0 when all holds, 1 otherwise.

A spec is a set expression evaluated left to right:  OPERAND (OP OPERAND)*  with OP one
of + (union), - (difference), & (intersection) and OPERAND one of
  all          every template of the catalog
  s:NAME       the suite NAME (suites.yaml)
  c:NAME       the templates whose category is NAME
  g:NAME       the templates tagged NAME
  t:ID         the template ID
Standard library and PyYAML only.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
CATALOG_DIR = ROOT / "controller" / "catalog" / "builtin"

READING_KEYS = {"select", "budget_usd", "max_parallel", "max_runtime_s", "priority"}
PRIORITIES = {"speed", "cost", "balanced"}
KINDS = {"run_cost", "template_cost", "most_expensive", "failures", "least_reliable",
         "compare_runs", "waiting", "status", "tokens"}
RUN_ID = re.compile(r"^run-[0-9a-f]{4,}$")
SPLIT_FILES = ["dev_requests.jsonl", "heldout_requests.jsonl",
               "dev_questions.jsonl", "heldout_questions.jsonl"]
# Development data written later, by another writer; never part of the split or of the
# held-out score. Ids carry the file's prefix (d2r001, d2q001).
LATER_FILES = {"d2": ["dev2_requests.jsonl", "dev2_questions.jsonl"]}  # id prefix -> files


class Catalog:
    def __init__(self, templates: dict[str, dict], suites: dict[str, list[str]]):
        self.templates = templates  # id -> the template's mapping
        self.suites = suites

    def category(self, name: str) -> set[str]:
        return {i for i, t in self.templates.items() if t.get("category") == name}

    def tag(self, name: str) -> set[str]:
        return {i for i, t in self.templates.items() if name in (t.get("tags") or [])}


def load_catalog(directory: Path = CATALOG_DIR) -> Catalog:
    templates: dict[str, dict] = {}
    suites: dict[str, list[str]] = {}
    for path in sorted(directory.glob("*.yaml")):  # the directory's own files, as the loader does
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for t in doc.get("templates") or []:
            if t["id"] in templates:
                raise SystemExit(f"catalog: template {t['id']} twice ({path.name})")
            templates[t["id"]] = t
        for name, members in (doc.get("suites") or {}).items():
            suites[name] = list(members)
    for name, members in suites.items():
        unknown = [m for m in members if m not in templates]
        if unknown:
            raise SystemExit(f"catalog: suite {name} names unknown templates {unknown}")
    return Catalog(templates, suites)


def _operand(token: str, cat: Catalog) -> set[str]:
    if token == "all":
        return set(cat.templates)
    prefix, _, name = token.partition(":")
    if prefix == "s":
        if name not in cat.suites:
            raise ValueError(f"unknown suite {name!r}")
        return set(cat.suites[name])
    if prefix == "c":
        found = cat.category(name)
    elif prefix == "g":
        found = cat.tag(name)
    elif prefix == "t":
        found = {name} & set(cat.templates)
    else:
        raise ValueError(f"bad operand {token!r}")
    if not found:
        raise ValueError(f"{token!r} matches no template")
    return found


def eval_spec(spec: str, cat: Catalog) -> set[str]:
    tokens = spec.split()
    if not tokens or len(tokens) % 2 == 0:
        raise ValueError(f"malformed spec {spec!r}")
    result = _operand(tokens[0], cat)
    for op, token in zip(tokens[1::2], tokens[2::2], strict=True):
        operand = _operand(token, cat)
        if op == "+":
            result = result | operand
        elif op == "-":
            result = result - operand
        elif op == "&":
            result = result & operand
        else:
            raise ValueError(f"bad operator {op!r} in {spec!r}")
    return result


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_request(row: dict, cat: Catalog) -> list[str]:
    errs: list[str] = []
    if set(row) - {"id", "text", "expect", "spec"}:
        errs.append(f"unexpected keys {sorted(set(row) - {'id', 'text', 'expect', 'spec'})}")
    if not re.fullmatch(r"(?:d\d+)?r\d{3,}", str(row.get("id"))):
        errs.append("id is not r<digits> (or d<N>r<digits>)")
    if not isinstance(row.get("text"), str) or not row["text"].strip():
        errs.append("text is empty")
    exp = row.get("expect")
    if not isinstance(exp, dict):
        return [*errs, "expect is not an object"]
    if exp.get("ask") is not None:
        if exp != {"ask": True, "why": exp.get("why")} or not isinstance(exp.get("why"), str) \
                or not exp["why"].strip():
            errs.append('an ask must be exactly {"ask": true, "why": "<non-empty>"}')
        if "spec" in row:
            errs.append("an ask has no spec")
        return errs
    if set(exp) != READING_KEYS:
        return [*errs, f"reading keys are {sorted(exp)}, want {sorted(READING_KEYS)}"]
    sel = exp["select"]
    if not isinstance(sel, list) or not sel:
        errs.append("select is empty or not a list")
        sel = []
    unknown = [t for t in sel if t not in cat.templates]
    if unknown:
        errs.append(f"select names unknown templates {unknown}")
    if sel != sorted(set(sel)):
        errs.append("select is not sorted or has repeats")
    budget = exp["budget_usd"]
    if budget is not None and not (_is_number(budget) and budget > 0):
        errs.append("budget_usd must be a positive number or null")
    mp = exp["max_parallel"]
    if mp is not None and not (isinstance(mp, int) and not isinstance(mp, bool) and mp >= 1):
        errs.append("max_parallel must be a positive integer or null")
    rt = exp["max_runtime_s"]
    if rt is not None and not (_is_number(rt) and rt > 0):
        errs.append("max_runtime_s must be a positive number or null")
    if exp["priority"] is not None and exp["priority"] not in PRIORITIES:
        errs.append(f"priority {exp['priority']!r} is not one of {sorted(PRIORITIES)} or null")
    spec = row.get("spec")
    if not isinstance(spec, str):
        errs.append("a reading needs its spec")
    else:
        try:
            want = sorted(eval_spec(spec, cat))
        except ValueError as e:
            errs.append(f"spec: {e}")
        else:
            if want != sel:
                missing, extra = sorted(set(want) - set(sel)), sorted(set(sel) - set(want))
                errs.append(f"select differs from spec {spec!r}: missing {missing}, extra {extra}")
    return errs


def check_question(row: dict, cat: Catalog) -> list[str]:
    errs: list[str] = []
    if set(row) != {"id", "text", "expect"}:
        errs.append(f"keys are {sorted(row)}, want id, text, expect")
    if not re.fullmatch(r"(?:d\d+)?q\d{3,}", str(row.get("id"))):
        errs.append("id is not q<digits> (or d<N>q<digits>)")
    if not isinstance(row.get("text"), str) or not row["text"].strip():
        errs.append("text is empty")
    exp = row.get("expect")
    if not isinstance(exp, dict) or set(exp) != {"kind", "subject"}:
        return [*errs, "expect must be {kind, subject}"]
    if exp["kind"] not in KINDS:
        errs.append(f"kind {exp['kind']!r} is not one of {sorted(KINDS)}")
    s = exp["subject"]
    if s is not None and s not in ("last", "previous") and not RUN_ID.match(str(s)) \
            and s not in cat.templates:
        errs.append(f"subject {s!r} is neither null, last, previous, a run id nor a template id")
    return errs


def read(path: Path) -> tuple[list[dict], list[str]]:
    rows, errs = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            errs.append(f"{path.name}:{n}: blank line")
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            errs.append(f"{path.name}:{n}: not JSON: {e}")
            continue
        if not isinstance(row, dict):
            errs.append(f"{path.name}:{n}: not an object")
            continue
        row["_where"] = f"{path.name}:{n}"
        rows.append(row)
    return rows, errs


def normalized(text: str) -> str:
    """A text as compared across files: lowercased, spaces collapsed, end punctuation off."""
    return " ".join(str(text).lower().split()).rstrip(" ?!.")


def check_files(paths: list[Path], cat: Catalog, errors: list[str],
                prefix: str = "") -> tuple[dict[str, list[dict]], dict[int, str]]:
    """Check the files as one corpus: each line's schema, and ids and texts unique across
    them. With a prefix (a later file set such as dev2) every id must start with it.
    Returns the rows by kind (requests, questions) and each row's place (id(row) -> file:line);
    errors name places and ids only."""
    groups: dict[str, list[dict]] = {"requests": [], "questions": []}
    places: dict[int, str] = {}
    for path in paths:
        kind = ("requests" if "request" in path.name
                else "questions" if "question" in path.name else None)
        if kind is None:
            errors.append(f"{path}: name says neither requests nor questions")
            continue
        rows, errs = read(path)
        errors += errs
        groups[kind] += rows
        asks = sum(1 for r in rows if r.get("expect", {}).get("ask"))
        print(f"{path.name}: {len(rows)} lines" + (f", {asks} ask" if kind == "requests" else ""))
    for kind, rows in groups.items():
        check = check_request if kind == "requests" else check_question
        seen_ids: dict[str, str] = {}
        seen_texts: dict[str, tuple[str, str]] = {}
        for row in rows:
            where = row.pop("_where")
            places[id(row)] = where
            for e in check(row, cat):
                errors.append(f"{where} ({row.get('id')}): {e}")
            rid, text = row.get("id"), str(row.get("text", "")).strip().lower()
            if prefix and not str(rid).startswith(prefix):
                errors.append(f"{where} ({rid}): id does not start with {prefix}")
            if rid in seen_ids:
                errors.append(f"{where}: id {rid} also at {seen_ids[rid]}")
            seen_ids.setdefault(rid, where)
            if text in seen_texts:
                errors.append(f"{where} ({rid}): same text as {seen_texts[text][0]}"
                              f" ({seen_texts[text][1]})")
            seen_texts.setdefault(text, (where, str(rid)))
    req = groups["requests"]
    if req:
        asks = sum(1 for r in req if r.get("expect", {}).get("ask"))
        print(f"requests: {len(req)}, ask {asks} ({asks / len(req):.1%})")
    if groups["questions"]:
        counts: dict[str, int] = {}
        for r in groups["questions"]:
            k = r.get("expect", {}).get("kind")
            counts[k] = counts.get(k, 0) + 1
        print(f"questions: {len(groups['questions'])}, " +
              ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: str(kv[0]))))
    return groups, places


def check_repeats(later: dict[str, list[dict]], places: dict[int, str],
                  earlier: dict[str, list[dict]], errors: list[str]) -> None:
    """A later file's text that repeats (normalized) an earlier file's text, of either kind.
    Reported by the two ids only: the earlier text may be a held-out line, never printed."""
    earlier_ids: dict[str, str] = {}
    for rows in earlier.values():
        for row in rows:
            earlier_ids.setdefault(normalized(row.get("text", "")), str(row.get("id")))
    seen: dict[str, str] = {}
    for rows in later.values():
        for row in rows:
            key, rid = normalized(row.get("text", "")), str(row.get("id"))
            if key in earlier_ids:
                errors.append(f"{places[id(row)]} ({rid}): repeats the text of {earlier_ids[key]}"
                              " of an earlier corpus file")
            elif key in seen and seen[key] != rid:
                errors.append(f"{places[id(row)]} ({rid}): nearly the same text as {seen[key]}")
            seen.setdefault(key, rid)


def main(argv: list[str]) -> int:
    cat = load_catalog()
    errors: list[str] = []
    if argv:
        check_files([Path(a) for a in argv], cat, errors)
    else:
        split_groups, _ = check_files([HERE / f for f in SPLIT_FILES], cat, errors)
        for prefix, names in LATER_FILES.items():
            paths = [HERE / f for f in names if (HERE / f).exists()]
            if paths:
                later, places = check_files(paths, cat, errors, prefix=prefix)
                check_repeats(later, places, split_groups, errors)
        sys.path.insert(0, str(HERE))
        import split  # the recorded split lives next to this file
        errors += [f"split: {e}" for e in split.check()]
    for e in errors:
        print("ERROR", e, file=sys.stderr)
    print("corpus: OK" if not errors else f"corpus: {len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
