"""The shell's own actions as commands: files, export, undo, views, runs, the engine, help.

They act on the ``MainWindow`` (bound to the scopes ``app``, ``edit``, ``view``, ``runs``,
``engine`` and ``help``); its menus and shortcuts run them, and so can the palette, the console
and scripts. A command that only asks the user for its arguments (File > Open's dialog) returns
``PROMPTED`` and is not logged; the command the dialog then runs is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from studio.commands import PROMPTED, Command, CommandRegistry, Refusal

if TYPE_CHECKING:
    from studio.shell_command_args import (
        CancelArgs,
        ExportArgs,
        MethodArgs,
        OpenArgs,
        PanelArgs,
        RunsArgs,
        ShowArgs,
        ThemeArgs,
    )

SCOPES = ("app", "edit", "view", "runs", "engine", "help")
ARGS = "studio.shell_command_args:"   # the argument models, imported on first use


# -- files and export --------------------------------------------------------------------------


def open_files(window, args: OpenArgs):
    if not args.paths:
        window.ask_open_files()
        return PROMPTED
    window.open_paths(list(args.paths))
    return True


def clear_recent(window, _args: None) -> bool:
    window.clear_recent_files()
    return True


def export_figure(window, args: ExportArgs):
    """Ctrl+E: the figure of the tab in front, asked for (empty path) or written to ``path``."""
    if not args.path:
        window.export_current_plot()
        return PROMPTED
    problem = window.export_current_to(args.path, args.dpi, args.caption)
    if problem:
        raise Refusal(problem)
    return True


def export_checkpoint(window, _args: None):
    if window.runs_dock.current_record() is None:
        raise Refusal("select a run in the runs dock first")
    window.export_selected_checkpoint()
    return PROMPTED


def settings(window, _args: None):
    window.open_settings()
    return PROMPTED


def quit_app(window, _args: None) -> bool:
    window.close()
    return True


# -- edit --------------------------------------------------------------------------------------


def _step(window, back: bool) -> str:
    """Undo (``back``) or redo one step of the tab in front's history."""
    stack = window.history.stack
    if not (stack.canUndo() if back else stack.canRedo()):
        raise Refusal(f"nothing to {'undo' if back else 'redo'} in the "
                      f"{window.current_tab_title()} tab")
    text = stack.undoText() if back else stack.redoText()
    (stack.undo if back else stack.redo)()
    return f"{'Undid' if back else 'Redid'} {text}"


def undo(window, _args: None) -> str:
    return _step(window, back=True)


def redo(window, _args: None) -> str:
    return _step(window, back=False)


# -- view --------------------------------------------------------------------------------------


def show_welcome(window, _args: None) -> bool:
    window.tabs.setCurrentIndex(0)
    return True


def show_lab(window, _args: None) -> bool:
    return _open_panel(window, "lab")


def open_panel(window, args: PanelArgs) -> bool:
    return _open_panel(window, args.panel)


def _open_panel(window, panel_id: str) -> bool:
    if window.panels.get(panel_id) is None:
        known = ", ".join(sorted(window.panels.entries()))
        raise Refusal(f"no panel {panel_id!r} is installed (panels: {known})")
    if window.open_panel(panel_id) is None:
        raise Refusal(f"the {panel_id} panel could not be opened (said in the message)")
    return True


def _toggle(dock, on: bool | None) -> bool:
    shown = not dock.isVisible() if on is None else on
    dock.setVisible(shown)
    if shown:
        dock.raise_()
    return True


def show_runs(window, args: ShowArgs) -> bool:
    return _toggle(window.runs_dock_widget, args.on)


def show_history(window, args: ShowArgs) -> bool:
    return _toggle(window.history_dock_widget, args.on)


def show_command_log(window, args: ShowArgs) -> bool:
    return _toggle(window.command_log_dock_widget, args.on)


