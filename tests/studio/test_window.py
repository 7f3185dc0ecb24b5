"""The main window without an engine: welcome page, panels, layout, settings, shortcuts."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QApplication, QMessageBox

from studio.catalogue import load_catalogue
from studio.main_window import MainWindow

SPECS = Path(__file__).resolve().parents[3] / "shared" / "papers"


def test_catalogue_lists_the_nineteen_papers():
    papers = load_catalogue()
    assert len(papers) == 19
    assert len({p.slug for p in papers}) == 19
    from engine.registry import all_methods

    # "available" exactly when the engine registers the paper's methods
    registered = {spec.paper for spec in all_methods().values()} - {"diagnostics"}
    assert {p.slug for p in papers if p.available} == registered
    assert all(p.title and p.one_line and p.panel for p in papers)
    assert all(p.coming for p in papers if not p.available)
    if SPECS.is_dir():  # every paper has its spec, and the other way round
        assert {p.slug for p in papers} == {f.stem for f in SPECS.glob("*.md")} - {"README"}


def test_window_opens_on_the_welcome_page_with_every_paper(main_window):
    assert main_window.tabs.currentWidget() is main_window.welcome
    cards = main_window.welcome.cards
    assert len(cards) == 19
    assert all(card.isVisible() for card in cards)
    eos = next(card for card in cards if card.paper.slug == "eos")
    assert eos.button.isEnabled() and "Open" in eos.button.text()
    coming = next((card for card in cards if not card.paper.available), None)
    if coming is not None:  # a paper whose panel is not built says what it will offer
        assert not coming.coming_label.isVisible()
        coming.button.click()
        assert coming.coming_label.isVisible()
        assert coming.paper.coming in coming.coming_label.text()


def test_filter_narrows_the_cards(main_window):
    main_window.welcome.filter.setText("flow")
    shown = main_window.welcome.visible_papers()
    assert {"ccfm", "branching_flows"} <= set(shown) and "eos" not in shown
    main_window.welcome.filter.setText("no such paper at all")
    assert main_window.welcome.visible_papers() == []
    assert main_window.welcome.no_match.isVisible()
    main_window.welcome.filter.clear()
    assert len(main_window.welcome.visible_papers()) == 19


def test_an_available_paper_opens_its_panel_on_that_paper(main_window, monkeypatch):
    chosen = []
    main_window.open_paper("eos")
    panel = main_window.panel_widgets.get("lab")
    if panel is None:  # the lab's widget is not importable: the user got a message instead
        assert main_window.errors and "Lab" in main_window.errors[-1][1]
        return
    assert main_window.tabs.currentWidget() is panel
    monkeypatch.setattr(panel, "select_paper", chosen.append)
    main_window.tabs.setCurrentIndex(0)
    main_window.open_paper("eos")  # the same panel again, not a second one
    assert chosen == ["eos"]
    assert main_window.tabs.count() == 2


def test_a_missing_panel_is_a_message_not_a_crash(main_window):
    assert main_window.open_panel("no-such-panel") is None
    assert main_window.errors[-1][0] == "Cannot open the panel"
    boxes = [w for w in QApplication.topLevelWidgets() if isinstance(w, QMessageBox)]
    assert any("no-such-panel" in box.text() for box in boxes)
    assert main_window.tabs.count() == 1


def test_shortcuts(main_window):
    def keys(action):
        return {s.toString() for s in action.shortcuts()}

    assert "Ctrl+O" in keys(main_window.open_action)
    assert "Ctrl+Z" in keys(main_window.undo_action)
    assert "Ctrl+Shift+Z" in keys(main_window.redo_action)
    assert "Ctrl+Q" in keys(main_window.quit_action)
    assert QKeySequence("Ctrl+,").toString() in keys(main_window.settings_action)
    every = {s.toString() for menu in main_window.menuBar().actions()
             for action in menu.menu().actions() for s in action.shortcuts()}
    assert {"F5", "Shift+F5", "F1"} <= every


def test_dock_layout_and_theme_persist(qtbot, qasync_loop, workspace_dir, studio_settings,
                                       studio_dirs):
    first = MainWindow(settings=studio_settings, workspace=workspace_dir,
                       log_dir=studio_dirs / "logs")
    qtbot.addWidget(first)
    first.show()
    qtbot.waitExposed(first)
    assert first.runs_dock_widget.isVisible()
    first.runs_dock_widget.hide()
    first.history_dock_widget.show()
    first.set_theme("light")
    first.close()

    second = MainWindow(settings=studio_settings, workspace=workspace_dir,
                        log_dir=studio_dirs / "logs")
    qtbot.addWidget(second)
    second.show()
    qtbot.waitExposed(second)
    try:
        assert not second.runs_dock_widget.isVisible()
        assert second.history_dock_widget.isVisible()
        assert second.settings.theme == "light"
        assert QApplication.instance().property("studioTheme") == "light"
        second.reset_layout()
        assert second.runs_dock_widget.isVisible()
    finally:
        second.set_theme("dark")
        second.close()


def test_settings_are_stored(main_window, tmp_path):
    from studio.settings_dialog import Choices

    other = tmp_path / "other-workspace"
    main_window.apply_settings(Choices(workspace=str(other), device="cpu",
                                       cluster="ray://head:10001", theme="dark"))
    assert main_window.settings.device == "cpu"
    assert main_window.settings.cluster == "ray://head:10001"
    assert main_window.settings.workspace == other
    assert main_window.workspace.root == other
    assert (other / "studio.sqlite").exists()
    assert main_window.bridge.workspace == str(other)


def test_the_view_menu_lists_every_panel(main_window, qtbot) -> None:
    view_menu = next(action.menu() for action in main_window.menuBar().actions()
                     if action.text() == "&View")
    view_menu.aboutToShow.emit()
    view_menu.aboutToShow.emit()  # listed once, however often the menu opens
    titles = [action.text() for action in view_menu.actions()]
    expected = {entry.title for panel_id, entry in main_window.panels.entries().items()
                if panel_id != "lab"}
    assert len(expected) >= 6 and expected <= set(titles)
    assert len(titles) == len(set(titles) - {""}) + titles.count("")
    main_window.panel_actions["dialogue"].trigger()
    assert main_window.tabs.currentWidget() is main_window.panel_widgets["dialogue"]


def test_welcome_cards_show_whole_labels_at_1280x800(main_window, qtbot) -> None:
    """"Open in fMRI 4D viewe": the card's buttons were cut at this size."""
    from PySide6.QtWidgets import QAbstractButton, QApplication

    main_window.resize(1280, 800)
    main_window.tabs.setCurrentIndex(0)
    qtbot.waitUntil(lambda: main_window.width() == 1280)
    QApplication.processEvents()
    cut = [(button.text(), button.width()) for card in main_window.welcome.cards
           for button in card.findChildren(QAbstractButton)
           if button.fontMetrics().horizontalAdvance(button.text().replace("&", ""))
           > button.contentsRect().width() - 8]
    assert not cut


