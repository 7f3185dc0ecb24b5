"""Buttons, check boxes, menu actions and other widgets that invoke registered commands.

A widget wired here carries its command's id (``commands_of(widget)``), so a test can walk a
window's menus, toolbars and panels and check that each control maps to a command. Clicking
it calls ``registry.trigger(id, **args(...))``: a refusal is reported, never raised into Qt.

One control may run one of several commands (a "Delete picked" button: ``delete_wire`` or
``delete_via``): give the ids as a tuple and let ``args`` return ``(id, arguments)``. A button
that only asks for a command's argument (a file dialog, a folder for a form) is marked with
``mark_argument``. ``args`` returning ``None`` runs nothing (it said why itself).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QKeySequence

from studio.commands import CommandRegistry

COMMAND_PROPERTY = "studioCommand"
ARGUMENT_PROPERTY = "studioCommandArgument"

# called with the signal's arguments -> the command's arguments (or, for several ids,
# (id, arguments)); None: nothing to run
Args = Callable[..., Any]
Ids = str | tuple[str, ...]


def connect(signal: Any, owner: QObject, registry: CommandRegistry, command_id: Ids,
            args: Args | None = None) -> None:
    """``signal`` (of ``owner``) runs ``command_id`` with ``args(*signal_args)`` (default: no
    arguments); ``owner`` is marked with the id(s)."""
    ids = (command_id,) if isinstance(command_id, str) else tuple(command_id)
    owner.setProperty(COMMAND_PROPERTY, ",".join(ids))
    command = registry.get(ids[0])
    if command is not None and hasattr(owner, "setToolTip") and not owner.toolTip():
        owner.setToolTip(_tip(command))

    def fire(*signal_args: Any) -> None:
        given = args(*signal_args) if args is not None else {}
        if given is None:
            return  # the args function said there is nothing to do (it said why)
        chosen = ids[0]
        if len(ids) > 1:
            chosen, given = given
        registry.trigger(chosen, **given)

    signal.connect(fire)


def connect_button(button: QObject, registry: CommandRegistry, command_id: Ids,
                   args: Callable[[], Any] | None = None) -> QObject:
    """A push button: ``clicked`` runs the command with ``args()``."""
    connect(button.clicked, button, registry, command_id,
            (lambda *_checked: args()) if args is not None else None)
    return button


def command_action(parent: QObject, registry: CommandRegistry, command_id: str,
                   text: str = "", args: Callable[[], dict | None] | None = None
                   ) -> QAction:
    """A menu or toolbar action for a command: its title (or ``text``), shortcut and help."""
    command = registry.get(command_id)
    if command is None:
        raise KeyError(f"no command {command_id!r} is registered")
    action = QAction(text or command.title, parent)
    if command.shortcut:
        keys = [QKeySequence(key.strip()) for key in command.shortcut.split(";")]
        action.setShortcuts(keys)
    action.setStatusTip(command.help)
    connect(action.triggered, action, registry, command_id,
            (lambda *_checked: args()) if args is not None else None)
    return action


def mark_argument(widget: QObject, command_id: str) -> None:
    """``widget`` only asks for an argument of ``command_id`` (a file, a folder) and then
    runs it, or fills a form that does."""
    widget.setProperty(ARGUMENT_PROPERTY, command_id)


def commands_of(widget: QObject) -> list[str]:
    """The ids of the commands a widget or action invokes (or asks an argument of), if it was
    wired here; empty otherwise."""
    value = widget.property(COMMAND_PROPERTY) or widget.property(ARGUMENT_PROPERTY)
    return [part for part in str(value).split(",") if part] if value else []


def _tip(command: Any) -> str:
    return f"{command.help} ({command.shortcut})" if command.shortcut else command.help


def command_of(widget: QObject) -> str | None:
    """The first of ``commands_of(widget)``, or ``None``."""
    found = commands_of(widget)
    return found[0] if found else None
