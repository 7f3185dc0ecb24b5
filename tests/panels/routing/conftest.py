"""The shared gcd design (Nangate45) and a small hand-written one for the routing panel tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.vlsi import shared_design_paths

# Two nets on a 10 x 10 µm die with a 2 µm GCell grid and no LEF: a and b run side by side on
# metal2 (0.4 µm apart), a climbs to metal3 through a DEF via.
SMALL_DEF = """VERSION 5.8 ;
DIVIDERCHAR "/" ;
BUSBITCHARS "[]" ;
DESIGN small ;
UNITS DISTANCE MICRONS 1000 ;
DIEAREA ( 0 0 ) ( 10000 10000 ) ;
GCELLGRID X 0 DO 5 STEP 2000 ;
GCELLGRID Y 0 DO 5 STEP 2000 ;
VIAS 1 ;
    - v23 + RECT metal2 ( -50 -50 ) ( 50 50 ) + RECT via2 ( -35 -35 ) ( 35 35 )
      + RECT metal3 ( -50 -50 ) ( 50 50 ) ;
END VIAS
COMPONENTS 0 ;
END COMPONENTS
PINS 2 ;
    - pa + NET a + DIRECTION INPUT + USE SIGNAL
        + LAYER metal2 ( -50 -50 ) ( 50 50 )
        + PLACED ( 1000 1000 ) N ;
    - pb + NET b + DIRECTION INPUT + USE SIGNAL
        + LAYER metal2 ( -50 -50 ) ( 50 50 )
        + PLACED ( 1000 1400 ) N ;
END PINS
NETS 2 ;
    - a ( PIN pa )
      + ROUTED metal2 ( 1000 1000 ) ( 8000 1000 ) v23
      NEW metal3 ( 8000 1000 ) ( 8000 6000 ) ;
    - b ( PIN pb )
      + ROUTED metal2 ( 1000 1400 ) ( 8000 1400 ) ;
END NETS
END DESIGN
"""


@pytest.fixture(scope="session")
def gcd() -> tuple[Path, Path]:
    """(LEF, DEF) of the shared routed gcd design; skipped (never under CI) without it."""
    found = shared_design_paths()
    if found is None:
        pytest.skip("../shared/data/vlsi (the gcd design) is absent")
    return found


@pytest.fixture
def small_def(tmp_path: Path) -> Path:
    path = tmp_path / "small.def"
    path.write_text(SMALL_DEF)
    return path
