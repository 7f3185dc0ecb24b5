"""The command registry without a window: validation, refusals that change nothing, targets,
the log line of each top-level invocation, and the error boundary of ``trigger``."""

from __future__ import annotations

import pytest
from pydantic import Field

from studio.commands import (
    Command,
    CommandArgs,
    CommandFailed,
    CommandRefused,
    CommandRegistry,
    Invocation,
    Refusal,
)


class Counter:
    """A target: named counters a user can bump."""

    def __init__(self) -> None:
        self.values = {"alpha": 0, "beta": 0}


class BumpArgs(CommandArgs):
    name: str = Field(description="which counter")
    by: int = Field(1, ge=1, le=100, description="how much")


def bump(target: Counter, args: BumpArgs) -> int:
    if args.name not in target.values:
        raise Refusal(f"no counter named {args.name!r}")
    target.values[args.name] += args.by
    return target.values[args.name]


def crash(target: Counter, args: None) -> None:
    raise RuntimeError("disk on fire")


@pytest.fixture
def registry() -> tuple[CommandRegistry, Counter, list[Invocation]]:
    registry = CommandRegistry()
    registry.add(Command("count.bump", "Bump a counter", "Add to a named counter.", bump,
                         BumpArgs, shortcut="Ctrl+B", undoable=False))
    registry.add(Command("count.crash", "Crash", "A command with a bug.", crash))
    counter = Counter()
    registry.bind("count", counter)
    seen: list[Invocation] = []
    registry.listen(seen.append)
    return registry, counter, seen


def test_run_validates_and_logs_one_python_line(registry) -> None:
    reg, counter, seen = registry
    assert reg.run("count.bump", name="alpha", by=3) == 3
    assert counter.values["alpha"] == 3
    assert [i.python() for i in seen] == ['studio.command("count.bump", name="alpha", by=3)']
    reg.run("count.bump", name="beta")  # a default is left out of the line
    assert seen[-1].python() == 'studio.command("count.bump", name="beta")'
    assert seen[-1].source == "script"


@pytest.mark.parametrize(("args", "reason"), [
    ({"name": "alpha", "by": 0}, "by: Input should be greater than or equal to 1"),
    ({"name": "alpha", "by": "many"}, "by: Input should be a valid integer"),
    ({"by": 2}, "name is required"),
    ({"name": "alpha", "bye": 2}, "unknown argument 'bye'"),
    ({"name": "gamma"}, "no counter named 'gamma'"),
])
def test_refusals_name_the_command_and_change_nothing(registry, args, reason) -> None:
    reg, counter, seen = registry
    with pytest.raises(CommandRefused) as caught:
        reg.run("count.bump", **args)
    assert str(caught.value).startswith("count.bump: ")
    assert reason in str(caught.value)
    assert counter.values == {"alpha": 0, "beta": 0}
    assert seen[-1].refused and seen[-1].python().startswith('studio.command("count.bump"')
    assert "# refused: " in seen[-1].python()


def test_unknown_command_suggests_close_ids(registry) -> None:
    reg, _counter, _seen = registry
    with pytest.raises(CommandRefused, match=r"count.bumb: no such command \(did you mean "
                                             r"count.bump"):
        reg.run("count.bumb", name="alpha")


def test_no_target_is_a_refusal_and_find_target_can_supply_one(registry) -> None:
    reg, counter, _seen = registry
    reg.unbind("count")
    with pytest.raises(CommandRefused, match="the count panel is not open"):
        reg.run("count.bump", name="alpha")
    reg.find_target = lambda scope: counter if scope == "count" else None
    assert reg.run("count.bump", name="alpha") == 1


def test_trigger_reports_instead_of_raising(registry) -> None:
    reg, counter, seen = registry
    reported: list[tuple[str, str]] = []
    reg.on_error = lambda title, message: reported.append((title, message))
    assert reg.trigger("count.bump", name="nope") is None
    assert reg.trigger("count.crash") is None
    assert reported[0] == ("Cannot bump a counter", "count.bump: no counter named 'nope'")
    assert reported[1] == ("Cannot crash", "count.crash: RuntimeError: disk on fire")
    assert [i.source for i in seen] == ["user", "user"]
    with pytest.raises(CommandFailed) as caught:
        reg.run("count.crash")
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_nested_commands_are_not_logged(registry) -> None:
    reg, counter, seen = registry

    def bump_both(target: Counter, args: None) -> None:
        reg.run("count.bump", name="alpha")
        reg.run("count.bump", name="beta")

    reg.add(Command("count.bump_both", "Bump both", "Both counters.", bump_both))
    reg.run("count.bump_both")
    assert counter.values == {"alpha": 1, "beta": 1}
    assert [i.python() for i in seen] == ['studio.command("count.bump_both")']


def test_ids_and_duplicates_are_checked() -> None:
    with pytest.raises(ValueError, match="scope.verb"):
        Command("Bump", "Bump", "", bump)
    reg = CommandRegistry()
    reg.add(Command("count.bump", "Bump", "", bump, BumpArgs))
    with pytest.raises(ValueError, match="registered already"):
        reg.add(Command("count.bump", "Bump", "", crash))
    assert reg.get("count.bump").schema()["properties"]["by"]["maximum"] == 100
    assert reg.get("count.bump").arg_names() == ["name", "by"]


def test_log_line_is_python_that_evaluates_to_the_same_arguments() -> None:
    from studio.commands import python_literal

    value = {"net": 'a"b\\c\n', "at": [1.5, -2], "on": True, "none": None, "µ": "é"}
    assert eval(python_literal(value)) == value  # noqa: S307 - our own literal


def test_run_restoring_collects_refusals_and_logs_nothing(registry) -> None:
    reg, counter, seen = registry
    problems: list[str] = []
    assert reg.run_restoring(problems, "count.bump", name="alpha")
    assert not reg.run_restoring(problems, "count.bump", name="gamma")
    assert counter.values["alpha"] == 1 and seen == []
    assert problems == ["count.bump: no counter named 'gamma'"]


def test_arguments_named_by_module_are_imported_when_first_needed() -> None:
    reg = CommandRegistry()
    reg.add(Command("count.bump", "Bump", "", bump, "tests.studio.test_commands:BumpArgs"))
    reg.bind("count", Counter())
    assert reg.get("count.bump").arg_names() == ["name", "by"]
    assert reg.run("count.bump", name="beta", by=2) == 2
    with pytest.raises(CommandRefused, match="by: Input should be less than or equal to 100"):
        reg.run("count.bump", name="beta", by=101)


def test_registry_for_a_host_with_and_without_a_window() -> None:
    from studio.commands import registry_for

    class Host:
        def __init__(self) -> None:
            self.errors: list[tuple[str, str]] = []

        def show_error(self, title: str, message: str) -> None:
            self.errors.append((title, message))

    commands = [Command("count.bump", "Bump a counter", "", bump, BumpArgs)]
    alone = Host()
    own = registry_for(alone, commands)
    own.bind("count", Counter())
    own.trigger("count.bump", name="nope")
    assert alone.errors == [("Cannot bump a counter", "count.bump: no counter named 'nope'")]
    windowed = Host()
    windowed.commands = CommandRegistry()
    assert registry_for(windowed, commands) is windowed.commands
    assert registry_for(windowed, commands).get("count.bump") is commands[0]  # again: fine
