"""The lab's actions as commands (``studio.commands``): choose a paper or a method, set its
parameters, the seed and the reproduction's profile (undoable), run it, reproduce the paper's
claim, cancel, open the paper's report; and, with the panel's window, open a data file, show
an artifact or a tab, open an artifact in the panel that reads it, and export the plot shown.

Elements are named as the lab shows them: methods by their id (``toy.train``, the tooltip of
the method tree), papers by their slug (the tree's bold rows), parameters by the names of the
method's form, artifacts by the name the Artifacts list shows before the kind (a file opened
here by its file name), tabs by their titles; so a logged command means the same in another
window whose engine lists the same methods. Parameter, seed and profile changes are one edit
each (``SetParams``, ``SetSeed``, ``SetProfile``) pushed through ``host.push_edit`` onto the lab
tab's history. The functions act on a ``LabState``; tests build one without a window and call
``registry.run``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from panels.lab.model import (
    PARAMETERS_DOCUMENT,
    PROFILES,
    REPRODUCE,
    RUN,
    LabModel,
    SetParams,
    SetProfile,
    SetSeed,
    is_reproduce,
    paper_of,
)
from studio.commands import Command, CommandArgs, CommandRegistry, Refusal
from studio.widgets import schema as sch

SCOPE = "lab"
TABS = ("live", "artifacts", "claim", "log")
SEED_MAX = 2**31 - 1

# submit(method, params, inputs, seed, cluster): the view shows "Submitting…" and follows the
# job; without a view the host's ``submit_job`` is called with the model's callbacks
Submit = Callable[[str, dict, dict, int, str], None]


@dataclass
class LabState:
    """What the lab commands act on. ``view`` (the ``LabPanel``) is needed only by the
    commands that show something (a file, an artifact, a tab, a figure export)."""

    model: LabModel
    host: Any
    view: Any = None
    submit: Submit | None = None

    def push(self, edit: SetParams | SetSeed | SetProfile) -> None:
        """Apply ``edit`` through the lab tab's history (undo, redo, autosave)."""
        self.host.push_edit(PARAMETERS_DOCUMENT, edit, self.model)

    def send(self, method: str, params: dict, inputs: dict, seed: int, cluster: str) -> None:
        if self.submit is not None:
            self.submit(method, params, inputs, seed, cluster)
            return
        self.host.submit_job(method, params, inputs, seed, on_accepted=self.model.accepted,
                             on_error=self.model.rejected, cluster=cluster)

    def say(self, text: str) -> None:
        """A line for the panel's status (nothing without a window)."""
        if self.view is not None:
            self.view.status.setText(text)


# -- arguments ---------------------------------------------------------------------------------


class PathArgs(CommandArgs):
    path: str = Field(description="the file's path")


class PaperArgs(CommandArgs):
    paper: str = Field(description="the paper's slug, as the method tree groups it (eos, …)")


class MethodArgs(CommandArgs):
    method: str = Field(description="the method's id (toy.train), as its tooltip shows it")


class ParamsArgs(CommandArgs):
    params: dict = Field(description="parameters to change, by the form's names; the others "
                                     "keep their values")
    method: str | None = Field(None, description="whose parameters (default: the method "
                                                 "chosen)")


class SeedArgs(CommandArgs):
    seed: int = Field(ge=0, le=SEED_MAX, description="seeds Python, NumPy and torch before "
                                                     "the method runs")


class ProfileArgs(CommandArgs):
    profile: Literal[PROFILES] = Field(description="smoke, cpu or gpu: the reproduction's "
                                                   "settings")


class RunArgs(CommandArgs):
    method: str | None = Field(None, description="the method's id (default: the one chosen)")
    params: dict | None = Field(None, description="parameters that differ from the method's "
                                                  "defaults (default: the form's)")
    inputs: dict[str, str] | None = Field(None, description="input name -> a file or "
                                                            "run:<id>/<artifact>")
    seed: int | None = Field(None, ge=0, le=SEED_MAX, description="default: the seed set")
    cluster: str = Field("", description="local, auto, HOST:PORT or ray://HOST:PORT; empty: "
                                         "the default in Settings")


class ReproduceArgs(CommandArgs):
    paper: str | None = Field(None, description="the paper's slug (default: the chosen "
                                                "method's paper)")
    profile: Literal[PROFILES] | None = Field(None, description="default: the profile chosen")


class CancelArgs(CommandArgs):
    hard: bool | None = Field(None, description="kill the job's worker (default: only when "
                                                "it is cancelling already)")