def theme(window, args: ThemeArgs) -> bool:
    window.set_theme(args.theme)
    return True


def reset_layout(window, _args: None) -> bool:
    window.reset_layout()
    return True


def close_tab(window, _args: None) -> bool:
    if window.tabs.currentWidget() is window.welcome:
        raise Refusal("the Welcome tab stays open")
    window.close_tab(window.tabs.currentIndex())
    return True


def palette(window, _args: None):
    window.show_palette()
    return PROMPTED


# -- runs and the engine -----------------------------------------------------------------------


def _records(window, run_ids: list[str]) -> list:
    if not run_ids:
        records = window.runs_dock.selected_records()
        if not records:
            raise Refusal("select runs in the runs dock (or name run_ids)")
        return records
    records = []
    for run_id in run_ids:
        record = window.bridge.jobs.get(run_id)
        if record is None:
            raise Refusal(f"no run {run_id!r} in the workspace {window.workspace.root}")
        records.append(record)
    return records


def rerun(window, args: RunsArgs) -> bool:
    for record in _records(window, args.run_ids):
        if not record.method:
            raise Refusal(f"run {record.id} does not say which method made it")
    for record in _records(window, args.run_ids):
        window.submit(record.method, record.params, record.inputs, record.seed)
    return True


def rerun_with_changes(window, args: RunsArgs):
    records = _records(window, args.run_ids)
    if len(records) != 1:
        raise Refusal(f"choose one run to change, not {len(records)}")
    window.runs_dock.rerun_with_changes(records[0])
    return PROMPTED


def cancel(window, args: CancelArgs) -> bool:
    active = [r for r in _records(window, args.run_ids) if r.active and r.live]
    if not active:
        raise Refusal("none of these runs is queued or running")
    for record in active:
        window.host.cancel_job(record.id, hard=args.hard or record.state == "cancelling")
    return True


def restart_engine(window, _args: None) -> bool:
    window.restart_engine()
    return True


def show_engine_log(window, _args: None) -> bool:
    return window.open_externally(window.log_dir / "engine.log")


def run_method(window, args: MethodArgs) -> bool:
    """Submit an engine method; the engine checks the parameters and inputs (its refusal is
    shown when it answers)."""
    known = {m["id"] for m in window.bridge.methods}
    if known and args.method not in known:
        raise Refusal(f"the engine has no method {args.method!r}")
    window.submit(args.method, dict(args.params), dict(args.inputs) or None, args.seed)
    return True


# -- help --------------------------------------------------------------------------------------


def shortcuts(window, _args: None) -> bool:
    window.show_shortcuts()
    return True


def log_folder(window, _args: None) -> bool:
    return window.open_externally(window.log_dir)


def about(window, _args: None) -> bool:
    window.show_about()
    return True


