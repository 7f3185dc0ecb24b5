"""The lab's state without Qt: which method is chosen, its parameters, and the job it runs.

The view (``panels/lab/view.py``) listens to ``LabModel.events`` and turns user actions into
calls here; engine events go through ``LabModel.on_event``, which keeps only what concerns the
lab's own jobs. Tests drive the model with plain dicts, no window needed.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.developer import listed

TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})
REPRODUCE_VERB = "reproduce"
PROFILES = ("smoke", "cpu", "gpu")  # engine.api.PROFILES, without importing pydantic here
RUN, REPRODUCE = "run", "reproduce"
# The lab's undoable choices (parameters, seed, profile) are steps of this document on the lab
# tab's history; it names no file (``studio.documents`` keys it as written, sessions skip it).
PARAMETERS_DOCUMENT = "lab parameters"
EARLY_EVENTS_PER_JOB = 5000   # events of a job that arrive before its job_accepted reply
EARLY_JOBS_KEPT = 16
CHOSEN = object()   # "the chosen method's", where ``None`` means none


class Events:
    """Named callbacks: ``connect("selected", f)`` returns a function that disconnects."""

    def __init__(self, *names: str) -> None:
        self._callbacks: dict[str, list[Callable[..., None]]] = {name: [] for name in names}

    def connect(self, name: str, callback: Callable[..., None]) -> Callable[[], None]:
        self._callbacks[name].append(callback)
        return lambda: self._callbacks[name].remove(callback)

    def emit(self, name: str, **payload: Any) -> None:
        for callback in list(self._callbacks[name]):
            callback(**payload)


@dataclass
class Job:
    """One job the lab submitted and follows."""

    id: str
    method: str
    purpose: str                   # RUN or REPRODUCE
    params: dict
    seed: int
    state: str = "queued"
    reason: str = ""
    elapsed_s: float | None = None
    step: int = 0
    total: int | None = None
    outputs: dict | None = None
    artifacts: list[dict] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES


def paper_of(method: dict) -> str:
    return method.get("paper") or method["id"].split(".")[0]


def is_reproduce(method_id: str) -> bool:
    return method_id.rsplit(".", 1)[-1] == REPRODUCE_VERB


class LabModel:
    """Events: ``methods`` (), ``selected`` (method), ``params`` (method, values),
    ``profile`` (profile), ``job`` (job), ``progress`` (job, step, total, metrics),
    ``artifact`` (job, artifact), ``result`` (job, outputs), ``log`` (job, lines),
    ``submit_error`` (message), ``seed`` (seed)."""

    def __init__(self) -> None:
        self.methods: dict[str, dict] = {}
        self.selected: str | None = None
        self.params: dict[str, dict] = {}     # remembered per method while the panel lives
        self.seed = 0
        self.profile = "cpu"  # of "Reproduce claim" (and of the reproduce method's form)
        self.jobs: dict[str, Job] = {}
        self.current: Job | None = None
        self.pending: tuple[str, str, dict, int] | None = None  # submitted, not yet accepted
        self._wanted_paper: str | None = None
        self._early: dict[str, deque] = {}
        self.seen_artifacts: list[tuple[str, dict]] = []  # (job id, artifact) of any job
        self.events = Events("methods", "selected", "params", "profile", "job", "progress",
                             "artifact", "result", "log", "submit_error", "seed")

    # -- methods and selection -----------------------------------------------------------

    def set_methods(self, methods: list[dict]) -> None:
        """The engine's methods, less the diagnostics outside developer mode."""
        self.methods = {m["id"]: m for m in methods if listed(m)}
        self.events.emit("methods")
        if self._wanted_paper and self.select_paper(self._wanted_paper):
            return
        if self.selected not in self.methods:
            self.selected = None
            first = next(iter(self.by_paper().values()), [])
            if first:
                self.select(first[0]["id"])

    def by_paper(self) -> dict[str, list[dict]]:
        """Methods grouped by paper, papers sorted with ``diagnostics`` last, each paper's
        own methods first and its ``reproduce`` last."""
        groups: dict[str, list[dict]] = defaultdict(list)
        for method in self.methods.values():
            groups[paper_of(method)].append(method)
        order = sorted(groups, key=lambda slug: (slug == "diagnostics", slug))
        return {slug: sorted(groups[slug], key=lambda m: (is_reproduce(m["id"]), m["id"]))
                for slug in order}

    def select(self, method_id: str) -> None:
        if method_id not in self.methods:
            raise KeyError(f"the engine lists no method {method_id!r}")
        self.selected = method_id
        self.events.emit("selected", method=self.methods[method_id])

    def select_paper(self, slug: str) -> bool:
        """Choose the paper's first method (its reproduce only when it has nothing else).
        Before the engine has listed methods, the choice waits for ``set_methods``."""
        methods = self.by_paper().get(slug, [])
        if not methods:
            self._wanted_paper = slug
            return False
        self._wanted_paper = None
        self.select(methods[0]["id"])
        return True

    @property
    def method(self) -> dict | None:
        return self.methods.get(self.selected) if self.selected else None

    def reproduce_method(self) -> str | None:
        """``<paper>.reproduce`` of the selected method's paper, when the engine lists it
        (the selected method itself when it is a reproduction)."""
        if self.method is None:
            return None
        if is_reproduce(self.method["id"]):
            return self.method["id"]
        candidate = f"{paper_of(self.method)}.{REPRODUCE_VERB}"
        return candidate if candidate in self.methods else None

    def set_params(self, values: dict) -> None:
        if self.selected is None:
            return
        self.params[self.selected] = dict(values)
        self.events.emit("params", method=self.selected, values=dict(values))

    def params_for(self, method_id: str) -> dict:
        return dict(self.params.get(method_id, {}))

    def put_params(self, method_id: str, values: dict | None) -> None:
        """Remember ``values`` for a method (``None``: forget them, its form starts from the
        defaults again); what the edits below apply and revert."""
        if values is None:
            self.params.pop(method_id, None)
        else:
            self.params[method_id] = dict(values)
        self.events.emit("params", method=method_id, values=self.params_for(method_id))

    def set_seed(self, seed: int) -> None:
        self.seed = int(seed)
        self.events.emit("seed", seed=self.seed)

    def exploratory(self, method_id: str, values: dict) -> tuple[str, dict]:
        """For a reproduce method: its form's profile and the values that differ from that
        profile's settings (the engine then marks the claim exploratory); ``("", {})`` for
        any other method."""
        profiles = (self.methods.get(method_id) or {}).get("profiles") or {}
        if not profiles:
            return "", {}
        profile = values.get("profile") or ("smoke" if values.get("smoke") is True else "cpu")
        settings = profiles.get(profile, {})
        return profile, {k: value for k, value in values.items()
                         if k in settings and settings[k] != value}

    def profile_settings(self, profile: str | None = None, reproduce: str | None = None
                         ) -> dict:
        """The settings ``profile`` (default: the chosen one) runs the paper's reproduction
        (default: the chosen method's paper's) with, as the engine lists them; ``{}`` when the
        paper has no reproduce method."""
        method = self.methods.get(reproduce or self.reproduce_method() or "") or {}
        return dict((method.get("profiles") or {}).get(profile or self.profile) or {})

    def set_profile(self, profile: str, reproduce: str | None | object = CHOSEN) -> None:
        """Choose the reproduction's profile. Choosing a profile chooses its settings: the
        reproduce method's (default: the chosen method's paper's; ``None``: none) remembered
        form starts again from them (no longer exploratory)."""
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r} ({', '.join(PROFILES)})")
        self.profile = profile
        if reproduce is CHOSEN:
            reproduce = self.reproduce_method()
        if reproduce is not None and reproduce in self.params:
            self.params[reproduce] = {"profile": profile,
                                      **self.profile_settings(profile, reproduce)}
        self.events.emit("profile", profile=profile)

    def reproduce_overrides(self) -> dict:
        """The settings of the reproduce method's form that differ from the chosen profile's:
        what "Reproduce claim" sends besides the profile, and what makes it exploratory."""
        reproduce = self.reproduce_method()
        if reproduce is None:
            return {}
        values = {**self.params_for(reproduce), "profile": self.profile}
        return self.exploratory(reproduce, values)[1]

    # -- jobs ----------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self.pending is not None or (self.current is not None
                                            and not self.current.finished)

    def submission(self, purpose: str = RUN) -> tuple[str, dict, int]:
        """``(method, params, seed)`` for Run or Reproduce; marks a submission pending."""
        if purpose == REPRODUCE:
            method = self.reproduce_method()
            if method is None:
                raise KeyError("this paper has no reproduce method")
            params = {"profile": self.profile, **self.reproduce_overrides()}
        else:
            if self.selected is None:
                raise KeyError("no method chosen")
            method, params = self.selected, self.params_for(self.selected)
        return self.prepare(purpose, method, params, self.seed)

    def prepare(self, purpose: str, method: str, params: dict, seed: int
                ) -> tuple[str, dict, int]:
        """Mark a submission of ``method`` pending (its job is followed once accepted)."""
        self.pending = (purpose, method, dict(params), int(seed))
        return method, dict(params), int(seed)

    def accepted(self, job_id: str) -> Job:
        """The engine took the pending submission: follow ``job_id`` (replaying early events)."""
        if self.pending is None:
            raise RuntimeError("no submission is waiting for the engine")
        purpose, method, params, seed = self.pending
        self.pending = None
        job = Job(job_id, method, purpose, params, seed)
        self.jobs[job_id] = job
        self.current = job
        self.events.emit("job", job=job)
        for envelope in self._early.pop(job_id, ()):
            self.on_event(envelope)
        return job

    def rejected(self, message: str) -> None:
        self.pending = None
        self.events.emit("submit_error", message=message)

    def on_event(self, envelope: dict) -> None:
        """A protocol envelope from the host; events of other jobs only feed the artifact
        list (the inputs of later runs)."""
        job_id = envelope.get("job")
        kind = envelope.get("type")
        content = envelope.get("content") or {}
        if kind == "job_artifact" and job_id:
            self.seen_artifacts.append((job_id, content))
        job = self.jobs.get(job_id) if job_id else None
        if job is None:
            if job_id and self.pending is not None:
                self._keep_early(job_id, envelope)
            return
        if kind == "job_state":
            job.state = content.get("state", job.state)
            job.reason = content.get("reason", "") or ""
            job.elapsed_s = content.get("elapsed_s", job.elapsed_s)
            self.events.emit("job", job=job)
        elif kind == "job_progress":
            job.step = int(content.get("step") or 0)
            job.total = content.get("total")
            self.events.emit("progress", job=job, step=job.step, total=job.total,
                             metrics=content.get("metrics") or {})
        elif kind == "job_artifact":
            job.artifacts.append(content)
            self.events.emit("artifact", job=job, artifact=content)
        elif kind == "job_result":
            job.outputs = content.get("outputs") or {}
            self.events.emit("result", job=job, outputs=job.outputs)
        elif kind == "job_log":
            self.events.emit("log", job=job, lines=list(content.get("lines") or []))

    def _keep_early(self, job_id: str, envelope: dict) -> None:
        if job_id not in self._early and len(self._early) >= EARLY_JOBS_KEPT:
            self._early.pop(next(iter(self._early)))
        self._early.setdefault(job_id, deque(maxlen=EARLY_EVENTS_PER_JOB)).append(envelope)

    # -- autosave form -------------------------------------------------------------------

    def to_json(self) -> dict:
        return {"selected": self.selected, "params": self.params, "seed": self.seed,
                "profile": self.profile}

    def restore(self, data: dict) -> None:
        """Parameters and choices saved by ``to_json`` (methods the engine lacks are kept
        but not selected)."""
        self.params.update({k: dict(v) for k, v in (data.get("params") or {}).items()})
        self.seed = int(data.get("seed", self.seed))
        saved = data.get("profile")
        if saved is None and "smoke" in data:  # saved before profiles: the smoke box
            saved = "smoke" if data["smoke"] else "cpu"
        self.profile = saved if saved in PROFILES else self.profile
        if data.get("selected") in self.methods:
            self.select(data["selected"])


