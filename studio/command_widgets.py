"""Buttons, check boxes, menu actions and other widgets that invoke registered commands.

A widget wired here carries its command's id (``command_of(widget)``), so a test can walk a
window's menus, toolbars and panels and check that each control maps to a command. Clicking
it calls ``registry.trigger(id, **args(...))``: a refusal is reported, never raised into Qt.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QKeySequence

from studio.commands import CommandRegistry

COMMAND_PROPERTY = "studioCommand"

Args = Callable[..., dict]   # called with the signal's arguments -> the command's arguments


def connect(signal: Any, owner: QObject, registry: CommandRegistry, command_id: str,
            args: Args | None = None) -> None:
    """``signal`` (of ``owner``) runs ``command_id`` with ``args(*signal_args)`` (default: no
    arguments); ``owner`` is marked with the id."""
    owner.setProperty(COMMAND_PROPERTY, command_id)
    command = registry.get(command_id)
    if command is not None and hasattr(owner, "setToolTip") and not owner.toolTip():
        owner.setToolTip(_tip(command))

    def fire(*signal_args: Any) -> None:
        given = args(*signal_args) if args is not None else {}
        if given is None:
            return  # the args function said there is nothing to do (it said why)
        registry.trigger(command_id, **given)

    signal.connect(fire)


def connect_button(button: QObject, registry: CommandRegistry, command_id: str,
                   args: Callable[[], dict | None] | None = None) -> QObject:
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


def command_of(widget: QObject) -> str | None:
    """The id of the command a widget or action invokes, if it was wired here."""
    value = widget.property(COMMAND_PROPERTY)
    return str(value) if value else None


def _tip(command: Any) -> str:
    return f"{command.help} ({command.shortcut})" if command.shortcut else command.help
