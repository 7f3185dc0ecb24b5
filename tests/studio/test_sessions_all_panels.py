"""Every installed panel open at once, with the shared data where a panel reads it: a session
round-trips each panel that implements the session protocol to the same view state (as data)
and the same picture, and names every panel that does not (never a silent partial restore)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication

from studio.sessions import open_session, panel_tabs, save_session
from tests.studio.test_sessions import _difference, _picture
from tests.studio.test_sessions_routing import PICTURE_TOLERANCE, _same

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
SAMPLES = {  # panel -> a file of the shared data it opens (where there is one)
    "crowd": SHARED / "crowd" / "eth_biwi_eth.txt",
    "molecules": SHARED / "molecules" / "GNEprop_known_abx.tsv",
    "dialogue": SHARED / "dialogue" / "hh-rlhf_harmless-base_test.jsonl.gz",
}
SETTLE_S = 1.5   # panels that read in a worker thread finish within this


def _settle(seconds: float = SETTLE_S) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.02)


def _stable_picture(widget, timeout_s: float = 8.0):
    """The widget's picture once it stops changing (pictures drawn in worker threads, such
    as molecule depictions, arrive a moment after the view is restored)."""
    last = _picture(widget)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        _settle(0.3)
        now = _picture(widget)
        if _difference(now, last) == 0.0:
            return now
        last = now
    return last


def _screen(window) -> tuple[dict, dict]:
    states, pictures = {}, {}
    for panel_id, widget in panel_tabs(window):
        if not callable(getattr(widget, "view_state", None)):
            continue
        window.tabs.setCurrentWidget(widget)
        pictures[panel_id] = _stable_picture(widget)
        states[panel_id] = widget.view_state()
    return states, pictures


def test_every_panel_round_trips_or_is_named(main_window, tmp_path):
    window = main_window
    window.resize(1800, 1000)
    for panel_id in sorted(window.panels.entries()):
        widget = window.open_panel(panel_id)
        if widget is None:
            continue
        sample = SAMPLES.get(panel_id)
        if sample is not None and sample.exists() and callable(getattr(widget, "open_file",
                                                                       None)):
            widget.open_file(str(sample))
    from engine.vlsi import shared_design_paths

    design = shared_design_paths()
    if design is not None:
        window.command("routing.open_design", def_path=str(design[1]),
                       lef_path=str(design[0]))
    _settle()
    opened = [panel_id for panel_id, _widget in panel_tabs(window)]
    if len(opened) < 2:
        pytest.fail(f"only {opened} of the installed panels opened")
    before_states, before_pictures = _screen(window)
    session = save_session(window, tmp_path / "all.studio")
    for index in reversed(range(window.tabs.count())):
        if window.tabs.widget(index) is not window.welcome:
            window.close_tab(index)

    report = open_session(window, session)
    _settle()
    assert report.done and not report.refused and not report.changed, report.lines()
    assert [panel_id for panel_id, _widget in panel_tabs(window)] == opened
    without = sorted(set(opened) - set(before_states))
    for panel_id in without:                               # named, not silently dropped
        assert any(panel_id in line for line in report.lines()), (panel_id, report.lines())
    after_states, after_pictures = _screen(window)
    assert set(after_states) == set(before_states)
    for panel_id, state in before_states.items():
        assert _same(after_states[panel_id], state), (panel_id, after_states[panel_id], state)
        assert _difference(after_pictures[panel_id], before_pictures[panel_id]) < \
            PICTURE_TOLERANCE, panel_id
