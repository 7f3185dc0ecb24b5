"""Hostile inputs: each case of the corpus (tests/engine/hostile_corpus.py: zip and gzip
bombs, a 1080p clip, deep JSON, lying safetensors, non-UTF-8 names, 1000-atom SMILES, an
echoed API key) read by ``inspect`` or checked as a method input, each in its own process
under a 2 GiB address-space limit; its peak resident memory (the process and the workers it
started, Python and imports included) against 500 MB, its wall time against 10 s.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tests.engine.hostile_corpus import build_corpus, run_probe

PEAK_TARGET_MB = 500
TIME_TARGET_S = 10


def run() -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        cases = build_corpus(root / "files")
        (root / "workspace").mkdir()
        for case in cases.values():
            for probe in case.probes:
                outcome = run_probe(case, probe, root / "workspace")
                label = f"{case.name} ({outcome.probe}: {outcome.status})"
                rows.append({"name": f"{label} peak", "value": outcome.peak_mb, "unit": "MB",
                             "target": f"< {PEAK_TARGET_MB}",
                             "reference": "expected " + case.expect})
                rows.append({"name": f"{label} time", "value": outcome.wall_s, "unit": "s",
                             "target": f"< {TIME_TARGET_S}"})
    return rows
