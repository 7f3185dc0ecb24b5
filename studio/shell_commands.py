"""The shell's own actions as commands: files, export, undo, views, runs, the engine, help.

They act on the ``MainWindow`` (bound to the scopes ``app``, ``edit``, ``view``, ``runs``,
``engine`` and ``help``); its menus and shortcuts run them, and so can the palette, the console
and scripts. A command that only asks the user for its arguments (File > Open's dialog) returns
``PROMPTED`` and is not logged; the command the dialog then runs is.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import TYPE_CHECKING

from studio.commands import PROMPTED, Command, CommandRegistry, Refusal

if TYPE_CHECKING:
    from studio.shell_command_args import (
        CancelArgs,
        CheckpointArgs,
        ComingArgs,
        ExportArgs,
        FilterArgs,
        MethodArgs,
        NotesArgs,
        OpenArgs,
        PanelArgs,
        PaperSlugArgs,
        RerunChangesArgs,
        RunArgs,
        RunsArgs,
        RunsPlotArgs,
        ShowArgs,
        ShowRunsArgs,
        ThemeArgs,
    )

SCOPES = ("app", "edit", "view", "runs", "engine", "help", "welcome")
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


def export_checkpoint(window, args: CheckpointArgs):
    """Copy ``checkpoints/<checkpoint>/`` of a run into a folder; what is not named is asked
    (the dock's list of the run's checkpoints, then a folder dialog)."""
    record = _record(window, args)
    dock = window.runs_dock
    names = dock.checkpoints_of(record)
    if not names:
        raise Refusal(f"run {record.id} saved no checkpoint")
    if not args.checkpoint:
        dock.select(record.id)
        dock.checkpoint_button.showMenu()
        return PROMPTED
    if args.checkpoint not in names:
        raise Refusal(f"run {record.id} has no checkpoint {args.checkpoint!r} (it has "
                      f"{', '.join(names)})")
    if not args.folder:
        dock.ask_checkpoint_folder(record.id, args.checkpoint)
        return PROMPTED
    if not Path(args.folder).is_dir():
        raise Refusal(f"{args.folder} is not a folder")
    window.export_checkpoint_to(dock.run_dir(record) / "checkpoints" / args.checkpoint,
                                args.folder)
    return True


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


def _run(window, run_id: str):
    record = window.bridge.jobs.get(run_id)
    if record is None:
        raise Refusal(f"no run {run_id!r} in the workspace {window.workspace.root}")
    return record


def _records(window, args: RunsArgs) -> list:
    """The runs ``args.run_ids`` names, or the ones selected in the dock; these are written
    back into ``args``, so the command log names the runs acted on, not "the selection"."""
    if not args.run_ids:
        records = window.runs_dock.selected_records()
        if not records:
            raise Refusal("select runs in the runs dock (or name run_ids)")
        args.run_ids = [record.id for record in records]
        return records
    return [_run(window, run_id) for run_id in args.run_ids]


def _record(window, args: RunArgs):
    """The run ``args.run_id`` names, or the one selected (written back, as ``_records``)."""
    if args.run_id:
        return _run(window, args.run_id)
    record = window.runs_dock.current_record()
    if record is None:
        raise Refusal("select a run in the runs dock first (or name run_id)")
    args.run_id = record.id
    return record


def _method_of(record) -> str:
    if not record.method:
        raise Refusal(f"run {record.id} does not say which method made it")
    return record.method


def rerun(window, args: RunsArgs) -> bool:
    records = _records(window, args)
    for record in records:
        _method_of(record)
    for record in records:
        window.submit(record.method, record.params, record.inputs, record.seed)
    return True


def rerun_with_changes(window, args: RerunChangesArgs):
    """One run again with some parameters (or the seed) changed; none given: the run's
    parameters in the method's form, whose Run runs this command with them."""
    records = _records(window, args)
    if len(records) != 1:
        raise Refusal(f"choose one run to change, not {len(records)}")
    record = records[0]
    method = next((m for m in window.bridge.methods if m["id"] == _method_of(record)), None)
    if method is None:
        raise Refusal(f"the engine does not list {record.method} (it may still be starting)")
    if args.params is None and args.seed is None:
        window.runs_dock.ask_changes(record, method)
        return PROMPTED
    params = {**record.params, **(args.params or {})}
    seed = record.seed if args.seed is None else args.seed
    window.runs_dock.submit_changed(record, params, seed)
    return True


def delete_runs(window, args: RunsArgs):
    """Delete runs and their folders: named ones at once, the selected ones (none named)
    after the user confirms. A queued or running run is refused."""
    asked = not args.run_ids
    records = _records(window, args)
    busy = [record.id for record in records if record.active and record.live]
    if busy:
        raise Refusal(f"{', '.join(busy)} {'is' if len(busy) == 1 else 'are'} still queued "
                      "or running: cancel first, then delete")
    if asked:
        window.runs_dock.confirm_delete(args.run_ids)
        return PROMPTED
    window.runs_dock.delete_runs(args.run_ids)
    return True


