"""The controller's own start-up: what it does once per process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Two controllers in one fresh interpreter: the first start freezes start-up's objects
# out of the collector's full collections, the second freezes nothing more.
SCRIPT = textwrap.dedent("""
    import gc, json, tempfile
    from pathlib import Path
    from controller.service import Controller
    from controller.settings import Settings

    counts = [gc.get_freeze_count()]
    for _ in range(2):
        data = Path(tempfile.mkdtemp())
        controller = Controller(Settings(data_dir=data, database_url=f"sqlite:///{data}/s.db",
                                         process_user="self"))
        controller.start()
        counts.append(gc.get_freeze_count())
        controller.close()
    print(json.dumps(counts))
""")


def test_start_up_objects_are_frozen_out_of_full_collections_once() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    before, first, second = json.loads(done.stdout.strip().splitlines()[-1])
    assert before == 0 and first > 50_000, (before, first)  # the frameworks, the catalog
    assert second <= first  # a second controller freezes nothing more (some were freed)
