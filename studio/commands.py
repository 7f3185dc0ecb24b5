"""Every user action is a command: one registry that menus, buttons, keys, the palette, the
console and scripts all go through, so an action can be searched, logged, replayed on another
file and tested without a window.

A ``Command`` has a stable id (``routing.move_wire``), a title, one line of help, a pydantic
model of its arguments (or none), an optional shortcut and menu path, whether it is undoable,
and a function ``fn(target, args)``. The target is the state the command acts on (a panel's
model and document, the window), bound by scope (the id's first part: ``routing``) with
``CommandRegistry.bind``. Elements are named by what the user sees (net, molecule, feature,
turn or ROI names), never row indices.

``registry.run(id, **args)`` validates the arguments, runs the command and returns its
result, or raises ``CommandRefused`` whose message starts with the id and says why ("routing.
move_wire: no net named '_009_' in gcd.def"); a refused command changes nothing. An undoable
command applies its change by pushing an edit onto the document's history (``host.push_edit``),
so undo, redo and autosave hold it. ``registry.trigger`` is the same from a menu, button or key:
a refusal or a bug is reported (``on_error``) instead of raised, since nothing above a Qt slot
could catch it. Each top-level invocation is announced to listeners as an ``Invocation``, whose
``python()`` is the line a script would write (the command log).

Qt-free: panels' command modules and their tests import it without a display. Nor does it
import pydantic until a command's arguments are first checked (``CommandArgs`` is built on first
use, and ``Command.args`` may name its model as ``"module:Class"``), so the window's menus are
built without paying for pydantic at start-up.
"""

from __future__ import annotations

import difflib
import importlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

log = logging.getLogger("studio.commands")

_MODELS: dict[str, Any] = {}   # "module:Class" -> the class, once imported
COMMAND_ID = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
USER, SCRIPT = "user", "script"   # who triggered an invocation


class _Prompted:
    """The result of a command that only asked the user for its arguments (a file dialog):
    not logged; the command the dialog runs next is."""

    def __repr__(self) -> str:
        return "PROMPTED"


PROMPTED = _Prompted()


def __getattr__(name: str) -> Any:
    """``CommandArgs``, built (and pydantic imported) when a module first asks for it."""
    if name != "CommandArgs":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from pydantic import BaseModel, ConfigDict

    class CommandArgs(BaseModel):
        """Base of every command's arguments: a misspelt or extra argument is an error."""

        model_config = ConfigDict(extra="forbid")

    CommandArgs.__module__ = __name__
    globals()["CommandArgs"] = CommandArgs
    return CommandArgs


class CommandError(Exception):
    """A command that did not do what was asked; the message starts with its id."""

    def __init__(self, command_id: str, reason: str) -> None:
        super().__init__(f"{command_id}: {reason}")
        self.command_id = command_id
        self.reason = reason


class CommandRefused(CommandError):
    """Refused before anything changed: unknown id, bad arguments, an element that does not
    exist, nothing open to act on."""


class CommandFailed(CommandError):
    """The command raised something it did not expect (a bug, a disk error); logged with its
    traceback. ``__cause__`` is the original exception."""


class Refusal(Exception):
    """Raised by a command function to refuse, with the reason alone (the registry puts the
    id in front): ``raise Refusal(f"no net named {name!r} in {file}")``."""


@dataclass(frozen=True)
class Command:
    id: str
    title: str
    help: str
    fn: Callable[[Any, Any], Any]            # fn(target, args) -> result
    # the arguments' model, or "module:Class" imported when first needed; None: no arguments
    args: type[BaseModel] | str | None = None
    shortcut: str = ""                       # "Ctrl+E", Qt's portable text
    menu: str = ""                           # "File/Export figure…", where it is listed
    undoable: bool = False                   # its change goes through the edit history
    scope: str = ""                          # the target it needs; default: the id's first part
    # run again straight after itself, it replaces its previous log line (a search box that
    # searches as the user types logs the last query, not one line per key)
    log_last_only: bool = False

    def __post_init__(self) -> None:
        if not COMMAND_ID.match(self.id):
            raise ValueError(f"command id {self.id!r}: use scope.verb in lower case "
                             "(routing.move_wire)")
        if not self.scope:
            object.__setattr__(self, "scope", self.id.partition(".")[0])

    def model(self) -> type[BaseModel] | None:
        """The arguments' pydantic model (imported on first use when given by name)."""
        if not isinstance(self.args, str):
            return self.args
        resolved = _MODELS.get(self.args)
        if resolved is None:
            module, _, name = self.args.partition(":")
            resolved = getattr(importlib.import_module(module), name)
            _MODELS[self.args] = resolved
        return resolved

    def schema(self) -> dict:
        """The arguments' JSON Schema (what the palette's form is built from)."""
        model = self.model()
        if model is None:
            return {"type": "object", "properties": {}}
        return model.model_json_schema()

    def arg_names(self) -> list[str]:
        model = self.model()
        return list(model.model_fields) if model is not None else []


