"""What the panels' command tests share: a panel's commands bound to its state with no window,
every invocation kept, and a fake host that lists a paper's methods as the engine does."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from studio.commands import CommandRegistry, Invocation


def bind_windowless(register: Callable[[CommandRegistry], CommandRegistry], scope: str,
                    state: Any) -> tuple[CommandRegistry, Any, list[Invocation]]:
    """A registry of the panel's commands (``register``) acting on ``state``, and the list
    its invocations are appended to (to read their Python lines and outcomes)."""
    registry = register(CommandRegistry())
    registry.bind(scope, state)
    seen: list[Invocation] = []
    registry.listen(seen.append)
    return registry, state, seen


def list_methods(host: Any, specs: Iterable[Any]) -> Any:
    """``host`` (a test host) listing ``specs`` and their parameters, as the engine does."""
    specs = list(specs)
    host.set_methods([spec.describe() for spec in specs])
    host._params.update({spec.id: spec.params for spec in specs})
    return host
