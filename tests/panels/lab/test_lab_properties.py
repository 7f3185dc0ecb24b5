"""Property test of the lab's undoable choices: hypothesis draws sequences of commands (set a
method's parameters, the seed, the profile; choose a method; undo; redo) run through the lab's
registry onto a real undo history with autosave, and after every step checks that

- a refused command changed nothing;
- the parameters, seed and profile equal a fresh model with the history's applied edits
  replayed from their JSON (what autosave keeps) onto it;

and at the end that undoing everything gives the lab as it started."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from panels.lab.commands import SCOPE, LabState, register
from panels.lab.model import PARAMETERS_DOCUMENT, LabModel, decode
from studio.commands import CommandRefused, CommandRegistry
from tests.panels.conftest import HistoryHost, described_methods
from tests.panels.lab.test_lab_profiles import SHAPE, ShapeParams

METHODS = described_methods() + [SHAPE.describe()]  # a reproduction whose profiles differ

VALID_PARAMS = st.one_of(
    st.fixed_dictionaries({"method": st.just("toy.train"), "params": st.dictionaries(
        st.sampled_from(["steps", "lr"]), st.sampled_from([1, 5, 100]), min_size=1)}),
    st.fixed_dictionaries({"method": st.just("shape.reproduce"), "params": st.dictionaries(
        st.sampled_from(["seeds", "steps"]), st.sampled_from([2, 10, 1000]), min_size=1)}))
BAD_PARAMS = st.fixed_dictionaries({
    "method": st.sampled_from(["toy.train", "shape.reproduce", "toy.fly"]),
    "params": st.dictionaries(st.sampled_from(["steps", "seeds", "profile", "bogus"]),
                              st.sampled_from([0, 0.5, "logistic", "gpu"]), min_size=1)})
ACTIONS = st.one_of(
    st.tuples(st.just("lab.set_params"), st.one_of(VALID_PARAMS, VALID_PARAMS, BAD_PARAMS)),
    st.tuples(st.just("lab.set_seed"),
              st.fixed_dictionaries({"seed": st.sampled_from([0, 1, 7, -3])})),
    st.tuples(st.just("lab.choose_profile"),
              st.fixed_dictionaries({"profile": st.sampled_from(["smoke", "cpu", "gpu"])})),
    st.tuples(st.just("lab.choose_method"), st.fixed_dictionaries({
        "method": st.sampled_from(["toy.train", "shape.reproduce", "toy.embed"])})),
    st.tuples(st.just("undo"), st.just({})),
    st.tuples(st.just("redo"), st.just({})),
)
# the reproduce form changed, a profile chosen from another paper's method, both undone
CHOSEN_ELSEWHERE = [("lab.set_params", {"method": "shape.reproduce", "params": {"seeds": 2}}),
                    ("lab.choose_method", {"method": "toy.train"}),
                    ("lab.choose_profile", {"profile": "gpu"}),
                    ("lab.choose_method", {"method": "shape.reproduce"}),
                    ("lab.choose_profile", {"profile": "smoke"}),
                    ("undo", {}), ("undo", {}), ("redo", {})]


def _choices(model: LabModel) -> dict:
    return copy.deepcopy({"params": model.params, "seed": model.seed,
                          "profile": model.profile})


def _replayed(host: HistoryHost, start: dict) -> dict:
    """A fresh model, as the lab started, with the applied edits' JSON replayed onto it."""
    model = LabModel()
    model.set_methods(METHODS)
    model.select(start["selected"])
    model.params, model.seed, model.profile = copy.deepcopy(
        (start["params"], start["seed"], start["profile"]))
    for edit in host.history.applied(PARAMETERS_DOCUMENT):
        decode(edit.to_json()).apply(model)
    return _choices(model)


@settings(max_examples=40, deadline=None)
@given(st.lists(ACTIONS, max_size=14))
@example(CHOSEN_ELSEWHERE)
def test_lab_choices_equal_their_replayed_history_and_undo_to_the_start(qapp, actions):
    with tempfile.TemporaryDirectory() as folder:
        host = HistoryHost(Path(folder) / "runs", Path(folder) / "workspace")
        host.set_methods(METHODS)
        host._params[SHAPE.id] = ShapeParams
        registry = register(CommandRegistry())
        model = LabModel()
        model.set_methods(host.methods())
        registry.bind(SCOPE, LabState(model, host))
        model.select("shape.reproduce")  # its profile refills its form: undo gives it back
        start = _choices(model) | {"selected": model.selected}
        for name, args in actions:
            before = _choices(model)
            if name in ("undo", "redo"):
                getattr(host, name)()
            else:
                try:
                    registry.run(name, **args)
                except CommandRefused:
                    assert _choices(model) == before, (name, args)
            assert _choices(model) == _replayed(host, start), (name, args)
        while host.history.stack.canUndo():
            host.undo()
        assert _choices(model) == {k: v for k, v in start.items() if k != "selected"}
