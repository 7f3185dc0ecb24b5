"""The arguments of the sessions' and the lineage dock's commands (``studio.sessions``,
``studio.lineage``), apart so that building the window's menus does not import pydantic: the
registry imports this module the first time one of these commands runs or is shown."""

from __future__ import annotations

from pydantic import Field

from studio.commands import CommandArgs


class SessionPathArgs(CommandArgs):
    path: str = Field("", description="the session file, .studio (empty: choose it)")


class AutosaveArgs(CommandArgs):
    minutes: float = Field(ge=0, le=24 * 60,
                           description="autosave the session every so many minutes (0: only "
                                       "on quit)")


class NodesArgs(CommandArgs):
    nodes: list[str] = Field(default_factory=list,
                             description="lineage nodes as run:<run id>, file:<path> or "
                                         "edits:<id> (none: those chosen in the dock)")


class ExportNodeArgs(CommandArgs):
    node: str = Field("", description="the lineage node (empty: the one chosen in the dock)")
    path: str = Field("", description="where to write it (empty: choose)")


class WholeArgs(CommandArgs):
    on: bool = Field(True, description="every run of the workspace, not only this session's")
