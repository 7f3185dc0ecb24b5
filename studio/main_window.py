"""The main window: welcome page and panels in tabs, the runs dock, menus, status bar.

It owns the pieces the rest of the shell shares: the engine bridge, the workspace (read and
written from the GUI only for runs' notes, deletions and autosaved edits), the undo histories
(one per tab, in a ``QUndoGroup`` whose active stack follows the tab in front, so Ctrl+Z only
touches what the user sees), a small thread pool for disk work, and a ``StudioHost`` per panel.
"""

from __future__ import annotations

import asyncio
import html
import importlib
import inspect
import logging
import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from PySide6.QtCore import QByteArray, QEvent, QObject, QSettings, Qt, QTimer, QUrl
from PySide6.QtGui import (
    QAction,
    QActionGroup,
    QDesktopServices,
    QIcon,
    QKeySequence,
    QUndoGroup,
)
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QFileDialog,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QTabWidget,
    QTextEdit,
    QWidget,
)

from engine.provenance import studio_version
from engine.workspace import Workspace
from studio import catalogue, shell_commands
from studio.bridge import EngineBridge
from studio.command_log import CommandLog
from studio.command_widgets import command_action
from studio.commands import CommandRegistry
from studio.history_view import EditHistoryView
from studio.host import StudioHost, error_message
from studio.jobs import ADDED, REMOVED, STATE
from studio.panel_registry import PanelRegistry, PanelUnavailable
from studio.paths import log_dir as default_log_dir
from studio.paths import resource
from studio.runs_dock import RunsDock, copy_checkpoint
from studio.settings import Settings
from studio.theme import ENGINE_COLOURS, apply_theme
from studio.undo import DISCARD, KEEP_ASIDE, REPLAY, EditHistory, SavedEditsConflict
from studio.welcome import WelcomePage

log = logging.getLogger("studio.window")

DEFAULT_SIZE = (1360, 860)
PREWARM_DELAY_MS = 300
RUNS_DOCK_HEIGHT = 300
ENGINE_STATE_TEXT = {"starting": "Engine starting…", "ready": "Engine ready",
                     "busy": "Engine busy", "restarting": "Engine restarting…",
                     "stopped": "Engine stopped"}