# -- the lab's undoable edits (``panels.api.EditCommand``) --------------------------------------


@dataclass
class SetParams:
    """A method's remembered parameters changed (the form, or ``lab.set_params``)."""

    method: str
    values: dict
    previous: dict | None            # None: none were remembered (the form showed defaults)
    changed: list[str] = field(default_factory=list)   # the names the user changed

    @property
    def label(self) -> str:
        names = sorted(self.changed)
        shown = ", ".join(names[:3]) + ("…" if len(names) > 3 else "")
        return f"Set {shown or 'parameters'} of {self.method}"

    def apply(self, model: LabModel) -> None:
        model.put_params(self.method, self.values)

    def revert(self, model: LabModel) -> None:
        model.put_params(self.method, self.previous)

    def to_json(self) -> dict:
        return {"kind": "set_params", "method": self.method, "values": self.values,
                "previous": self.previous, "changed": self.changed}


@dataclass
class SetSeed:
    seed: int
    previous: int

    @property
    def label(self) -> str:
        return f"Set the seed to {self.seed}"

    def apply(self, model: LabModel) -> None:
        model.set_seed(self.seed)

    def revert(self, model: LabModel) -> None:
        model.set_seed(self.previous)

    def to_json(self) -> dict:
        return {"kind": "set_seed", "seed": self.seed, "previous": self.previous}


