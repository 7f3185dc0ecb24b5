"""The Welcome page's buttons run commands (issue 37): a card opens its paper's panel
(``welcome.open_paper``), a recent file and "Open a file…" run ``app.open``, the filter
``welcome.filter``; an unknown paper or one not available yet is refused and nothing moves."""

from __future__ import annotations

import pytest

from studio.commands import CommandRefused


@pytest.fixture
def log(main_window):
    seen = []
    main_window.commands.listen(seen.append)
    return seen


def test_a_card_opens_its_paper_and_the_log_names_it(main_window, log) -> None:
    card = main_window.welcome.card("eos")
    card.button.click()
    assert main_window.tabs.currentWidget() is main_window.panel_widgets["lab"]
    assert log[-1].python() == 'studio.command("welcome.open_paper", paper="eos")'


def test_open_paper_refusals_change_nothing(main_window) -> None:
    with pytest.raises(CommandRefused, match=r"no paper 'eoss' \(did you mean eos"):
        main_window.command("welcome.open_paper", paper="eoss")
    with pytest.raises(CommandRefused, match="paper is required"):
        main_window.command("welcome.open_paper")
    coming = next((c for c in main_window.welcome.cards if not c.paper.available), None)
    if coming is not None:
        with pytest.raises(CommandRefused, match="is not available yet"):
            main_window.command("welcome.open_paper", paper=coming.paper.slug)
    assert main_window.tabs.currentWidget() is main_window.welcome
    assert main_window.panel_widgets == {}


def test_show_coming_refuses_an_available_paper(main_window) -> None:
    with pytest.raises(CommandRefused, match="is available now"):
        main_window.command("welcome.show_coming", paper="eos")
    with pytest.raises(CommandRefused, match="no paper 'zzz'"):
        main_window.command("welcome.show_coming", paper="zzz", on=True)
    coming = next((c for c in main_window.welcome.cards if not c.paper.available), None)
    if coming is None:
        pytest.skip("every paper is available")
    main_window.command("welcome.show_coming", paper=coming.paper.slug, on=True)
    assert coming.coming_label.isVisible() and coming.button.isChecked()
    coming.button.click()  # the user closes it again
    assert not coming.coming_label.isVisible()


def test_filter_from_a_script_and_as_the_user_types(main_window, log, qtbot) -> None:
    welcome = main_window.welcome
    assert main_window.command("welcome.filter", text="flow") == len(welcome.visible_papers())
    assert welcome.filter.text() == "flow" and "eos" not in welcome.visible_papers()
    with pytest.raises(CommandRefused, match="text: Input should be a valid string"):
        main_window.command("welcome.filter", text=3)
    assert welcome.filter.text() == "flow"
    welcome.filter.clear()
    qtbot.keyClicks(welcome.filter, "eos")
    assert "eos" in welcome.visible_papers() and "ccfm" not in welcome.visible_papers()
    typed = [i for i in log if i.command.id == "welcome.filter" and i.source == "user"]
    assert typed[-1].args == {"text": "eos"}


def test_recent_files_and_open_a_file_run_app_open(main_window, tmp_path, log, qtbot,
                                                   monkeypatch) -> None:
    from PySide6.QtWidgets import QPushButton, QToolButton

    smiles = tmp_path / "mine.smi"
    smiles.write_text("CCO ethanol\n")
    main_window.remember_file(smiles)
    button = next(b for b in main_window.welcome.findChildren(QToolButton)
                  if b.objectName() == "recentFile" and b.toolTip() == str(smiles))
    button.click()
    assert log[-1].python() == f'studio.command("app.open", paths=["{smiles}"])'
    qtbot.waitUntil(lambda: "molecules" in main_window.panel_widgets, timeout=10_000)
    asked = []
    monkeypatch.setattr(main_window, "ask_open_files", lambda: asked.append(True))
    opener = next(b for b in main_window.welcome.findChildren(QPushButton)
                  if b.text() == "Open a file…")
    opener.click()
    assert asked == [True]
