"""The corpus's one random split into a development half and a held-out half.

The split was made once, with SEED, from the unsplit files requests.jsonl and
questions.jsonl (which were then removed, so that nobody reads the held-out lines by
accident). It is stratified: requests by label type (reading / ask), questions by kind,
so both halves keep the same mix. Within each stratum the ids, in id order, are shuffled
with one random.Random(SEED) (requests' strata first, then questions', strata in sorted
order) and the first floor(n/2) go to the development half.

    python3 split.py --from requests.jsonl questions.jsonl   # (re)write the four halves
    python3 split.py --check                                   # the halves are that split

--check merges the two halves of each file, re-runs the split and verifies that every
line sits in the half the seed puts it in. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

SEED = 20261125
HERE = Path(__file__).resolve().parent
FILES = {  # unsplit name -> (development half, held-out half)
    "requests": ("dev_requests.jsonl", "heldout_requests.jsonl"),
    "questions": ("dev_questions.jsonl", "heldout_questions.jsonl"),
}


def stratum(kind: str, row: dict) -> str:
    if kind == "requests":
        return "ask" if row["expect"].get("ask") else "reading"
    return row["expect"]["kind"]


def assign(rows_by_file: dict[str, list[dict]], seed: int = SEED) -> dict[str, set[str]]:
    """Return, per file kind, the set of ids that go to the development half."""
    rng = random.Random(seed)
    dev: dict[str, set[str]] = {}
    for kind in ("requests", "questions"):
        strata: dict[str, list[str]] = {}
        for row in rows_by_file[kind]:
            strata.setdefault(stratum(kind, row), []).append(row["id"])
        dev[kind] = set()
        for name in sorted(strata):
            ids = sorted(strata[name])
            rng.shuffle(ids)
            dev[kind].update(ids[: len(ids) // 2])
    return dev


def read_jsonl(path: Path) -> list[dict]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    path.write_text(text, encoding="utf-8")


def split_from(requests: Path, questions: Path) -> None:
    rows = {"requests": read_jsonl(requests), "questions": read_jsonl(questions)}
    dev = assign(rows)
    for kind, (dev_name, held_name) in FILES.items():
        ordered = sorted(rows[kind], key=lambda r: r["id"])
        write_jsonl(HERE / dev_name, [r for r in ordered if r["id"] in dev[kind]])
        write_jsonl(HERE / held_name, [r for r in ordered if r["id"] not in dev[kind]])
        print(f"{kind}: {len(dev[kind])} dev, {len(ordered) - len(dev[kind])} held out")


def check() -> list[str]:
    errors: list[str] = []
    rows: dict[str, list[dict]] = {}
    halves: dict[str, tuple[set[str], set[str]]] = {}
    for kind, (dev_name, held_name) in FILES.items():
        d, h = read_jsonl(HERE / dev_name), read_jsonl(HERE / held_name)
        rows[kind] = d + h
        halves[kind] = ({r["id"] for r in d}, {r["id"] for r in h})
    dev = assign(rows)
    for kind in FILES:
        in_dev, in_held = halves[kind]
        if in_dev & in_held:
            errors.append(f"{kind}: ids in both halves: {sorted(in_dev & in_held)}")
        if in_dev != dev[kind]:
            extra, missing = sorted(in_dev - dev[kind]), sorted(dev[kind] - in_dev)
            errors.append(f"{kind}: development half is not the seed's split "
                          f"(extra {extra}, missing {missing})")
    return errors


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="src", nargs=2, metavar=("REQUESTS", "QUESTIONS"))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    if args.src:
        split_from(Path(args.src[0]), Path(args.src[1]))
    if args.check or not args.src:
        errors = check()
        for e in errors:
            print("split:", e, file=sys.stderr)
        if errors:
            return 1
        print(f"split: the halves are the seed's split (seed {SEED})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