class ReportArgs(CommandArgs):
    paper: str | None = Field(None, description="the paper's slug (default: the chosen "
                                                "method's paper)")


class ArtifactArgs(CommandArgs):
    artifact: str = Field(description="the artifact's name, as the Artifacts list shows it "
                                      "(an opened file: its file name)")


class TabArgs(CommandArgs):
    tab: Literal[TABS] = Field(description="Live, Artifacts, Claim or Log")


class ExportArgs(CommandArgs):
    path: str = Field(description="the figure's file: .png, .svg or .pdf (rendered by the "
                                  "engine)")
    metric: str | None = Field(None, description="a live curve, by its metric's name "
                                                 "(default: the plot shown)")


# -- lookups: names the user sees -> the model's entries ---------------------------------------


def _listed(state: LabState) -> dict[str, dict]:
    if not state.model.methods:
        raise Refusal("the engine has listed no methods yet (is it running?)")
    return state.model.methods


def _method(state: LabState, method_id: str | None) -> dict:
    """The method named (``None``: the one chosen)."""
    methods = _listed(state)
    if method_id is None:
        if state.model.method is None:
            raise Refusal("no method is chosen: choose one first")
        return state.model.method
    if method_id not in methods:
        paper = method_id.split(".")[0]
        same = sorted(m for m in methods if m.startswith(f"{paper}."))
        hint = f" (methods of {paper}: {', '.join(same)})" if same else ""
        raise Refusal(f"the engine lists no method {method_id!r}{hint}")
    return methods[method_id]


def _paper(state: LabState, slug: str | None) -> str:
    if slug is None:
        return paper_of(_method(state, None))
    papers = state.model.by_paper()
    if slug not in papers:
        raise Refusal(f"the engine lists no method of the paper {slug!r} (papers: "
                      f"{', '.join(papers)})")
    return slug


def form_schema(method: dict) -> dict:
    """The schema the lab's form shows: a reproduce method's without ``smoke`` (kept by the
    engine for old callers; the lab picks the smoke profile instead)."""
    schema = method.get("params_schema") or {}
    if not is_reproduce(method["id"]):
        return schema
    properties = {k: v for k, v in (schema.get("properties") or {}).items() if k != "smoke"}
    return {**schema, "properties": properties,
            "required": [k for k in schema.get("required") or [] if k != "smoke"]}


def form_defaults(model: LabModel, method: dict) -> dict:
    """What the form shows before anything is changed: the schema's defaults, and for the
    paper's reproduce method the chosen profile and its settings."""
    values = {spec.name: spec.default for spec in sch.parse_schema(form_schema(method))}
    if method["id"] == model.reproduce_method():
        values |= {"profile": model.profile, **model.profile_settings()}
    return values


def check_params(method: dict, params: dict) -> None:
    """Refuse names the method's form lacks and values its schema would refuse."""
    fields = {spec.name: spec for spec in sch.parse_schema(form_schema(method))}
    unknown = sorted(set(params) - set(fields))
    if unknown:
        raise Refusal(f"{method['id']} has no parameter {', '.join(map(repr, unknown))} "
                      f"(its parameters: {', '.join(fields) or 'none'})")
    problems = [f"{name}: {message}" for name, value in params.items()
                if (message := fields[name].check(value))]
    if problems:
        raise Refusal(f"{method['id']}: " + "; ".join(problems))


def _idle(state: LabState) -> None:
    if state.model.busy:
        job = state.model.current
        running = f"{job.method} ({job.id}) is {job.state}" if job is not None \
            else "a submission is waiting for the engine"
        raise Refusal(f"{running}: wait for it or cancel it first")


def _view(state: LabState, what: str) -> Any:
    if state.view is None:
        raise Refusal(f"cannot {what} without the panel's window")
    return state.view


# -- choosing ----------------------------------------------------------------------------------


def choose_paper(state: LabState, args: PaperArgs) -> str:
    """The paper's first method; before the engine lists methods the choice waits for it."""
    if not state.model.methods:
        state.model.select_paper(args.paper)
        return f"{args.paper} is chosen once the engine lists its methods"
    state.model.select_paper(_paper(state, args.paper))
    return f"Chose {state.model.selected}"


def choose_method(state: LabState, args: MethodArgs) -> bool:
    state.model.select(_method(state, args.method)["id"])
    return True


