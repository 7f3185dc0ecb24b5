"""open3d's coarse renderer, checked in a child process (the checks are in open3d_checks.py).

Why a child: Filament, open3d's renderer, runs on software Vulkan on CPU-only machines and
has been seen to stall for minutes on a loaded machine (2 runs of about 10). The child gets a
time limit and one more try; two stalls in a row, or any failed check, fail this test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECKS = Path(__file__).with_name("open3d_checks.py")
ROOT = Path(__file__).parents[3]
LIMIT_S = 150


def test_open3d_renderer_matches_the_ray_caster_and_switches_c2r() -> None:
    stalls = 0
    for _ in range(2):
        try:
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(CHECKS)],
                capture_output=True, text=True, timeout=LIMIT_S, cwd=ROOT, env=os.environ.copy())
        except subprocess.TimeoutExpired:
            stalls += 1
            continue
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        assert "5 passed" in done.stdout, done.stdout[-2000:]
        return
    pytest.fail(f"open3d's renderer stalled {stalls} times (over {LIMIT_S} s each)")