COMMANDS = [
    Command("app.open", "Open files", "Open data files in the panels that read them.",
            open_files, ARGS + "OpenArgs", shortcut="Ctrl+O", menu="File/Open…"),
    Command("app.clear_recent", "Clear the recent files", "Forget the recently opened "
            "files.", clear_recent, menu="File/Open recent/Clear the list"),
    Command("app.export_figure", "Export the figure", "The figure of the tab in front (or "
            "the selected run's plot) as PNG, SVG or PDF with its provenance.",
            export_figure, ARGS + "ExportArgs", shortcut="Ctrl+E", menu="File/Export plot…"),
    Command("app.export_checkpoint", "Export a checkpoint", "Copy a checkpoint of the "
            "selected run to a folder.", export_checkpoint, menu="File/Export checkpoint…"),
    Command("app.settings", "Open the settings", "Workspace, device, cluster, theme and "
            "reader budgets.", settings, shortcut="Ctrl+,", menu="File/Settings…"),
    Command("app.quit", "Quit Studio", "Close the window and stop the engine.", quit_app,
            shortcut="Ctrl+Q", menu="File/Quit"),
    Command("edit.undo", "Undo", "Undo the last edit of the tab in front.", undo,
            shortcut="Ctrl+Z", menu="Edit/Undo"),
    Command("edit.redo", "Redo", "Redo the edit undone last in the tab in front.", redo,
            shortcut="Ctrl+Shift+Z; Ctrl+Y", menu="Edit/Redo"),
    Command("view.welcome", "Show the welcome page", "The papers and recent files.",
            show_welcome, shortcut="Ctrl+1", menu="View/Welcome"),
    Command("view.lab", "Show the lab", "Run and compare the papers' methods.", show_lab,
            shortcut="Ctrl+2", menu="View/Lab"),
    Command("view.panel", "Show a panel", "Open a panel by id (its tab comes to the front).",
            open_panel, ARGS + "PanelArgs", menu="View"),
    Command("view.runs", "Show or hide the runs", "The runs dock: every run, its curves, "
            "logs and outputs.", show_runs, ARGS + "ShowArgs", shortcut="Ctrl+Shift+R",
            menu="View/Runs"),
    Command("view.edit_history", "Show or hide the edit history", "The tab's undo steps.",
            show_history, ARGS + "ShowArgs", menu="View/Edit history"),
    Command("view.command_log", "Show or hide the command log", "Every command run, as the "
            "Python line a script would write.", show_command_log, ARGS + "ShowArgs",
            shortcut="Ctrl+Shift+J", menu="View/Command log"),
    Command("view.palette", "Command palette", "Find any command or engine method by name "
            "and run it.", palette, shortcut="Ctrl+Shift+P", menu="View/Command palette…"),
    Command("view.theme", "Choose the theme", "Dark or light.", theme, ARGS + "ThemeArgs",
            menu="View/Theme"),
    Command("view.reset_layout", "Reset the layout", "Docks back where they started.",
            reset_layout, menu="View/Reset layout"),
    Command("view.close_tab", "Close the tab", "Close the panel in front (its autosaved "
            "edits stay).", close_tab, shortcut="Ctrl+W", menu="View/Close tab"),
    Command("runs.rerun", "Rerun runs", "Run the selected runs again with the same "
            "parameters.", rerun, ARGS + "RunsArgs", shortcut="F5", menu="Runs/Rerun selected"),
    Command("runs.rerun_with_changes", "Rerun with changes", "Change a run's parameters and "
            "run it again.", rerun_with_changes, ARGS + "RunsArgs", shortcut="Shift+F5",
            menu="Runs/Rerun with changes…"),
    Command("runs.cancel", "Cancel runs", "Cancel queued or running runs.", cancel,
            ARGS + "CancelArgs", shortcut="Ctrl+.", menu="Runs/Cancel selected"),
    Command("engine.restart", "Restart the engine", "Stop the engine process and start a "
            "new one.", restart_engine, shortcut="Ctrl+Shift+F5", menu="Engine/Restart engine"),
    Command("engine.show_log", "Show the engine log", "Open engine.log.", show_engine_log,
            menu="Engine/Show engine log"),
    Command("engine.run_method", "Run an engine method", "Submit a method of the engine "
            "with parameters and inputs.", run_method, ARGS + "MethodArgs"),
    Command("help.shortcuts", "Keyboard shortcuts", "Every command's shortcut.", shortcuts,
            shortcut="F1", menu="Help/Keyboard shortcuts"),
    Command("help.log_folder", "Open the log folder", "Where studio.log and engine.log are.",
            log_folder, menu="Help/Open log folder"),
    Command("help.about", "About Studio", "Version, workspace and logs.", about,
            menu="Help/About Studio"),
]


def register(registry: CommandRegistry, window) -> CommandRegistry:
    """Add the shell's commands and bind their scopes to ``window``."""
    for command in COMMANDS:
        registry.add(command, replace=True)
    for scope in SCOPES:
        registry.bind(scope, window)
    return registry