def set_params(state: LabState, args: ParamsArgs) -> bool:
    """Change some of a method's parameters (one undo step)."""
    method = _method(state, args.method)
    check_params(method, args.params)
    previous = state.model.params.get(method["id"])
    shown = {**form_defaults(state.model, method), **(previous or {})}
    if all(shown.get(name) == value for name, value in args.params.items()):
        raise Refusal(f"{method['id']} has these values already")
    if "profile" in args.params and method["id"] == state.model.reproduce_method() \
            and args.params["profile"] != state.model.profile:
        raise Refusal("choose the profile with lab.choose_profile (it brings its settings)")
    state.push(SetParams(method["id"], {**shown, **args.params},
                         dict(previous) if previous is not None else None,
                         sorted(k for k, v in args.params.items() if shown.get(k) != v)))
    return True


def set_seed(state: LabState, args: SeedArgs) -> bool:
    if args.seed == state.model.seed:
        raise Refusal(f"the seed is {args.seed} already")
    state.push(SetSeed(args.seed, state.model.seed))
    return True


def choose_profile(state: LabState, args: ProfileArgs) -> bool:
    """The reproduction's profile (its settings refill the reproduce method's form)."""
    model = state.model
    if args.profile == model.profile:
        raise Refusal(f"the {args.profile} profile is chosen already")
    reproduce = model.reproduce_method()
    before = model.params.get(reproduce) if reproduce is not None else None
    state.push(SetProfile(args.profile, model.profile, reproduce,
                          dict(before) if before is not None else None))
    return True


# -- running -----------------------------------------------------------------------------------


def run(state: LabState, args: RunArgs) -> bool:
    """Submit a method with its parameters (the method's defaults, then the form's values or
    those given); the method becomes the chosen one, so its curves show here."""
    _idle(state)
    method = _method(state, args.method)
    model = state.model
    params = model.params_for(method["id"]) if args.params is None else dict(args.params)
    check_params(method, params)
    if model.selected != method["id"]:
        model.select(method["id"])
    submitted = {**form_defaults(model, method), **params}
    submitted = {k: v for k, v in submitted.items() if v is not None}
    declared = set(method.get("inputs") or {})
    inputs = dict(args.inputs or {})
    unknown = sorted(set(inputs) - declared)
    if unknown:
        raise Refusal(f"{method['id']} has no input {', '.join(map(repr, unknown))} (its "
                      f"inputs: {', '.join(sorted(declared)) or 'none'})")
    seed = model.seed if args.seed is None else args.seed
    model.prepare(RUN, method["id"], submitted, seed)
    state.send(method["id"], submitted, inputs, seed, args.cluster.strip())
    return True  # the view says "Submitting…", then the job's state


def reproduce(state: LabState, args: ReproduceArgs) -> bool:
    """Run ``<paper>.reproduce`` with the profile's settings (and the settings changed in
    its form: exploratory); the claim shows after."""
    _idle(state)
    model = state.model
    slug = _paper(state, args.paper)
    method = f"{slug}.reproduce"
    if method not in model.methods:
        raise Refusal(f"the paper {slug!r} has no reproduce method in the engine")
    profile = args.profile or model.profile
    values = {**model.params_for(method), "profile": profile}
    params = {"profile": profile, **model.exploratory(method, values)[1]}
    model.prepare(REPRODUCE, method, params, model.seed)
    state.send(method, params, {}, model.seed, "")
    return True


def cancel(state: LabState, args: CancelArgs) -> str:
    """Soft cancel; again while it is cancelling (or ``hard``), kill the job's worker."""
    job = state.model.current
    if job is None or job.finished:
        raise Refusal("no job of the lab is running")
    hard = job.state == "cancelling" if args.hard is None else args.hard
    state.host.cancel_job(job.id, hard=hard)
    return f"{'Killing' if hard else 'Cancelling'} {job.id}…"


def open_report(state: LabState, args: ReportArgs) -> bool:
    """The engine writes the paper's report into the workspace; it opens in the browser."""
    slug = _paper(state, args.paper)
    if f"{slug}.reproduce" not in state.model.methods:
        raise Refusal(f"the paper {slug!r} has no reproduction, so no report")
    from studio.widgets.claim_view import request_report  # Qt: only when a report is asked

    state.say(f"Writing the report of {slug}…")  # before: the engine may answer at once
    request_report(state.host, [slug],
                   on_opened=lambda path: state.say(f"Opened the report {path}"),
                   on_error=lambda message: state.say(f"No report: {message}"))
    return True


# -- what is shown (the panel's window) --------------------------------------------------------


def open_file(state: LabState, args: PathArgs) -> str:
    """A data file (.npy, .npz, .safetensors, .csv, .parquet, .jsonl, a figure) shown in
    the Artifacts tab."""
    view = _view(state, "show a file")
    path = Path(args.path)
    if not path.is_file():
        raise Refusal(f"{path}: no such file")
    problem = view.show_file(path)
    if problem:
        raise Refusal(problem)
    return f"Opened {path.name}"


