"""The molecule panel on an in-process host, shown and closed after the test."""

from __future__ import annotations

import pytest

from panels.molecules.view import MoleculesPanel
from tests.panels.conftest import FakeHost


@pytest.fixture
def panel(tmp_path, qapp, make_widget):
    widget = make_widget(MoleculesPanel, FakeHost(tmp_path / "runs"))
    widget.resize(1100, 800)
    widget.show()
    return widget
