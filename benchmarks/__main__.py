"""Run every ``benchmarks/bench_*.py`` module's ``run()`` and print one table.

Each ``run()`` returns rows ``{"name", "value", "unit", "target"?, "reference"?}``.
``python -m benchmarks engine`` runs only modules whose name contains "engine".
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    wanted = argv[1:] if len(argv) > 1 else []
    here = Path(__file__).parent
    rows = []
    for info in sorted(pkgutil.iter_modules([str(here)]), key=lambda m: m.name):
        if not info.name.startswith("bench_") or (wanted and not any(w in info.name
                                                                      for w in wanted)):
            continue
        module = importlib.import_module(f"benchmarks.{info.name}")
        print(f"running {info.name} ...", file=sys.stderr, flush=True)
        for row in module.run():
            rows.append({"module": info.name[6:], **row})
    print(f"{'benchmark':<48} {'value':>12} {'unit':<8} {'target':<12} reference")
    for row in rows:
        print(f"{row['module'] + ': ' + row['name']:<48} {row['value']:>12.4g} {row['unit']:<8} "
              f"{row.get('target', ''):<12} {row.get('reference', '')}")
    (here.parent / ".benchmarks").mkdir(exist_ok=True)
    (here.parent / ".benchmarks" / "latest.json").write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