class MainWindow(QMainWindow):
    def __init__(self, settings: QSettings | None = None,
                 workspace: str | os.PathLike | None = None,
                 log_dir: str | os.PathLike | None = None,
                 registry: PanelRegistry | None = None) -> None:
        super().__init__()
        self.settings = Settings(settings)
        self.workspace, problem = _open_workspace(workspace or self.settings.workspace)
        self.log_dir = Path(log_dir) if log_dir else default_log_dir()
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="studio-io")
        self.bridge = EngineBridge(self.workspace.root, device=self.settings.device,
                                   log_dir=self.log_dir, parent=self)
        self.undo_group = QUndoGroup(self)
        self.commands = CommandRegistry()   # every action, by id (studio.commands)
        self.commands.on_error = self.show_error
        self.commands.find_target = self._command_target
        shell_commands.register(self.commands, self)
        self._palette = None
        self._panel_commands_loaded: set[str] = set()
        self.histories: dict[str, EditHistory] = {}   # panel id -> its tab's history
        self._window_history = self._new_history()    # tabs without a panel (Welcome)
        self.host = StudioHost(self, self._window_history)
        self.panels = registry or PanelRegistry()
        self.panel_widgets: dict[str, QWidget] = {}
        self.errors: list[tuple[str, str]] = []   # every error shown, for the log and tests
        self._closed = False
        self._message_boxes: list[QMessageBox] = []

        self.setObjectName("studioMainWindow")
        self.setWindowIcon(QIcon(str(resource("icons", "studio.svg"))))
        self.setAcceptDrops(True)
        self.setDockOptions(QMainWindow.DockOption.AnimatedDocks
                            | QMainWindow.DockOption.AllowTabbedDocks)
        self._build_central()
        self.undo_group.setActiveStack(self._window_history.stack)
        self._build_docks()
        self._build_menus()
        self._build_status_bar()
        self._install_tools()
        self._default_state = self.saveState()
        self._restore_layout()
        self.set_theme(self.settings.theme, store=False)
        self._update_title()

        if problem:
            QTimer.singleShot(0, lambda: self.show_error("Cannot use the workspace", problem))
        self.bridge.state_changed.connect(self._on_engine_state)
        # each engine start marks runs of a dead one failed: show what the index says now
        self.bridge.methods_changed.connect(lambda _methods: self.runs_dock.load_history())
        self.bridge.resubmit_offered.connect(self._offer_resubmission)
        self.bridge.engine_lost.connect(lambda reason: self.status(f"The {reason}; restarting"))
        self.bridge.jobs.listen(lambda _record, what: self._update_job_count()
                                if what in (ADDED, STATE, REMOVED) else None)

    # -- building ------------------------------------------------------------------------------
    def _build_central(self) -> None:
        self.tabs = QTabWidget()
        self.tabs.setObjectName("centralTabs")
        self.tabs.setDocumentMode(True)
        self.tabs.setTabsClosable(True)
        self.tabs.setMovable(True)
        self.tabs.tabCloseRequested.connect(self.close_tab)
        self.tabs.currentChanged.connect(self._on_tab_changed)
        self.welcome = WelcomePage(catalogue.load_catalogue(), registry=self.commands)
        self.welcome.set_recent_files(self.settings.recent_files())
        self.tabs.addTab(self.welcome, "Welcome")
        for side in (self.tabs.tabBar().ButtonPosition.RightSide,
                     self.tabs.tabBar().ButtonPosition.LeftSide):
            self.tabs.tabBar().setTabButton(0, side, None)
        self.setCentralWidget(self.tabs)

    def _build_docks(self) -> None:
        self.runs_dock = RunsDock(self)
        self.runs_dock_widget = self._dock("Runs", "runsDock", self.runs_dock,
                                           Qt.DockWidgetArea.BottomDockWidgetArea)
        self.undo_view = EditHistoryView(self.undo_group)
        self.history_dock_widget = self._dock("Edit history", "historyDock", self.undo_view,
                                              Qt.DockWidgetArea.RightDockWidgetArea)
        self.history_dock_widget.hide()
        self.command_log = CommandLog(self.commands)
        self.command_log_dock_widget = self._dock("Command log", "commandLogDock",
                                                  self.command_log,
                                                  Qt.DockWidgetArea.BottomDockWidgetArea)
        self.tabifyDockWidget(self.runs_dock_widget, self.command_log_dock_widget)
        self.runs_dock_widget.raise_()
        self.command_log_dock_widget.hide()
        self.resizeDocks([self.runs_dock_widget], [RUNS_DOCK_HEIGHT], Qt.Orientation.Vertical)

    def _dock(self, title: str, name: str, widget: QWidget, area) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(name)
        dock.setWidget(widget)
        dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetClosable
                         | QDockWidget.DockWidgetFeature.DockWidgetMovable
                         | QDockWidget.DockWidgetFeature.DockWidgetFloatable)
        self.addDockWidget(area, dock)
        return dock

    def _action(self, menu, command_id: str, text: str = "", args=None) -> QAction:
        """A menu entry that runs a registered command (its shortcut and help come along)."""
        action = command_action(self, self.commands, command_id, text, args)
        menu.addAction(action)
        return action

    def _build_menus(self) -> None:
        """Every entry runs a command (``studio.shell_commands``), as the palette and scripts
        do; the menus only place them."""
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        self.open_action = self._action(file_menu, "app.open", "&Open…")
        self.recent_menu = file_menu.addMenu("Open &recent")
        self._fill_recent_menu()
        file_menu.addSeparator()
        self._action(file_menu, "app.export_figure", "&Export plot…")
        self._action(file_menu, "app.export_checkpoint", "Export &checkpoint…")
        file_menu.addSeparator()
        self.settings_action = self._action(file_menu, "app.settings", "&Settings…")
        file_menu.addSeparator()
        self.quit_action = self._action(file_menu, "app.quit", "&Quit")

        edit_menu = bar.addMenu("&Edit")
        self.undo_action = self._action(edit_menu, "edit.undo", "&Undo")
        self.redo_action = self._action(edit_menu, "edit.redo", "&Redo")
        self._follow_undo_group()
        self._text_undo = TextBoxUndo(self.undo_action, self.redo_action, self)
        QApplication.instance().installEventFilter(self._text_undo)

        view_menu = bar.addMenu("&View")
        self._action(view_menu, "view.welcome", "&Welcome")
        self._action(view_menu, "view.lab", "&Lab")
        # every other panel, listed when the menu first opens (discovering panels costs
        # start-up time the window does not need)
        self._panels_separator = view_menu.addSeparator()
        self.panel_actions: dict[str, QAction] = {}
        view_menu.aboutToShow.connect(lambda: self._list_panels(view_menu))
        view_menu.addSeparator()
        for command_id, text, dock in (("view.runs", "&Runs", self.runs_dock_widget),
                                       ("view.edit_history", "&Edit history",
                                        self.history_dock_widget),
                                       ("view.command_log", "&Command log",
                                        self.command_log_dock_widget)):
            toggle = self._action(view_menu, command_id, text)
            toggle.setCheckable(True)
            toggle.setChecked(not dock.isHidden())
            dock.visibilityChanged.connect(
                lambda _visible, a=toggle, d=dock: a.setChecked(not d.isHidden()))
        self._action(view_menu, "view.palette", "Command &palette…")
        view_menu.addSeparator()
        theme_menu = view_menu.addMenu("&Theme")
        self.theme_actions = QActionGroup(self)
        for theme in ("dark", "light"):
            action = command_action(self, self.commands, "view.theme", theme.capitalize(),
                                    lambda t=theme: {"theme": t})
            action.setCheckable(True)
            action.setData(theme)
            self.theme_actions.addAction(action)
            theme_menu.addAction(action)
        self._action(view_menu, "view.reset_layout", "Reset &layout")
        self._action(view_menu, "view.close_tab", "Close &tab")

        runs_menu = bar.addMenu("&Runs")
        self._action(runs_menu, "runs.rerun", "&Rerun selected")
        self._action(runs_menu, "runs.rerun_with_changes", "Rerun with &changes…")
        self._action(runs_menu, "runs.cancel", "&Cancel selected")

        engine_menu = bar.addMenu("E&ngine")
        self._action(engine_menu, "engine.restart", "&Restart engine")
        self._action(engine_menu, "engine.show_log", "Show engine &log")

        help_menu = bar.addMenu("&Help")
        self._action(help_menu, "help.shortcuts", "&Keyboard shortcuts")
        self._action(help_menu, "help.log_folder", "Open &log folder")
        self._action(help_menu, "help.about", "&About Studio")

    def _follow_undo_group(self) -> None:
        """Undo and Redo say what they would undo (redo) in the tab in front, and are enabled
        only when there is something, as QUndoGroup's own actions did."""
        group = self.undo_group

        def update(*_args) -> None:
            for action, prefix, text, can in (
                    (self.undo_action, "&Undo", group.undoText(), group.canUndo()),
                    (self.redo_action, "&Redo", group.redoText(), group.canRedo())):
                action.setText(f"{prefix} {text}" if text else prefix)
                action.setEnabled(can)

        for signal in (group.undoTextChanged, group.redoTextChanged, group.canUndoChanged,
                       group.canRedoChanged, group.activeStackChanged,
                       group.indexChanged, group.cleanChanged):
            signal.connect(update)
        update()

    def _build_status_bar(self) -> None:
        bar = self.statusBar()
        self.jobs_label = QLabel("")
        self.engine_label = QLabel("")
        self.engine_label.setObjectName("engineState")
        self.workspace_label = QLabel("")
        self.workspace_label.setObjectName("emptyNote")
        bar.addPermanentWidget(self.workspace_label)
        bar.addPermanentWidget(self.jobs_label)
        bar.addPermanentWidget(self.engine_label)
        self._on_engine_state(self.bridge.state)
        self._update_workspace_label()

    # -- life ----------------------------------------------------------------------------------
    def start(self, files: list[str] | tuple[str, ...] = ()) -> None:
        """After the window is shown: start the engine, list old runs, open FILES."""
        self.start_engine()
        if files:
            self.open_paths(list(files))

    def start_engine(self) -> None:
        self.bridge.start()
        self.runs_dock.load_history()
        QTimer.singleShot(PREWARM_DELAY_MS, self._prewarm)

    def _prewarm(self) -> None:
        """Import the plot widget and the panels' widget modules in a worker thread while the
        user reads the welcome page: on the main thread the first plot would freeze the
        window for a second (pyqtgraph's import), in a thread it costs a few milliseconds of
        stall. Import order is safe: Python's import locks make a main-thread import of the
        same module wait for this one. PySide's types are made on this thread first (their lazy
        creation is not thread-safe: ``studio.qt_types``)."""
        from studio.qt_types import resolve_then

        def prewarm() -> None:
            _import_all(["studio.widgets.plot_view", "studio.shell_command_args",
                         *self.panels.factory_modules()])

        resolve_then(lambda: self.run_in_thread(
            prewarm, on_done=lambda _: self.runs_dock.prepare_plot(),
            on_error=lambda exc: log.warning("prewarming failed: %s", exc)))

    def restart_engine(self) -> None:
        self.status("Restarting the engine")
        self.bridge.restart()

    def shutdown(self) -> None:
        """Save the layout, stop the engine, close panels (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.settings.save_window_state(self.saveGeometry(), self.saveState())
        self.settings.sync()
        self.bridge.stop_now()
        self.runs_dock.model.detach()
        for widget in list(self.panel_widgets.values()):
            widget.close()
        for box in self._message_boxes:
            box.close()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        self.shutdown()
        super().closeEvent(event)

    # -- background work -----------------------------------------------------------------------
    def run_in_thread(self, fn, *args, on_done=None, on_error=None) -> None:
        """``fn(*args)`` in the I/O pool; ``on_done(result)`` back on the main thread."""
        if self._closed:
            return

        async def work():
            result = await asyncio.get_event_loop().run_in_executor(self.pool, fn, *args)
            if on_done is not None:
                on_done(result)

        self.bridge.spawn(work(), on_error=on_error or (
            lambda exc: self.show_error("Something went wrong", error_message(exc))))

    def submit(self, method: str, params: dict, inputs: dict | None = None, seed: int = 0,
               on_accepted=None, on_error=None) -> None:
        """Submit a job; the runs dock selects it once the engine accepts it."""
        def accepted(job_id: str) -> None:
            self.runs_dock.select(job_id)
            self.status(f"Started {method} ({job_id})")
            if on_accepted is not None:
                on_accepted(job_id)

        self.host.submit_job(method, params, inputs, seed, on_accepted=accepted,
                             on_error=on_error)

    # -- commands ------------------------------------------------------------------------------
    def command(self, command_id: str, /, **args):
        """Run a registered command as a script does (``studio.command(id, **args)``):
        returns its result, raises ``CommandRefused`` with the reason."""
        return self.commands.run(command_id, **args)

    def _command_target(self, scope: str):
        """A command of a panel that is not open opens it (the panel binds its state as it
        is built); ``None`` when no panel has that id."""
        if self.panels.get(scope) is None:
            return None
        self.open_panel(scope)
        return None  # the registry reads the target the panel bound

    # -- panels and papers ---------------------------------------------------------------------
    def open_panel(self, panel_id: str) -> QWidget | None:
        """Show the panel's tab, building the panel the first time."""
        widget = self.panel_widgets.get(panel_id)
        if widget is None:
            history = self._new_history()
            try:
                widget = self.panels.create(panel_id, StudioHost(self, history))
            except PanelUnavailable as exc:
                self.show_error("Cannot open the panel", str(exc))
                return None
            except Exception as exc:  # a panel's own bug must not take the window down
                log.exception("panel %s failed to build", panel_id)
                self.show_error("Cannot open the panel",
                                f"The {panel_id} panel failed to start: {exc}")
                return None
            entry = self.panels.get(panel_id)
            self.panel_widgets[panel_id] = widget
            self.histories[panel_id] = history
            self.tabs.addTab(widget, entry.title if entry else panel_id)
        self.tabs.setCurrentWidget(widget)
        return widget

    def _list_panels(self, menu) -> None:
        """The View menu's entries for the panels besides the lab (added once)."""
        for panel_id, entry in sorted(self.panels.entries().items(),
                                      key=lambda item: item[1].title):
            if panel_id == "lab" or panel_id in self.panel_actions:
                continue
            action = command_action(self, self.commands, "view.panel", entry.title,
                                    lambda p=panel_id: {"panel": p})
            action.setStatusTip(f"Show the {entry.title}")
            menu.insertAction(self._panels_separator, action)
            self.panel_actions[panel_id] = action

    # -- undo: a history per tab ---------------------------------------------------------------
    def _new_history(self) -> EditHistory:
        history = EditHistory(self.workspace, parent=self)
        history.ask = self._ask_saved_edits
        history.on_error = self.show_error
        self.undo_group.addStack(history.stack)
        return history

    @property
    def history(self) -> EditHistory:
        """The history of the tab in front (Edit > Undo and Ctrl+Z act on it)."""
        widget = self.tabs.currentWidget() if hasattr(self, "tabs") else None
        for panel_id, panel in self.panel_widgets.items():
            if panel is widget:
                return self.histories[panel_id]
        return self._window_history

    def _on_tab_changed(self, _index: int) -> None:
        self.undo_group.setActiveStack(self.history.stack)

    def _ask_saved_edits(self, conflict: SavedEditsConflict, answer) -> None:
        """Saved edits made on other content at this path: the user decides (non-modal, so
        the engine's events keep flowing); closing the box decides nothing, and they are
        offered again next time."""
        box = QMessageBox(QMessageBox.Icon.Question, "Saved edits for another version",
                          conflict.message(), QMessageBox.StandardButton.NoButton, self)
        choices: dict[QPushButton, str] = {}
        for text, choice, role in (("Replay", REPLAY, QMessageBox.ButtonRole.AcceptRole),
                                   ("Discard", DISCARD, QMessageBox.ButtonRole.DestructiveRole),
                                   ("Keep aside", KEEP_ASIDE, QMessageBox.ButtonRole.RejectRole)):
            choices[box.addButton(text, role)] = choice
        self._message_boxes.append(box)

        def answered(_result: int) -> None:
            choice = choices.get(box.clickedButton())
            self._forget_box(box)
            if choice is not None:
                answer(choice)
                done = {REPLAY: "replayed", DISCARD: "discarded", KEEP_ASIDE: "kept aside"}
                self.status(f"Saved edits of {conflict.path.name}: {done[choice]}")

        box.finished.connect(answered)
        box.open()

    def open_paper(self, slug: str) -> None:
        paper = catalogue.paper(slug)
        if not paper.available:
            self.show_info(paper.title, f"Coming to the {paper.panel_title}: {paper.coming}")
            return
        widget = self.open_panel(paper.panel)
        select = getattr(widget, "select_paper", None)
        if callable(select):
            select(slug)

    def close_tab(self, index: int) -> None:
        widget = self.tabs.widget(index)
        if widget is None or widget is self.welcome:
            return
        history = None
        for panel_id, panel in list(self.panel_widgets.items()):
            if panel is widget:
                del self.panel_widgets[panel_id]
                history = self.histories.pop(panel_id)
        self.tabs.removeTab(index)
        widget.close()  # the panel forgets its documents (their autosave stays)
        widget.deleteLater()
        if history is not None:
            self.undo_group.removeStack(history.stack)
            history.deleteLater()
        self._on_tab_changed(self.tabs.currentIndex())

    # -- files ---------------------------------------------------------------------------------
    def ask_open_files(self) -> None:
        dialog = QFileDialog(self, "Open data files")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFiles)
        dialog.filesSelected.connect(
            lambda paths: self.commands.trigger("app.open", paths=list(paths)))
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    def open_paths(self, paths: list[str]) -> None:
        """Inspect each file off the main thread, then hand it to the panel that claims it."""
        for path in paths:
            self.bridge.spawn(self._open_path(str(path)), on_error=lambda exc, p=path:
                              self.show_error("Cannot open the file", f"{p}: {exc}"))

    def _install_tools(self) -> None:
        """The docks and menus built in modules of their own (paper claims, lineage, sessions,
        the console and macros), before the layout is restored so that their places come
        back with it."""
        from studio.claim_dock import install_claim_dock
        from studio.console import install_scripting
        from studio.lineage import install_lineage_dock
        from studio.sessions import install_sessions

        install_claim_dock(self)
        install_lineage_dock(self)
        self.sessions = install_sessions(self)
        install_scripting(self)  # the console dock, and macros under the command log

    async def _open_path(self, path: str) -> None:
        from engine.io import FormatError, inspect_file

        self.status(f"Reading {path}…")
        try:
            report = await asyncio.get_event_loop().run_in_executor(self.pool, inspect_file, path)
        except FormatError as exc:
            self.show_error("Cannot open the file", str(exc))
            return
        if report["format"] == "studio-session":
            self.sessions.open_from(path)
            return
        entry = self.panels.for_format(report["format"], report.get("panel", ""))
        if entry is None:
            self.show_error("No panel opens this file",
                            f"{path}: a {report['format']} file; the "
                            f"{report.get('panel') or 'matching'} panel is not installed.")
            return
        widget = self.open_panel(entry.id)
        if widget is None:
            return  # open_panel said why
        opener = getattr(widget, "open_file", None)
        if opener is None:
            self.show_error("Cannot open the file",
                            f"{path}: the {entry.title} panel cannot open files yet.")
            return
        if opener(path) is False:
            return  # the panel reported the problem itself
        self.remember_file(path)
        self.status(f"Opened {path} ({report['format']}) in {entry.title}")

    def panel_for_file(self, path: str | os.PathLike):
        """The panel that opens ``path`` (``PanelRegistry.for_file``), or ``None``."""
        return self.panels.for_file(path)

    def run_outputs(self, run_dir: Path, outputs: dict) -> list[tuple[str, Path]]:
        """A run's reported outputs that are files or folders in its folder, by name."""
        found = []
        for name, value in outputs.items():
            if isinstance(value, str) and value and (run_dir / value).exists():
                found.append((name, run_dir / value))
        return found

    def remember_file(self, path: str | os.PathLike) -> None:
        """A file the user opened, by File > Open, a drop or a panel's own button (every
        panel replays a document's saved edits when it opens it: ``StudioHost``), goes first
        in the recent files."""
        self.welcome.set_recent_files(self.settings.add_recent_file(str(path)))
        self._fill_recent_menu()

    def _fill_recent_menu(self) -> None:
        self.recent_menu.clear()
        files = self.settings.recent_files()
        for path in files:
            action = command_action(self, self.commands, "app.open", Path(path).name,
                                    lambda p=path: {"paths": [p]})
            action.setToolTip(path)
            self.recent_menu.addAction(action)
        if files:
            self.recent_menu.addSeparator()
            self.recent_menu.addAction(command_action(self, self.commands, "app.clear_recent",
                                                      "Clear the list"))
        else:
            self.recent_menu.addAction("(none yet)").setEnabled(False)

    def clear_recent_files(self) -> None:
        self.settings.clear_recent_files()
        self.welcome.set_recent_files([])
        self._fill_recent_menu()

    def dragEnterEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if event.mimeData().hasUrls() and any(u.isLocalFile() for u in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:  # noqa: N802 - Qt's name
        paths = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        if paths:
            event.acceptProposedAction()
            self.open_paths(paths)

    # -- export --------------------------------------------------------------------------------
    def current_plot(self):
        """The plot Ctrl+E writes: the tab in front's (a panel's ``current_plot()``); on the
        Welcome tab, the runs dock's. ``None`` when there is none."""
        widget = self.tabs.currentWidget()
        if widget is self.welcome:
            return self.runs_dock.plot
        finder = getattr(widget, "current_plot", None)
        return finder() if callable(finder) else None

    def export_current_plot(self) -> None:
        """Ctrl+E: the figure of the tab in front; a panel's own figure export (the fMRI
        slices, say) when it has no plot; otherwise the user is told why nothing is written."""
        widget = self.tabs.currentWidget()
        title = self.tabs.tabText(self.tabs.currentIndex())
        plot = self.current_plot()
        if plot is None and callable(getattr(widget, "export_figure", None)):
            self.export_panel_figure(widget, title)
            return
        if plot is None:
            self.show_error("Nothing to export", "Select a run in the runs dock to export its "
                            "plot." if widget is self.welcome
                            else f"The {title} tab has no figure to export.")
            return
        if not plot_has_data(plot):
            self.show_error("Nothing to export", "The plot is empty: run a method, or select "
                                                 "a run in the runs dock, first.")
            return
        self.export_plot(plot)

    def export_current_to(self, path: str, dpi: int | None = None, caption: bool = False
                          ) -> str:
        """``app.export_figure`` with a path: the tab in front's plot or figure written there
        without a dialog; what went wrong, or "" once it is written (a PDF is rendered by the
        engine, which answers later)."""
        widget = self.tabs.currentWidget()
        title = self.current_tab_title()
        plot = self.current_plot()
        if plot is None and callable(getattr(widget, "export_figure", None)):
            accepted = inspect.signature(widget.export_figure).parameters
            options = {name: value for name, value in (("dpi", dpi), ("caption", caption))
                       if name in accepted and value is not None}
            try:
                written = widget.export_figure(path, **options)
            except (OSError, ValueError) as exc:
                return str(exc) if path in str(exc) else f"{path}: {exc}"
            self.status(f"Exported {written or path}")
            return ""
        if plot is None:
            return (f"the {title} tab has no figure to export" if widget is not self.welcome
                    else "select a run in the runs dock to export its plot")
        if not plot_has_data(plot):
            return "the plot is empty: run a method, or select a run in the runs dock, first"
        self.export_plot_to(plot, path, dpi=dpi)
        return ""

    def export_panel_figure(self, panel, title: str) -> None:
        """Ask where, at which resolution and with or without the panel's information line
        (the export dialog), then write the panel's figure (``panel.export_figure``)."""
        from studio.widgets.figure_export import ask_export

        caption = getattr(panel, "info_line", lambda: "")()
        choice = ask_export(self, f"Export the {title} figure", "figure.png", caption)
        if choice is None:
            return
        path = str(choice.path)
        accepted = inspect.signature(panel.export_figure).parameters
        options = {name: value for name, value in (("dpi", choice.dpi),
                                                   ("caption", choice.caption))
                   if name in accepted}
        try:
            written = panel.export_figure(path, **options)
        except Exception as exc:  # a panel's export must not take the window down
            log.exception("export of the %s figure failed", title)
            self.show_error("Export failed", f"{path}: {exc}")
            return
        self.status(f"Exported {written or path}")

    def export_plot(self, view, provenance: dict | None = None) -> None:
        """Ask where and at which resolution (the export dialog), then export ``view`` (a
        PlotSpecView) as PNG, SVG or PDF."""
        from studio.widgets.figure_export import ask_export

        choice = ask_export(self, "Export plot", "plot.png")
        if choice is not None:
            self.export_plot_to(view, choice.path, provenance, dpi=choice.dpi)

    def export_plot_to(self, view, path: str | os.PathLike, provenance: dict | None = None,
                       on_done=None, dpi: int | None = None) -> None:
        """PNG drawn here at ``dpi`` (192 by default), SVG by pyqtgraph, PDF by the engine
        (``figure.export``, matplotlib); the provenance record (``engine.provenance``, with
        the panel's own keys and the run the plot shows) goes into the file either way."""
        from studio.widgets.figure_export import DEFAULT_DPI, ExportChoice, export_widget

        target = Path(path)
        fmt = target.suffix.lstrip(".").lower()
        if provenance is not None:
            view.provenance = dict(provenance)
        record = self._plot_record(view)
        if fmt in ("png", "svg"):
            saved, view.provenance = view.provenance, record
            try:
                if fmt == "png":
                    export_widget(view, ExportChoice(target, dpi or DEFAULT_DPI), record)
                else:
                    view.export(target)
            except Exception as exc:
                self.show_error("Export failed", str(exc))
                return
            finally:
                view.provenance = saved
            self.status(f"Exported {target}")
            if on_done is not None:
                on_done(str(target))
            return
        if fmt != "pdf":
            self.show_error("Export failed", f"{target}: choose .png, .svg or .pdf")
            return
        self.status(f"Exporting {target} (the engine renders PDFs)…")

        def replied(reply: dict) -> None:
            self.status(f"Exported {reply.get('path', target)}")
            if on_done is not None:
                on_done(reply.get("path", str(target)))

        self.host.request("figure.export", {"spec": view.spec(), "path": str(target),
                                            "provenance": record}, on_reply=replied,
                          on_error=lambda message: self.show_error("Export failed", message))

    def _plot_record(self, view) -> dict:
        """The plot's provenance record: the panel's own keys kept, the plot's title and
        axes as its view, and the run it shows (id, method, params, seed) when it names one."""
        from engine import provenance

        given = dict(view.provenance)
        if provenance.MARK in given:
            return given
        spec = view.spec()
        runs = []
        run_id = given.get("run_id")
        if isinstance(run_id, str) and (self.workspace.run_dir(run_id) / "params.json").exists():
            runs.append(provenance.run_entry(self.workspace.run_dir(run_id)))
        shown = {"title": spec.get("title"), "x": spec.get("xlabel"), "y": spec.get("ylabel"),
                 "series": [series.get("name") for series in spec.get("series", [])]}
        return provenance.record(view=shown, runs=runs, exported_by="Studio", **given)

    def export_checkpoint_to(self, source: Path, folder: str | os.PathLike,
                             on_done=None) -> None:
        def copied(target: Path) -> None:
            self.status(f"Checkpoint copied to {target}")
            if on_done is not None:
                on_done(target)

        self.run_in_thread(copy_checkpoint, Path(source), Path(folder), on_done=copied,
                           on_error=lambda exc: self.show_error(
                               "Export failed", f"{source} -> {folder}: {exc}"))

    # -- settings, theme, layout ---------------------------------------------------------------
    def open_settings(self) -> None:
        from studio.settings_dialog import SettingsDialog

        dialog = SettingsDialog(self.settings, str(self.workspace.root), self)
        dialog.applied.connect(self.apply_settings)
        dialog.open()

    def apply_settings(self, choices) -> None:
        self.settings.cluster = choices.cluster
        self.set_theme(choices.theme)
        restart = False
        if choices.device != self.settings.device:
            self.settings.device = choices.device
            self.bridge.device = choices.device
            restart = True
        if choices.workspace and Path(choices.workspace) != self.workspace.root:
            try:
                workspace = Workspace(choices.workspace)
            except Exception as exc:
                self.show_error("Cannot use that workspace", f"{choices.workspace}: {exc}")
            else:
                self.settings.workspace = workspace.root
                self.use_workspace(workspace)
                restart = False  # use_workspace restarted it
        if restart:
            self.restart_engine()

    def use_workspace(self, workspace: Workspace) -> None:
        self.workspace = workspace
        for history in [self._window_history, *self.histories.values()]:
            history.set_workspace(workspace)
        self.runs_dock.reset()
        self.bridge.set_workspace(workspace.root)
        self.runs_dock.load_history()
        self._update_title()
        self._update_workspace_label()

    def set_theme(self, theme: str, store: bool = True) -> None:
        app = QApplication.instance()
        if app.property("studioTheme") != theme:
            apply_theme(app, theme)
        if store:
            self.settings.theme = theme
        for action in self.theme_actions.actions():
            action.setChecked(action.data() == theme)

    def _restore_layout(self) -> None:
        geometry, state = self.settings.window_state()
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.restoreGeometry(geometry)
        else:
            self.resize(*DEFAULT_SIZE)
        if isinstance(state, QByteArray) and not state.isEmpty():
            self.restoreState(state)

    def reset_layout(self) -> None:
        self.restoreState(self._default_state)
        self.runs_dock_widget.show()
        self.runs_dock_widget.raise_()
        self.history_dock_widget.hide()
        self.command_log_dock_widget.hide()
        self.resizeDocks([self.runs_dock_widget], [RUNS_DOCK_HEIGHT], Qt.Orientation.Vertical)

    # -- messages ------------------------------------------------------------------------------
    def show_error(self, title: str, message: str) -> None:
        """A non-modal message box (the asyncio loop keeps running) and the log."""
        log.warning("%s: %s", title, message)
        self.errors.append((title, message))
        self._message(QMessageBox.Icon.Warning, title, message)
        self.status(f"{title}: {message.splitlines()[0] if message else ''}")

    def show_info(self, title: str, message: str) -> None:
        self._message(QMessageBox.Icon.Information, title, message)

    def _message(self, icon, title: str, message: str) -> QMessageBox:
        box = QMessageBox(icon, title, message, QMessageBox.StandardButton.Ok, self)
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._message_boxes.append(box)
        box.finished.connect(lambda _result, b=box: self._forget_box(b))
        box.open()
        return box

    def _forget_box(self, box: QMessageBox) -> None:
        if box in self._message_boxes:
            self._message_boxes.remove(box)
        box.deleteLater()

    def status(self, text: str, timeout_ms: int = 6000) -> None:
        self.statusBar().showMessage(text, timeout_ms)

    def _offer_resubmission(self, submissions: list[dict]) -> None:
        methods = ", ".join(s["method"] for s in submissions)
        box = QMessageBox(QMessageBox.Icon.Question, "Queued jobs were lost",
                          f"The engine died with {len(submissions)} queued job(s) ({methods}). "
                          f"Submit them again?", QMessageBox.StandardButton.Yes
                          | QMessageBox.StandardButton.No, self)
        self._message_boxes.append(box)

        def answered(result: int) -> None:
            self._forget_box(box)
            if result == QMessageBox.StandardButton.Yes:
                self.resubmit(submissions)

        box.finished.connect(answered)
        box.open()

    def resubmit(self, submissions: list[dict]) -> None:
        for item in submissions:
            self.submit(item["method"], item["params"], item.get("inputs"), item.get("seed", 0))

    def show_shortcuts(self) -> None:
        """Every registered command that has a shortcut (the palette finds the others)."""
        rows = [f"<tr><td>{html.escape(c.title)}</td><td>&nbsp;&nbsp;<b>"
                f"{html.escape(_native_keys(c.shortcut))}</b></td></tr>"
                for c in sorted(self.commands.commands(), key=lambda c: c.title)
                if c.shortcut]
        self.show_info("Keyboard shortcuts", "<table>" + "".join(rows) + "</table>")

    def show_about(self) -> None:
        self.show_info("About Studio",
                       f"Studio {studio_version()}: run the methods of nineteen NeurIPS 2026 "
                       f"papers on your own data.\n\nWorkspace: {self.workspace.root}\n"
                       f"Logs: {self.log_dir}")

    def open_externally(self, path: Path) -> bool:
        """Open a file or folder in the desktop's own application."""
        if not path.exists():
            from studio.commands import Refusal

            raise Refusal(f"{path} does not exist yet")
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(path)))
        return True

    def current_tab_title(self) -> str:
        return self.tabs.tabText(self.tabs.currentIndex())

    def show_palette(self) -> None:
        """Ctrl+Shift+P: the command palette over every command and engine method."""
        from studio.palette import CommandPalette

        self.register_panel_commands()
        if self._palette is None:
            self._palette = CommandPalette(self.commands, lambda: self.bridge.methods, self)
        self._palette.popup()

    def register_panel_commands(self) -> list[str]:
        """Every installed panel's commands, also of panels not opened yet (running one opens
        its panel), so the palette and ``studio.commands()`` list them all: each panel's
        ``<package>.commands`` module declares them in ``COMMANDS``. Returns the panels whose
        commands could not be loaded (logged)."""
        failed = []
        for panel_id, entry in self.panels.entries().items():
            if entry.manifest is None or panel_id in self._panel_commands_loaded:
                continue
            package = entry.manifest.factory.partition(":")[0].rpartition(".")[0]
            try:
                module = importlib.import_module(f"{package}.commands")
            except ModuleNotFoundError as exc:
                if exc.name != f"{package}.commands":
                    log.exception("panel %s: its commands could not be loaded", panel_id)
                    failed.append(panel_id)
                continue
            except Exception:  # a panel's own bug must not take the palette down
                log.exception("panel %s: its commands could not be loaded", panel_id)
                failed.append(panel_id)
                continue
            self.commands.add_all(getattr(module, "COMMANDS", ()))
            self._panel_commands_loaded.add(panel_id)
        return failed

    # -- status --------------------------------------------------------------------------------
    def _on_engine_state(self, state: str) -> None:
        colour = ENGINE_COLOURS.get(state, "#8b949e")
        self.engine_label.setText(f"<span style='color:{colour}'>●</span> "
                                  f"{ENGINE_STATE_TEXT.get(state, state)}")
        welcome = self.bridge.welcome
        details = [f"state: {state}"]
        if self.bridge.pid:
            details.append(f"pid {self.bridge.pid}")
        if welcome.get("executor"):
            details.append(str(welcome["executor"]))
        if welcome.get("devices"):
            details.append("devices: " + ", ".join(welcome["devices"]))
        if self.bridge.restarts:
            details.append(f"restarted {self.bridge.restarts} time(s)")
        self.engine_label.setToolTip("\n".join(details))
        self._update_job_count()

    def _update_job_count(self) -> None:
        active = self.bridge.jobs.active()
        running = sum(r.state in ("running", "cancelling") for r in active)
        queued = len(active) - running
        parts = ([f"{running} running"] if running else []) + (
            [f"{queued} queued"] if queued else [])
        self.jobs_label.setText(", ".join(parts))

    def _update_title(self) -> None:
        self.setWindowTitle(f"Studio — {self.workspace.root.name}")

    def _update_workspace_label(self) -> None:
        self.workspace_label.setText(f"workspace: {self.workspace.root}")
        self.workspace_label.setToolTip(str(self.workspace.root))


