"""The shared gcd design (Nangate45), a small hand-written one, and a shown routing panel whose
host keeps its edits in the shell's real undo history, for the routing panel tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QRectF
from PySide6.QtWidgets import QApplication

from engine.methods import chipstar
from engine.vlsi import shared_design_paths
from panels.routing.view import RoutingPanel
from tests.panels.conftest import FakeHost

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


class UndoHost(FakeHost):
    """A FakeHost whose edits go through the shell's own undo adapter (studio.undo), with
    autosave to a real workspace when one is given."""

    def __init__(self, run_root: Path, workspace=None) -> None:
        from studio.undo import EditHistory

        super().__init__(run_root, methods=[spec.describe() for spec in chipstar.SPECS])
        self._params.update({spec.id: spec.params for spec in chipstar.SPECS})
        self.history = EditHistory(workspace)

    def push_edit(self, document, command, model) -> None:
        self.history.push(document, command, model)

    def forget_edits(self, document) -> None:
        self.history.forget(document)

    def restore_edits(self, document, model, decode_edit) -> int:
        return self.history.restore(document, model, decode_edit)


@pytest.fixture
def host(tmp_path, qapp, workspace):
    return UndoHost(tmp_path / "runs", workspace)


@pytest.fixture
def panel(host, make_widget, qtbot) -> RoutingPanel:
    widget = make_widget(RoutingPanel, host)
    widget.resize(1300, 800)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


@pytest.fixture
def small(history_host, make_widget, qtbot, small_def) -> RoutingPanel:
    """The small design shown whole (0-10 µm), edited through a real undo history."""
    panel = make_widget(RoutingPanel, history_host)
    panel.resize(1300, 800)
    panel.show()
    qtbot.waitExposed(panel)
    assert panel.open_design(small_def, None)
    panel.canvas.box.setRange(QRectF(0, 0, 10, 10), padding=0)
    QApplication.processEvents()
    return panel
