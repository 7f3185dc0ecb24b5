"""A shown fMRI panel over a test host, for the fMRI panel tests."""

from __future__ import annotations

import pytest

from panels.fmri.view import FmriPanel


@pytest.fixture
def show_panel(make_widget, qtbot, workspace_dir):
    """``show_panel(host, height=760)``: an FmriPanel on ``host``, shown and exposed."""
    def show(host, height: int = 760) -> FmriPanel:
        widget = make_widget(FmriPanel, host)
        widget.resize(1000, height)
        widget.show()
        qtbot.waitExposed(widget)
        return widget

    return show


@pytest.fixture
def panel(show_panel, fake_host) -> FmriPanel:
    return show_panel(fake_host)
