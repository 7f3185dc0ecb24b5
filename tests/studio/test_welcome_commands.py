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
    assert not any(card.coming_label.isVisible() for card in main_window.welcome.cards)


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


def _papers():
    from studio.catalogue import Paper

    def paper(slug: str, status: str) -> Paper:
        return Paper(slug=slug, title=f"Paper {slug}", one_line="one line", panel="lab",
                     panel_title="Lab", area="theory", status=status,
                     coming="a viewer of its curves", methods=(f"{slug}.",))

    return (paper("ready", "available"), paper("later", "coming"))


def test_a_coming_paper_shows_what_is_coming_and_cannot_be_opened(qtbot) -> None:
    """Every paper of the catalogue is available today: a page of two made-up papers, in a
    window whose registry has the welcome commands."""
    from PySide6.QtWidgets import QMainWindow

    from studio import shell_commands
    from studio.commands import CommandRegistry
    from studio.welcome import WelcomePage

    registry = CommandRegistry()
    registry.add_all(c for c in shell_commands.COMMANDS if c.scope == "welcome")
    host = QMainWindow()
    host.commands = registry
    host.welcome = WelcomePage(_papers())
    host.opened = []
    host.open_paper = host.opened.append
    host.setCentralWidget(host.welcome)
    registry.bind("welcome", host)
    qtbot.addWidget(host)
    host.show()
    seen = []
    registry.listen(seen.append)
    later = host.welcome.card("later")
    later.button.click()
    assert later.coming_label.isVisible() and later.button.isChecked()
    assert seen[-1].python() == 'studio.command("welcome.show_coming", paper="later", on=True)'
    with pytest.raises(CommandRefused, match=r"Paper later is not available yet \(coming to "
                                             r"the Lab: a viewer of its curves\)"):
        registry.run("welcome.open_paper", paper="later")
    assert host.opened == []
    registry.run("welcome.show_coming", paper="later")  # none: the other way round
    assert not later.coming_label.isVisible() and not later.button.isChecked()
    host.welcome.card("ready").button.click()
    assert host.opened == ["ready"]


def test_a_page_outside_a_window_says_what_was_asked_by_its_signals(qtbot) -> None:
    from studio.welcome import WelcomePage

    page = WelcomePage(_papers())
    qtbot.addWidget(page)
    asked = []
    page.paper_requested.connect(asked.append)
    page.card("ready").button.click()
    page.card("later").button.click()
    assert asked == ["ready"] and page.card("later").coming_label.isVisibleTo(page)
