"""A panel's status line says what its commands did: the refusal, or the line a command
returned. One function, so every panel words it the same."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QLabel

from studio.commands import Invocation


def show_outcome(line: QLabel, invocation: Invocation, scope: str, *,
                 exports: bool = False) -> bool:
    """Put ``invocation``'s outcome in ``line`` when it is a command of ``scope`` (True then):
    '<title> refused: <why>' or the text it returned. With ``exports``, a returned path reads
    'Exported <path>' and a success after a refusal '<title>: done', so an old refusal never
    reads as this command's."""
    if invocation.command.scope != scope:
        return False
    if invocation.refused:
        line.setText(f"{invocation.command.title} refused: {invocation.refused}")
    elif isinstance(invocation.result, str):
        line.setText(invocation.result)
    elif exports and isinstance(invocation.result, Path):
        line.setText(f"Exported {invocation.result}")
    elif exports and " refused: " in line.text():
        line.setText(f"{invocation.command.title}: done")
    return True