def test_files_opened_from_a_panels_own_button_enter_recent_files(main_window, tmp_path) -> None:
    smiles = tmp_path / "mine.smi"
    smiles.write_text("CCO ethanol\n")
    panel = main_window.open_panel("molecules")
    assert panel.open_file(smiles) is not False  # what its "Open molecules…" button calls
    assert main_window.settings.recent_files()[0] == str(smiles.resolve())
    assert main_window.recent_menu.actions()[0].toolTip() == str(smiles.resolve())


def test_the_runs_dock_opens_each_output_in_the_panel_that_opens_it(main_window, tmp_path,
                                                                    qtbot) -> None:
    import nibabel as nib
    import numpy as np
    from PySide6.QtWidgets import QMenu

    run_dir = tmp_path / "runs" / "20260101-000000-abcdef"
    (run_dir / "artifacts").mkdir(parents=True)
    nib.save(nib.Nifti1Image(np.zeros((4, 4, 4, 3), np.float32), np.eye(4)),
             run_dir / "artifacts" / "generated.nii.gz")
    (run_dir / "artifacts" / "samples.smi").write_text("CCO\nCCN\n")
    record = main_window.bridge.jobs.register("20260101-000000-abcdef", "brainworld.generate",
                                              {}, run_dir=str(run_dir))
    record.outputs = {"generated": "artifacts/generated.nii.gz",
                      "samples": "artifacts/samples.smi", "summary": {"frames": 3},
                      "missing": "artifacts/gone.npy"}
    main_window.runs_dock.select(record.id)
    menu = QMenu()
    main_window.runs_dock.add_open_actions(menu)
    texts = [action.text() for action in menu.actions() if action.text()]
    assert texts == ["Open generated in fMRI 4D viewer",
                     "Open samples in Molecules"]
    next(a for a in menu.actions() if a.text().startswith("Open samples")).trigger()
    qtbot.waitUntil(lambda: "molecules" in main_window.panel_widgets, timeout=10_000)
    panel = main_window.panel_widgets["molecules"]
    qtbot.waitUntil(lambda: len(panel.model.entries) == 2, timeout=10_000)


def test_ctrl_e_exports_the_figure_of_the_tab_in_front_or_says_why_not(main_window, tmp_path,
                                                                         monkeypatch) -> None:
    """Ctrl+E on the fMRI tab wrote the runs dock's empty 0-1 plot without a word."""
    from PySide6.QtWidgets import QWidget

    class Figured(QWidget):
        def __init__(self) -> None:
            super().__init__()
            self.written: list[str] = []

        def export_figure(self, path):
            self.written.append(path)
            return path

        def info_line(self) -> str:
            return "t = 12 (24.0 s)"

    export = next(a for a in main_window.findChildren(QAction) if a.text() == "&Export plot…")
    assert export.shortcut().toString() == "Ctrl+E"
    export.trigger()  # Welcome, no run selected
    assert main_window.errors[-1] == ("Nothing to export", "Select a run in the runs dock to "
                                                           "export its plot.")
    bare = QWidget()
    main_window.tabs.addTab(bare, "Bare")
    main_window.tabs.setCurrentWidget(bare)
    export.trigger()
    assert main_window.errors[-1] == ("Nothing to export", "The Bare tab has no figure to "
                                                           "export.")
    from studio.widgets.plot_view import PlotSpecView

    empty = PlotSpecView()
    plotted = QWidget()
    plotted.current_plot = lambda: empty
    main_window.tabs.addTab(plotted, "Plotted")
    main_window.tabs.setCurrentWidget(plotted)
    export.trigger()
    assert main_window.errors[-1][1].startswith("The plot is empty")
    figured = Figured()
    main_window.tabs.addTab(figured, "Slices")
    main_window.tabs.setCurrentWidget(figured)
    target = str(tmp_path / "slices.png")
    from studio.widgets import figure_export

    captions: list[str] = []  # what the export dialog offers as the caption
    monkeypatch.setattr(figure_export, "ask_export",
                        lambda *args, **kw: captions.append(args[-1])
                        or figure_export.ExportChoice(Path(target)))
    export.trigger()
    assert figured.written == [target] and len(main_window.errors) == 3
    assert captions == ["t = 12 (24.0 s)"]  # the panel's information line