def _open_workspace(folder: str | os.PathLike) -> tuple[Workspace, str]:
    """The workspace, or the default one (and why) when that folder cannot be used."""
    try:
        return Workspace(folder), ""
    except (OSError, sqlite3.Error) as exc:
        from engine.workspace import default_workspace

        fallback = default_workspace()
        return Workspace(fallback), f"{folder}: {exc}. Using {fallback} instead."


def _import_all(modules: list[str]) -> None:
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # a broken panel is reported when it is opened
            log.info("prewarm: %s did not import (%s)", name, exc)


def plot_has_data(plot) -> bool:
    """Whether a plot view shows anything (curves with points, bars or a heatmap)."""
    spec = plot.spec()
    return spec.get("kind", "plot") != "plot" or any(
        any(y is not None for y in series.get("y") or []) for series in spec.get("series", []))


class TextBoxUndo(QObject):
    """Ctrl+Z in a text box undoes the box's own typing first, then the tab's last edit.

    A focused line edit claims every Undo/Redo key press (``ShortcutOverride``), even with
    nothing of its own to undo, so the Edit menu's shortcut never fired there. This filter lets
    the box keep the key only while it has typing to undo (redo)."""

    def __init__(self, undo: QAction, redo: QAction, parent: QObject) -> None:
        super().__init__(parent)
        self.undo, self.redo = undo, redo

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if event.type() != QEvent.Type.ShortcutOverride or not isinstance(watched, QWidget):
            return False
        pressed = QKeySequence(event.keyCombination())
        if pressed in self.undo.shortcuts():
            own = _text_undo_available(watched, redo=False)
        elif pressed in self.redo.shortcuts():
            own = _text_undo_available(watched, redo=True)
        else:
            return False
        if own is None or own:
            return False  # not a text box, or the box has its own typing to undo
        if watched.window() is not self.parent():
            return False  # a dialog's box: not this window's history
        event.ignore()
        return True  # no override: the window's shortcut (the tab's history) gets the key


def _text_undo_available(widget: QWidget, redo: bool) -> bool | None:
    """Whether a text box can undo (redo) its own typing; ``None`` for other widgets."""
    if isinstance(widget, QLineEdit):
        if widget.isReadOnly():
            return False
        return widget.isRedoAvailable() if redo else widget.isUndoAvailable()
    if isinstance(widget, QTextEdit | QPlainTextEdit):
        if widget.isReadOnly():
            return False
        document = widget.document()
        return document.isRedoAvailable() if redo else document.isUndoAvailable()
    return None


def _native_keys(shortcut: str) -> str:
    """``"Ctrl+Shift+Z; Ctrl+Y"`` as this platform writes keys."""
    return ", ".join(QKeySequence(key.strip()).toString(QKeySequence.SequenceFormat.NativeText)
                     for key in shortcut.split(";"))