def show_artifact(state: LabState, args: ArtifactArgs) -> bool:
    view = _view(state, "show an artifact")
    known = view.artifact_names()
    if args.artifact not in known:
        raise Refusal(f"no artifact {args.artifact!r} in the Artifacts list (listed: "
                      f"{', '.join(map(repr, known)) or 'none'})")
    view.show_artifact(args.artifact)
    return True


def open_elsewhere(state: LabState, args: ArtifactArgs) -> str:
    """Open an artifact in the panel that reads it (a NIfTI in the fMRI viewer, …)."""
    view = _view(state, "open an artifact")
    path = view.artifact_path(args.artifact)
    if path is None:
        raise Refusal(f"no artifact {args.artifact!r} in the Artifacts list")
    if not path.exists():
        raise Refusal(f"{path}: the artifact's file is gone")
    state.host.open_in_panel(path)
    return f"Opening {path.name} in its panel…"


def show_tab(state: LabState, args: TabArgs) -> bool:
    _view(state, "show a tab").show_tab(args.tab)
    return True


def export_figure(state: LabState, args: ExportArgs) -> str | bool:
    """The plot shown (an artifact, else the first live curve) with its provenance; a PDF
    is said in the status line when the engine has written it."""
    view = _view(state, "export the plot")
    if args.metric is not None and args.metric not in view.live_plots:
        raise Refusal(f"no live curve of {args.metric!r} (curves: "
                      f"{', '.join(map(repr, view.live_plots)) or 'none yet'})")
    problem = view.write_plot(args.path, args.metric)
    if problem:
        raise Refusal(problem)
    return True if args.path.lower().endswith(".pdf") else f"Exported {args.path}"


# -- the registry ------------------------------------------------------------------------------

COMMANDS = [
    Command("lab.choose_paper", "Choose a paper in the lab", "Show a paper's first method "
            "(its reproduction when it has nothing else).", choose_paper, PaperArgs),
    Command("lab.choose_method", "Choose a method in the lab", "Show a method's form, "
            "inputs and reproduction, by its id.", choose_method, MethodArgs),
    Command("lab.set_params", "Set a method's parameters", "Change parameters of the "
            "chosen (or named) method, by the form's names.", set_params, ParamsArgs,
            undoable=True),
    Command("lab.set_seed", "Set the lab's seed", "The seed the next run starts from.",
            set_seed, SeedArgs, undoable=True),
    Command("lab.choose_profile", "Choose the reproduction profile", "smoke, cpu or gpu: "
            "the settings Reproduce claim runs with.", choose_profile, ProfileArgs,
            undoable=True),
    Command("lab.run", "Run a method", "Submit a method with its parameters, inputs and "
            "seed; its curves, artifacts and log show live.", run, RunArgs,
            menu="Lab/Run"),
    Command("lab.reproduce", "Reproduce a paper's claim", "Run <paper>.reproduce with the "
            "profile's settings: PASS, FAIL or INCONCLUSIVE.", reproduce, ReproduceArgs,
            menu="Lab/Reproduce claim"),
    Command("lab.cancel", "Cancel the lab's job", "Stop the running job (again: kill its "
            "worker).", cancel, CancelArgs),
    Command("lab.open_report", "Open a paper's report", "Write the paper's report (its "
            "latest reproduction) and open it in the browser.", open_report, ReportArgs),
    Command("lab.open", "Open a file in the lab", "Show a data file (arrays, tables, "
            "figures) in the Artifacts tab.", open_file, PathArgs, menu="Lab/Open…"),
    Command("lab.show_artifact", "Show an artifact", "Show a run's artifact or an opened "
            "file, by the name the Artifacts list shows.", show_artifact, ArtifactArgs),
    Command("lab.open_elsewhere", "Open an artifact in its panel", "Open a run's artifact "
            "(a NIfTI, a DEF, molecules) in the panel that reads it.", open_elsewhere,
            ArtifactArgs),
    Command("lab.show_tab", "Show a lab tab", "Live, Artifacts, Claim or Log.", show_tab,
            TabArgs),
    Command("lab.export_figure", "Export the lab's plot", "The plot shown as PNG or SVG "
            "(PDF rendered by the engine) with the run's provenance.", export_figure,
            ExportArgs),
]


def register(registry: CommandRegistry) -> CommandRegistry:
    """Add the lab commands (again, for a panel rebuilt in the same window)."""
    return registry.add_all(COMMANDS)