@dataclass
class Invocation:
    """One top-level run of a command: what the log shows and a script replays."""

    command: Command
    args: dict                         # as validated and given (JSON-able values)
    source: str = USER
    refused: str = ""                  # the reason, when it was refused or failed
    result: Any = None
    started: float = field(default_factory=time.time)

    def python(self) -> str:
        """``studio.command("routing.move_wire", net="_001_", dx_um=0.38)``"""
        parts = [python_literal(self.command.id)] + [
            f"{name}={python_literal(value)}" for name, value in self.args.items()]
        line = f"studio.command({', '.join(parts)})"
        return f"{line}  # refused: {self.refused}" if self.refused else line


Listener = Callable[[Invocation], None]


class CommandRegistry:
    """The commands of one window (``window.commands``), and what each scope acts on."""

    def __init__(self) -> None:
        self._commands: dict[str, Command] = {}
        self._targets: dict[str, Any] = {}
        self._listeners: list[Listener] = []
        self._depth = 0                               # >0 while a command runs
        self.on_error: Callable[[str, str], None] | None = None   # (title, message)
        self.find_target: Callable[[str], Any] | None = None      # scope -> target or None

    # -- registering -----------------------------------------------------------------------
    def add(self, command: Command, replace: bool = False) -> Command:
        """Register ``command``; the same id twice is a programming error unless
        ``replace`` (a panel rebuilt in the same window registers again)."""
        known = self._commands.get(command.id)
        if known is not None and not replace and known.fn is not command.fn:
            raise ValueError(f"command {command.id!r} is registered already")
        self._commands[command.id] = command
        return command

    def add_all(self, commands: Iterable[Command]) -> CommandRegistry:
        """Register a panel's commands (again, for a panel rebuilt in the same window)."""
        for command in commands:
            self.add(command, replace=True)
        return self

    def command(self, id: str, title: str, help: str,
                args: type[BaseModel] | str | None = None,
                **options: Any) -> Callable[[Callable], Callable]:
        """Decorator form of ``add``: ``@registry.command("app.quit", "Quit", "...")``."""

        def register(fn: Callable) -> Callable:
            self.add(Command(id, title, help, fn, args, **options), replace=True)
            return fn

        return register

    def get(self, command_id: str) -> Command | None:
        return self._commands.get(command_id)

    def __contains__(self, command_id: object) -> bool:
        return command_id in self._commands

    def __len__(self) -> int:
        return len(self._commands)

    def commands(self) -> list[Command]:
        """Every command, by id."""
        return [self._commands[key] for key in sorted(self._commands)]

    # -- targets ---------------------------------------------------------------------------
    def bind(self, scope: str, target: Any) -> None:
        """``target`` is what the commands of ``scope`` act on from now on."""
        self._targets[scope] = target

    def unbind(self, scope: str, target: Any = None) -> None:
        """Forget the scope's target (only if it is still ``target``, when given)."""
        if target is None or self._targets.get(scope) is target:
            self._targets.pop(scope, None)

    def target(self, scope: str) -> Any:
        found = self._targets.get(scope)
        if found is None and self.find_target is not None:
            found = self.find_target(scope)   # the window opens the panel that binds it
            found = self._targets.get(scope, found)
        return found

    # -- listening -------------------------------------------------------------------------
    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(invocation)`` after each top-level invocation; returns the undo."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    # -- running ---------------------------------------------------------------------------
    def validate(self, command_id: str, args: dict) -> tuple[Command, Any]:
        """The command and its validated arguments, or ``CommandRefused``. A command of a
        panel not opened yet is registered by opening it (``find_target``)."""
        command = self._commands.get(command_id)
        scope = command_id.partition(".")[0]
        if command is None and self.find_target is not None and scope not in self._targets:
            self.find_target(scope)
            command = self._commands.get(command_id)
        if command is None:
            close = difflib.get_close_matches(command_id, self._commands, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise CommandRefused(command_id, f"no such command{hint}")
        model = command.model()
        if model is None:
            if args:
                raise CommandRefused(command_id, "takes no arguments, got "
                                     + ", ".join(sorted(args)))
            return command, None
        from pydantic import ValidationError

        try:
            return command, model.model_validate(args)
        except ValidationError as exc:
            raise CommandRefused(command_id, _describe(exc)) from None

    def run(self, command_id: str, /, **args: Any) -> Any:
        """Run a command with keyword arguments (scripts, the console, tests)."""
        return self._invoke(command_id, args, SCRIPT)

    def run_as_user(self, command_id: str, /, **args: Any) -> Any:
        """As ``run`` (a refusal is raised), logged as the user's own action: a form that
        keeps the refusal beside the fields (the palette)."""
        return self._invoke(command_id, args, USER)

    def run_restoring(self, problems: list[str], command_id: str, /, **args: Any) -> bool:
        """Run a command while restoring a view (``restore_view_state``): not logged (it is
        not the user's action); a refusal or failure is appended to ``problems``."""
        try:
            with self.nested():
                self.run(command_id, **args)
        except CommandError as exc:
            problems.append(str(exc))
            return False
        return True

    def trigger(self, command_id: str, /, **args: Any) -> Any:
        """Run a command for a menu, button or key: a refusal or failure is reported through
        ``on_error`` (and logged) and ``None`` returned, never raised into Qt."""
        try:
            return self._invoke(command_id, args, USER)
        except CommandError as exc:
            self._report(exc)
            return None

    def _invoke(self, command_id: str, args: dict, source: str) -> Any:
        top = self._depth == 0
        command = self._commands.get(command_id)
        try:
            command, parsed = self.validate(command_id, args)
            target = self._target_for(command)
            self._depth += 1
            try:
                result = command.fn(target, parsed)
            finally:
                self._depth -= 1
        except CommandError as exc:
            if top and command is not None:
                self._announce(Invocation(command, _plain(args), source, exc.reason))
            raise
        except Refusal as exc:
            if top:
                self._announce(Invocation(command, _plain(args), source, str(exc)))
            raise CommandRefused(command_id, str(exc)) from None
        except Exception as exc:
            log.exception("command %s failed", command_id)
            reason = f"{type(exc).__name__}: {exc}"
            if top:
                self._announce(Invocation(command, _plain(args), source, reason))
            raise CommandFailed(command_id, reason) from exc
        if top and result is not PROMPTED:
            given = parsed.model_dump(mode="json", exclude_defaults=True) \
                if parsed is not None else {}
            ordered = {name: given[name] for name in command.arg_names() if name in given}
            self._announce(Invocation(command, ordered, source, result=result))
        return result

    def _target_for(self, command: Command) -> Any:
        target = self.target(command.scope)
        if target is None:
            raise CommandRefused(command.id, f"nothing to act on: the {command.scope} "
                                 "panel is not open")
        return target

    def _announce(self, invocation: Invocation) -> None:
        for listener in list(self._listeners):
            try:
                listener(invocation)
            except Exception:  # a broken log must not undo a command that ran
                log.exception("a command listener failed")

    def _report(self, exc: CommandError) -> None:
        log.warning("%s", exc)
        command = self._commands.get(exc.command_id)
        title = f"Cannot {command.title[:1].lower()}{command.title[1:]}" if command else \
            "Unknown command"
        say(self.on_error, title, str(exc))

    @contextmanager
    def nested(self) -> Iterator[None]:
        """Commands run inside are not announced (part of the one the user triggered)."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1


def registry_for(host: Any, commands: Iterable[Command] = ()) -> CommandRegistry:
    """A panel's registry: the window's (``host.commands``) with ``commands`` added; a host
    without one (a test's, a panel shown alone) gets a registry of the panel's own that
    reports through ``host.show_error``."""
    registry = getattr(host, "commands", None)
    if registry is None:
        registry = CommandRegistry()
        registry.on_error = getattr(host, "show_error", None)
    return registry.add_all(commands)


def say(on_error: Callable[[str, str], None] | None, title: str, message: str) -> None:
    """Report a failure to the user; a failure to report is only logged (the boundary of a
    Qt slot must never raise)."""
    if on_error is None:
        return
    try:
        on_error(title, message)
    except Exception:
        log.exception("could not report %r", title)


def failure_message(exc: BaseException) -> str:
    """What the user is told of an exception: a command's own message as it is (it names the
    command), anything else with its type."""
    return str(exc) if isinstance(exc, CommandError) else f"{type(exc).__name__}: {exc}"


def _describe(exc: ValidationError) -> str:
    """Pydantic's errors as one line naming each bad argument."""
    parts = []
    for error in exc.errors():
        name = ".".join(str(part) for part in error["loc"]) or "arguments"
        if error["type"] == "extra_forbidden":
            parts.append(f"unknown argument {name!r}")
        elif error["type"] == "missing":
            parts.append(f"{name} is required")
        else:
            parts.append(f"{name}: {error['msg']} (got {error.get('input')!r})")
    return "; ".join(parts)


def python_literal(value: Any) -> str:
    """A JSON-able value as Python source, strings in double quotes as the log shows them."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # JSON's escapes are Python's too
    if isinstance(value, list | tuple):
        return "[" + ", ".join(python_literal(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{python_literal(str(key))}: {python_literal(item)}"
                               for key, item in value.items()) + "}"
    return repr(value)


def _plain(args: dict) -> dict:
    """Arguments as given, for the log line of a refusal (reprs of odd values stay short)."""
    return {name: value if isinstance(value, str | int | float | bool | None | list | dict)
            else repr(value)[:80] for name, value in args.items()}
