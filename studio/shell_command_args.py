"""The arguments of the shell's commands (``studio.shell_commands``), apart so that building
the window's menus does not import pydantic: the registry imports this module the first time
one of these commands is run or shown in the palette (or the window prewarms it)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from studio.commands import CommandArgs


class OpenArgs(CommandArgs):
    paths: list[str] = Field(default_factory=list,
                             description="files or folders to open (none: choose them)")


class ExportArgs(CommandArgs):
    path: str = Field("", description="the figure's file, .png, .svg or .pdf (empty: choose)")
    dpi: int | None = Field(None, ge=36, le=1200, description="resolution of a PNG")
    caption: bool = Field(False, description="the panel's information line under it")


class PanelArgs(CommandArgs):
    panel: str = Field(description="the panel's id (lab, routing, molecules, fmri, …)")


class ShowArgs(CommandArgs):
    on: bool | None = Field(None, description="shown; none: the other way round")


class ThemeArgs(CommandArgs):
    theme: Literal["dark", "light"] = Field(description="the colour theme")


class RunsArgs(CommandArgs):
    run_ids: list[str] = Field(default_factory=list,
                               description="run ids (none: the runs selected in the dock)")


class CancelArgs(RunsArgs):
    hard: bool = Field(False, description="kill the worker at once")


class MethodArgs(CommandArgs):
    method: str = Field(description="the engine method's id (diag.echo, chipstar.route, …)")
    params: dict[str, Any] = Field(default_factory=dict, description="its parameters")
    inputs: dict[str, str] = Field(default_factory=dict, description="its inputs, by name")
    seed: int = Field(0, ge=0, le=2**63 - 1, description="the run's seed")


# the paper claims dock (studio.claim_dock)
class PaperArgs(CommandArgs):
    paper: str | None = Field(None, description="the paper (its slug, e.g. scicl); none: the "
                                                "one selected in the dock")


class ReproduceClaimArgs(PaperArgs):
    profile: Literal["smoke", "cpu", "gpu"] = Field("cpu", description="the profile whose "
                                                    "pre-registered settings it runs with")


# the runs dock (studio.runs_dock) and the welcome page (studio.welcome)
class RerunChangesArgs(RunsArgs):
    params: dict[str, Any] | None = Field(None, description="the parameters that change (the "
                                          "others as the run had them); none: edit them in a form")
    seed: int | None = Field(None, ge=0, le=2**63 - 1, description="the new run's seed")


class RunArgs(CommandArgs):
    run_id: str = Field("", description="the run's id (empty: the run selected in the dock)")


class NotesArgs(RunArgs):
    notes: str = Field(description="the notes kept with the run in the workspace")


class CheckpointArgs(RunArgs):
    checkpoint: str = Field("", description="the checkpoint's folder name under the run's "
                                            "checkpoints/ (empty: choose it)")
    folder: str = Field("", description="the folder it is copied into (empty: choose it)")


class ShowRunsArgs(RunsArgs):
    metric: str = Field("", description="the metric plotted (empty: as it is)")


class RunsPlotArgs(CommandArgs):
    path: str = Field("", description="the figure's file, .png, .svg or .pdf (empty: choose)")
    dpi: int | None = Field(None, ge=36, le=1200, description="resolution of a PNG")


class PaperSlugArgs(CommandArgs):
    paper: str = Field(description="the paper's slug (eos, scicl, …), as its card shows it")


class ComingArgs(PaperSlugArgs):
    on: bool | None = Field(None, description="shown; none: the other way round")


class FilterArgs(CommandArgs):
    text: str = Field("", description="words every card shown contains (empty: all)")
