"""``studio --script``: a script that opens the routed gcd design and exports its figure,
run headless in a fresh process, from launch to exit; beside it, the app's own cold start to
the window shown (``bench_gui``'s child) in the same run, as the anchor.

The script times its own work (open and export) and prints it; what remains of the wall time
is the cost of going headless (start-up, no engine unless asked, shutdown): target <= 3 s.
``python -m benchmarks script`` (or this file alone) prints the table. No assertions.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 3
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = """
import json, time
started = time.monotonic()
studio.open({design!r})
studio.export({figure!r})
print(json.dumps({{"work_s": time.monotonic() - started}}))
"""


def run() -> list[dict]:
    from benchmarks.bench_gui import _child
    from engine.vlsi import shared_design_paths

    design = shared_design_paths()
    if design is None:
        return [{"name": "studio --script open and export", "value": float("nan"),
                 "unit": "s", "reference": "../shared/data/vlsi is absent"}]
    with tempfile.TemporaryDirectory(prefix="studio-bench-") as home:
        walls, works = [], []
        for number in range(RUNS):
            wall, work = _script_run(Path(home), design[1], number)
            walls.append(wall)
            works.append(work)
        cold = [_child("cold", home)["shown_s"] for _ in range(RUNS)]
    overhead = [wall - work for wall, work in zip(walls, works, strict=True)]
    return [
        {"name": f"studio --script open + export, launch to exit (median of {RUNS})",
         "value": statistics.median(walls), "unit": "s",
         "reference": f"the work itself (open + export) {statistics.median(works):.2f} s"},
        {"name": "  of which headless overhead (wall - work)",
         "value": statistics.median(overhead), "unit": "s", "target": "<= 3.0",
         "reference": f"min {min(overhead):.2f}, max {max(overhead):.2f}"},
        {"name": f"app cold start to window shown (median of {RUNS})",
         "value": statistics.median(cold), "unit": "s",
         "reference": "the anchor, measured in this run (bench_gui's child)"},
    ]


def _script_run(home: Path, design: Path, number: int) -> tuple[float, float]:
    figure = home / f"route-{number}.png"
    script = home / "open_and_export.py"
    script.write_text(SCRIPT.format(design=str(design), figure=str(figure)), encoding="utf-8")
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT),
           "XDG_CONFIG_HOME": str(home / "config"), "STUDIO_LOG_DIR": str(home / "logs")}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "studio.app", "--workspace",
                           str(home / "workspace"), "--script", str(script)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    wall = time.monotonic() - started
    if done.returncode != 0 or not figure.exists():
        raise RuntimeError(f"studio --script failed ({done.returncode}): {done.stderr[-800:]}")
    work = json.loads(done.stdout.strip().splitlines()[-1])["work_s"]
    return wall, work


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))   # run as a file: the benchmarks package is importable
    for row in run():
        print(f"{row['name']:<62} {row['value']:>8.2f} {row['unit']:<3} "
              f"{row.get('target', ''):<8} {row.get('reference', '')}")
