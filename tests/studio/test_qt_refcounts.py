"""The Qt bindings must not leak or lose references on the calls our plots make thousands of
times: PySide6 6.12.0 dropped one reference to ``None`` per ``QPainterPath.reserve()`` (which
pyqtgraph calls for every curve it turns into a path), and the process aborted with
``none_dealloc`` once ``None`` ran out, mid test suite or mid session. pyproject.toml keeps
PySide6 below that release; this test fails on any release that does it again."""

from __future__ import annotations

import sys

import numpy as np
import pytest

CALLS = 2_000


def _lost_references(call, rounds: int = 3) -> dict[str, int]:
    """How many references to None, True and False ``CALLS`` calls of ``call`` lose: the
    fewest over ``rounds`` rounds, so another thread freeing objects at the same moment cannot
    pass for a leak (a binding that loses one per call loses ``CALLS`` every round)."""
    singletons = {"None": None, "True": True, "False": False}
    call()  # warm caches first
    lost = {name: CALLS for name in singletons}
    for _ in range(rounds):
        before = {name: sys.getrefcount(value) for name, value in singletons.items()}
        for _ in range(CALLS):
            call()
        for name, value in singletons.items():
            lost[name] = min(lost[name], before[name] - sys.getrefcount(value))
    return lost


def test_painter_paths_keep_their_references(qapp) -> None:
    from PySide6.QtGui import QPainterPath

    def reserve() -> None:
        QPainterPath().reserve(8)

    lost = _lost_references(reserve)
    assert all(count < CALLS // 10 for count in lost.values()), lost


@pytest.mark.parametrize("points", [100, 40_000])  # one polygon; the chunked path
def test_pyqtgraph_curves_keep_their_references(qapp, points: int) -> None:
    import pyqtgraph as pg

    x = np.linspace(0.0, 1.0, points)
    y = np.sin(x)
    lost = _lost_references(lambda: pg.arrayToQPath(x, y, connect="all"))
    assert all(count < CALLS // 10 for count in lost.values()), lost
