"""The command log (issue 37): one line of Python per command run, refusals marked, copyable;
commands that only opened a dialog are not logged, the one the dialog runs is."""

from __future__ import annotations

from PySide6.QtGui import QGuiApplication
from PySide6.QtTest import QTest

from studio.command_log import REFUSED_COLOUR, CommandLog
from studio.commands import Command, CommandArgs, CommandRegistry, Refusal


class SayArgs(CommandArgs):
    word: str
    times: int = 1


def say(target: list, args: SayArgs) -> bool:
    if args.word == "no":
        raise Refusal("will not say no")
    target.append(args.word * args.times)
    return True


def test_lines_refusals_and_copy(qapp) -> None:
    registry = CommandRegistry()
    registry.add(Command("talk.say", "Say a word", "Say it.", say, SayArgs))
    registry.bind("talk", [])
    log = CommandLog(registry)
    registry.trigger("talk.say", word="hi", times=2)
    registry.trigger("talk.say", word="no")
    registry.trigger("talk.say", word='a "quoted"\nword')
    lines = log.text().splitlines()
    assert lines == ['studio.command("talk.say", word="hi", times=2)',
                     'studio.command("talk.say", word="no")  # refused: will not say no',
                     'studio.command("talk.say", word="a \\"quoted\\"\\nword")']
    assert log.lines.item(1).foreground().color().name() == REFUSED_COLOUR
    assert log.lines.item(0).foreground().color().name() != REFUSED_COLOUR
    log.lines.item(0).setSelected(True)
    log.lines.item(2).setSelected(True)
    log.lines.setFocus()
    log.copy_selected()
    assert QGuiApplication.clipboard().text() == f"{lines[0]}\n{lines[2]}\n"
    log.copy_all()
    assert QGuiApplication.clipboard().text() == "\n".join(lines) + "\n"
    assert "3 command(s)" in log.count_label.text()
    log.clear()
    assert log.text() == "" and "appear here" in log.count_label.text()


def test_ctrl_c_in_the_list_copies_the_selection(qapp, qtbot) -> None:
    registry = CommandRegistry()
    registry.add(Command("talk.say", "Say a word", "Say it.", say, SayArgs))
    registry.bind("talk", [])
    log = CommandLog(registry)
    qtbot.addWidget(log)
    log.show()
    qtbot.waitExposed(log)
    registry.run("talk.say", word="copied")
    log.lines.setCurrentRow(0)
    log.lines.setFocus()
    QGuiApplication.clipboard().setText("")
    QTest.keySequence(log.lines, "Ctrl+C")
    assert QGuiApplication.clipboard().text() == 'studio.command("talk.say", word="copied")\n'


def test_the_window_logs_menu_commands_not_dialogs(main_window) -> None:
    main_window.command_log.clear()
    for command_id in ("view.palette", "view.runs", "view.welcome"):
        action = next(a for a in main_window.findChildren(type(main_window.open_action))
                      if a.property("studioCommand") == command_id)
        action.trigger()
    main_window._palette.hide()
    assert main_window.command_log.text().splitlines() == [
        'studio.command("view.runs")', 'studio.command("view.welcome")']


def test_reset_layout_keeps_one_log_that_still_listens(main_window) -> None:
    main_window.commands.trigger("view.command_log", on=True)
    main_window.reset_layout()
    assert len(main_window.findChildren(CommandLog)) == 1
    assert main_window.command_log_dock_widget.isHidden()
    main_window.commands.trigger("view.welcome")
    assert main_window.command_log.text().splitlines()[-1] == 'studio.command("view.welcome")'


def test_a_command_run_as_the_user_types_logs_its_last_run_only(qapp) -> None:
    registry = CommandRegistry()
    registry.add(Command("talk.say", "Say a word", "Say it.", say, SayArgs))
    registry.add(Command("talk.type", "Type a word", "As typed.", say, SayArgs,
                         log_last_only=True))
    registry.bind("talk", [])
    log = CommandLog(registry)
    for typed in ("r", "ri", "ris"):
        registry.trigger("talk.type", word=typed)
    registry.trigger("talk.say", word="x")
    registry.trigger("talk.type", word="k")
    assert log.text().splitlines() == ['studio.command("talk.type", word="ris")',
                                       'studio.command("talk.say", word="x")',
                                       'studio.command("talk.type", word="k")']
