"""The shared Nangate45 LEF and routed gcd DEF, read once per test session."""

from __future__ import annotations

import pytest

from engine.vlsi import shared_design_paths


@pytest.fixture(scope="session")
def gcd_paths():
    paths = shared_design_paths()
    if paths is None:
        pytest.skip("../shared/data/vlsi (Nangate45.lef, gcd_nangate45_route.def) is absent")
    return paths


@pytest.fixture(scope="session")
def gcd_lef(gcd_paths):
    from engine.vlsi.lef import read_lef

    return read_lef(gcd_paths[0])


@pytest.fixture(scope="session")
def gcd_design(gcd_paths, gcd_lef):
    from engine.vlsi.def_ import read_def

    return read_def(gcd_paths[1], gcd_lef)