def show_runs_of(window, args: ShowRunsArgs) -> bool:
    """Select runs in the dock (several: their curves overlaid) and choose the metric."""
    dock = window.runs_dock
    if args.run_ids:
        records = [_run(window, run_id) for run_id in args.run_ids]
    else:
        records = dock.shown_records()
        if not records:
            raise Refusal("no run is shown: name run_ids")
    if args.metric:
        known = dock.known_metrics(records)
        if known is not None and args.metric not in known:
            raise Refusal(f"no metric {args.metric!r} in {', '.join(r.id for r in records)} "
                          f"(they report {', '.join(sorted(known)) or 'none'})")
    window.runs_dock_widget.show()
    window.runs_dock_widget.raise_()
    dock.show_runs([record.id for record in records], args.metric)
    return True


def export_runs_plot(window, args: RunsPlotArgs):
    """The runs dock's plot (the runs shown) as PNG, SVG or PDF; no path: asked."""
    dock = window.runs_dock
    if dock.plot is None or not dock.shown_records() \
            or dock.plot_stack.currentWidget() is not dock.plot:
        raise Refusal("the runs dock shows no curve: select a run with metrics first")
    if not args.path:
        dock.ask_plot_path()
        return PROMPTED
    target = Path(args.path)
    if target.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise Refusal(f"{target.name}: write .png, .svg or .pdf")
    if not target.parent.is_dir():
        raise Refusal(f"{target.parent} is not a folder")
    window.export_plot_to(dock.plot, target, dpi=args.dpi)
    return True


def open_run_folder(window, args: RunArgs) -> bool:
    return window.open_externally(window.runs_dock.run_dir(_record(window, args)))


def set_notes(window, args: NotesArgs) -> bool:
    window.runs_dock.save_notes_of(_record(window, args).id, args.notes)
    return True


def cancel(window, args: CancelArgs) -> bool:
    active = [r for r in _records(window, args) if r.active and r.live]
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


# -- the welcome page --------------------------------------------------------------------------


def _card(window, slug: str):
    card = window.welcome.card(slug)
    if card is None:
        known = [c.paper.slug for c in window.welcome.cards]
        close = difflib.get_close_matches(slug, known, n=3)
        raise Refusal(f"no paper {slug!r}" + (f" (did you mean {', '.join(close)}?)" if close
                                             else f" (papers: {', '.join(sorted(known))})"))
    return card


def open_paper(window, args: PaperSlugArgs) -> bool:
    """The panel that runs a paper's methods, on that paper."""
    paper = _card(window, args.paper).paper
    if not paper.available:
        raise Refusal(f"{paper.title} is not available yet (coming to the "
                      f"{paper.panel_title}: {paper.coming})")
    window.open_paper(paper.slug)
    return True


def show_coming(window, args: ComingArgs) -> bool:
    card = _card(window, args.paper)
    if card.paper.available:
        raise Refusal(f"{card.paper.title} is available now: welcome.open_paper opens it")
    card.show_coming(not card.coming_label.isVisibleTo(card) if args.on is None else args.on)
    return True


def filter_papers(window, args: FilterArgs) -> int:
    """Show the cards whose paper has every word; returns how many are shown."""
    window.welcome.set_filter(args.text)
    return len(window.welcome.visible_papers())


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
    Command("app.export_checkpoint", "Export a checkpoint", "Copy a checkpoint of a run "
            "(the selected one) into a folder.", export_checkpoint, ARGS + "CheckpointArgs",
            menu="File/Export checkpoint…"),
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
            "run it again.", rerun_with_changes, ARGS + "RerunChangesArgs", shortcut="Shift+F5",
            menu="Runs/Rerun with changes…"),
    Command("runs.cancel", "Cancel runs", "Cancel queued or running runs.", cancel,
            ARGS + "CancelArgs", shortcut="Ctrl+.", menu="Runs/Cancel selected"),
    Command("runs.delete", "Delete runs", "Delete finished runs and their folders (the "
            "selected ones after asking).", delete_runs, ARGS + "RunsArgs"),
    Command("runs.show", "Show or compare runs", "Select runs in the runs dock, several "
            "overlaid on one plot, and choose the metric.", show_runs_of,
            ARGS + "ShowRunsArgs"),
    Command("runs.export_plot", "Export the runs plot", "The runs dock's curves as PNG, SVG "
            "or PDF with the runs' provenance.", export_runs_plot, ARGS + "RunsPlotArgs"),
    Command("runs.open_folder", "Open a run's folder", "The run folder in the file manager.",
            open_run_folder, ARGS + "RunArgs"),
    Command("runs.set_notes", "Save a run's notes", "Keep notes with a run in the workspace.",
            set_notes, ARGS + "NotesArgs"),
    Command("welcome.open_paper", "Open a paper", "Open the panel that runs a paper's "
            "methods, on that paper.", open_paper, ARGS + "PaperSlugArgs"),
    Command("welcome.show_coming", "Show what is coming", "What a paper not available yet "
            "will offer, on its card.", show_coming, ARGS + "ComingArgs"),
    Command("welcome.filter", "Filter the papers", "Show the papers' cards that have every "
            "word.", filter_papers, ARGS + "FilterArgs", log_last_only=True),
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