@dataclass
class SetProfile:
    """The reproduction's profile chosen; the reproduce method's remembered form starts again
    from the profile's settings, so undo gives the form back as well."""

    profile: str
    previous: str
    reproduce: str | None            # the reproduce method whose form the choice refills
    previous_params: dict | None     # its remembered parameters before

    @property
    def label(self) -> str:
        return f"Choose the {self.profile} profile"

    def apply(self, model: LabModel) -> None:
        model.set_profile(self.profile, self.reproduce)  # the form it refilled, wherever

    def revert(self, model: LabModel) -> None:
        model.profile = self.previous
        if self.reproduce is not None:
            if self.previous_params is None:
                model.params.pop(self.reproduce, None)
            else:
                model.params[self.reproduce] = dict(self.previous_params)
        model.events.emit("profile", profile=self.previous)

    def to_json(self) -> dict:
        return {"kind": "set_profile", "profile": self.profile, "previous": self.previous,
                "reproduce": self.reproduce, "previous_params": self.previous_params}


EDITS = {"set_params": SetParams, "set_seed": SetSeed, "set_profile": SetProfile}


def decode(data: dict) -> SetParams | SetSeed | SetProfile:
    """An edit from its ``to_json`` form (autosave, sessions); ``ValueError`` if unknown."""
    fields = dict(data)
    kind = fields.pop("kind", None)
    if kind not in EDITS:
        raise ValueError(f"not a lab edit: {kind!r}")
    try:
        return EDITS[kind](**fields)
    except TypeError as exc:
        raise ValueError(f"a {kind} edit with other fields: {exc}") from None
