"""The Settings dialog's reader budgets: stored, exported to the environment the engine
inherits, read back by the readers, and forgotten when set back to the default."""

from __future__ import annotations

import os

import pytest

from engine.io.limits import DECOMPRESSED, JSON_DEPTH
from studio.settings import Settings
from studio.settings_dialog import SettingsDialog


@pytest.fixture
def clean_budgets(monkeypatch):
    for name in [n for n in os.environ if n.startswith("STUDIO_MAX_")]:
        monkeypatch.delenv(name)
    monkeypatch.setattr("studio.settings.SHELL_BUDGETS", frozenset())
    monkeypatch.setattr("studio.settings_dialog.SHELL_BUDGETS", frozenset())
    yield
    for name in [n for n in os.environ if n.startswith("STUDIO_MAX_")]:
        monkeypatch.delenv(name)


def test_budgets_entered_reach_the_readers_and_a_later_session(qtbot, studio_settings,
                                                                clean_budgets, tmp_path):
    settings = Settings(studio_settings)
    dialog = SettingsDialog(settings, str(tmp_path))
    qtbot.addWidget(dialog)
    assert dialog.budget_spins["STUDIO_MAX_DECOMPRESSED_BYTES"].value() == 1024
    dialog.budget_spins["STUDIO_MAX_DECOMPRESSED_BYTES"].setValue(2048)
    dialog.budget_spins["STUDIO_MAX_JSON_DEPTH"].setValue(500)
    dialog._accept()
    assert os.environ["STUDIO_MAX_DECOMPRESSED_BYTES"] == str(2048 * 1024 * 1024)
    assert DECOMPRESSED.value == 2048 * 1024 * 1024 and JSON_DEPTH.value == 500
    os.environ.pop("STUDIO_MAX_JSON_DEPTH")
    Settings(studio_settings)  # a new session exports what was stored
    assert JSON_DEPTH.value == 500
    again = SettingsDialog(Settings(studio_settings), str(tmp_path))
    qtbot.addWidget(again)
    assert again.budget_spins["STUDIO_MAX_JSON_DEPTH"].value() == 500
    again.budget_spins["STUDIO_MAX_JSON_DEPTH"].setValue(JSON_DEPTH.default)
    again._accept()
    assert "STUDIO_MAX_JSON_DEPTH" not in os.environ
    assert Settings(studio_settings).budgets() == {
        "STUDIO_MAX_DECOMPRESSED_BYTES": 2048 * 1024 * 1024}


def test_a_budget_set_in_the_shell_wins_and_is_shown_as_such(qtbot, studio_settings,
                                                              monkeypatch, tmp_path):
    monkeypatch.setenv("STUDIO_MAX_JSON_DEPTH", "900")
    monkeypatch.setattr("studio.settings_dialog.SHELL_BUDGETS",
                        frozenset({"STUDIO_MAX_JSON_DEPTH"}))
    dialog = SettingsDialog(Settings(studio_settings), str(tmp_path))
    qtbot.addWidget(dialog)
    spin = dialog.budget_spins["STUDIO_MAX_JSON_DEPTH"]
    assert not spin.isEnabled() and "shell" in spin.toolTip()
    assert "STUDIO_MAX_JSON_DEPTH" not in dialog.budgets()
