"""The SAE browser's state without Qt: a ``sae_pc1.train`` run's SAEs, features and tokens.

A run folder holds, per SAE variant (seed 0 of raw or bypass, per layer), a feature table
(``artifacts/<sae>-features.json``), the codes of every token (``<sae>-code_indices.npy`` and
``<sae>-code_values.npy``, memory-mapped), the top contexts of each feature
(``artifacts/contexts/<sae>/<id>.json``, ``token_heat`` views) and the SAELens checkpoints of
all seeds (``checkpoints/<name>/``). Everything is read with numpy and safetensors-numpy: the
GUI never imports torch. A bare SAELens folder opens too (decoder neighbours only). A run on
the decoder LM (``source="decoder"``) also holds the LM (``checkpoints/decoder``), which
``sae_pc1.steer`` jobs use, and each feature's logit-lens output tokens in its context file.

Labels and notes of features are ``SetFeatureNote`` commands (``panels.api.EditCommand``); the
``sae.label_feature`` and ``sae.annotate_feature`` commands push them through ``host.push_edit``
so they are undoable and autosaved. The table's sort and the word searched are held here too,
so the panel's commands act on them without a window.
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.io import FormatError
from engine.io.sae import SAEFolder, read_sae
from panels.lab.model import Events

SORT_COLUMNS = ("feature", "density", "importance", "reproducibility", "hungarian")
TEXT_COLUMNS = ("label", "top tokens")
# the feature table's columns, as its header names them
COLUMNS = ("feature", "label", "density", "importance", "reproducibility", "hungarian",
           "top tokens")
NOTE_FIELDS = ("label", "note")
NEIGHBOURS = 10


@dataclass
class SetFeatureNote:
    """Set a feature's ``label`` or ``note`` (the old value kept for undo)."""

    sae: str
    feature: int
    field: str
    value: str
    previous: str = ""

    @property
    def label(self) -> str:
        verb = "Label" if self.field == "label" else "Annotate"
        return f"{verb} feature {self.feature} of {self.sae}"

    def apply(self, model: SAEBrowserModel) -> None:
        model.set_note(self.sae, self.feature, self.field, self.value)

    def revert(self, model: SAEBrowserModel) -> None:
        model.set_note(self.sae, self.feature, self.field, self.previous)

    def to_json(self) -> dict:
        return {"type": "set_feature_note", "sae": self.sae, "feature": self.feature,
                "field": self.field, "value": self.value, "previous": self.previous}


def decode(data: dict) -> SetFeatureNote:
    """A saved edit back as a command (``host.restore_edits``)."""
    if data.get("type") != "set_feature_note":
        raise ValueError(f"not an SAE browser edit: {data.get('type')!r}")
    return SetFeatureNote(str(data["sae"]), int(data["feature"]), str(data["field"]),
                          str(data["value"]), str(data.get("previous", "")))


@dataclass
class FeatureTable:
    """Columns of one SAE's features, as numpy arrays (NaN where not measured)."""

    ids: np.ndarray
    density: np.ndarray
    importance: np.ndarray
    reproducibility: np.ndarray
    hungarian: np.ndarray
    top_tokens: list[str]
    importance_kind: str = ""
    other_seeds: list[str] = field(default_factory=list)

    @classmethod
    def from_artifact(cls, data: dict) -> FeatureTable:
        columns = data["columns"]
        rows = data["rows"]

        def column(name: str) -> np.ndarray:
            at = columns.index(name)
            return np.array([np.nan if r[at] is None else r[at] for r in rows], dtype=float)

        return cls(column("feature").astype(int), column("density"), column("importance"),
                   column("reproducibility"), column("hungarian"),
                   [str(r[columns.index("top_tokens")]) for r in rows],
                   str(data.get("importance", "")), list(data.get("other_seeds", [])))

    @classmethod
    def bare(cls, width: int) -> FeatureTable:
        nan = np.full(width, np.nan)
        return cls(np.arange(width), nan, nan.copy(), nan.copy(), nan.copy(), [""] * width)

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class FeaturePage:
    """What the feature page shows for one feature."""

    feature: int
    density: float
    importance: float
    reproducibility: float
    hungarian: float
    top_tokens: str
    contexts: dict | None
    activations: np.ndarray              # its nonzero activations over the tokens
    neighbours: list[tuple[int, float]]  # (feature, decoder cosine) in the same SAE
    matches: list[tuple[str, int, float]]  # (other seed's SAE, feature, cosine)
    label: str = ""
    note: str = ""
    output_tokens: str = ""              # decoder LM: tokens the decoder direction promotes


class SAEBrowserModel:
    """Events: ``loaded`` (), ``selected`` (feature), ``note_changed`` (sae, feature),
    ``sorted`` (), ``searched`` ()."""

    def __init__(self) -> None:
        self.run_dir: Path | None = None
        self.sae_names: list[str] = []
        self.current_sae = ""
        self.table: FeatureTable | None = None
        self.sae: SAEFolder | None = None
        self.tokens: list[str] = []
        self.code_indices: np.ndarray | None = None
        self.code_values: np.ndarray | None = None
        self.current = -1
        self.notes: dict[str, dict[int, dict[str, str]]] = {}
        self._unit_decoder: np.ndarray | None = None
        self._other_decoders: dict[str, np.ndarray] = {}
        self.sort_column, self.descending = "feature", False   # the table's order
        self.query = ""                                       # the word searched
        self.hits: list[tuple[int, float, int]] = []          # its features (``search``)
        self.events = Events("loaded", "selected", "note_changed", "sorted", "searched")

    # -- loading -------------------------------------------------------------------------------
    @property
    def document(self) -> str:
        """The id of the edit history: one per run (or bare SAE folder)."""
        return f"sae:{self.run_dir}" if self.run_dir else "sae:"

    def open(self, path: str | os.PathLike) -> None:
        """A run folder, a checkpoint inside one (that SAE is chosen), or a bare SAE folder;
        a file opens the folder it is in, and when that fails the message names the file."""
        path = Path(path)
        if path.is_file():
            try:
                self.open(path.parent)
                return
            except (FormatError, ValueError, OSError) as exc:
                raise ValueError(f"{path}: not a file of a sae_pc1 run or an SAELens SAE "
                                 f"folder ({exc})") from None
        if (path / "artifacts").is_dir():
            self._open_run(path, None)
        elif path.parent.name == "checkpoints" and (path.parent.parent / "artifacts").is_dir():
            self._open_run(path.parent.parent, path.name)
        else:
            self._open_bare(path)

    def _open_run(self, run_dir: Path, choose: str | None) -> None:
        names = sorted(p.name.removesuffix("-features.json")
                       for p in (run_dir / "artifacts").glob("*-features.json"))
        if not names:
            raise ValueError(f"{run_dir}: no SAE feature tables (not a sae_pc1.train run?)")
        tokens_path = run_dir / "artifacts" / "tokens.json"
        self.run_dir, self.query, self.hits = run_dir, "", []
        self.tokens = json.loads(tokens_path.read_text()) if tokens_path.is_file() else []
        self.sae_names = names
        self.notes = {}
        self.select_sae(choose if choose in names else names[0])

    def _open_bare(self, folder: Path) -> None:
        self.sae = read_sae(folder)
        self.run_dir, self.sae_names, self.current_sae = folder, [folder.name], folder.name
        self.tokens, self.code_indices, self.code_values = [], None, None
        self.query, self.hits = "", []
        self.table = FeatureTable.bare(self.sae.weights["W_dec"].shape[0])
        self._decoders_changed({})
        self.current, self.notes = -1, {}
        self.events.emit("loaded")

    def select_sae(self, name: str) -> None:
        if self.run_dir is None or name not in self.sae_names:
            raise KeyError(f"no SAE {name!r} in this run")
        artifacts = self.run_dir / "artifacts"
        data = json.loads((artifacts / f"{name}-features.json").read_text())
        self.table = FeatureTable.from_artifact(data)
        self.current_sae = name
        self.code_indices = np.load(artifacts / f"{name}-code_indices.npy", mmap_mode="r")
        self.code_values = np.load(artifacts / f"{name}-code_values.npy", mmap_mode="r")
        self.sae = read_sae(self.run_dir / "checkpoints" / name)
        others = {}
        for other in self.table.other_seeds:
            folder = self.run_dir / "checkpoints" / other
            if folder.is_dir():
                others[other] = read_sae(folder).weights["W_dec"]
        self._decoders_changed(others)
        self.current = -1
        self.hits = self.search(self.query)  # the word asked again of this SAE's codes
        self.events.emit("loaded")

    def _decoders_changed(self, others: dict[str, np.ndarray]) -> None:
        self._unit_decoder = _unit_rows(self.sae.weights["W_dec"])
        self._other_decoders = {k: _unit_rows(v) for k, v in others.items()}

    # -- the table -----------------------------------------------------------------------------
    def default_sort(self) -> tuple[str, bool]:
        """Most important first when importance was measured, else by feature id."""
        if self.table is not None and np.isfinite(self.table.importance).any():
            return "importance", True
        return "feature", False

    def set_sort(self, column: str, descending: bool) -> None:
        """Order the table by a column (as its header names it)."""
        if column not in COLUMNS:
            raise ValueError(f"sort by one of {COLUMNS}, not {column!r}")
        self.sort_column, self.descending = column, bool(descending)
        self.events.emit("sorted")

    def ordered_features(self) -> np.ndarray:
        """Feature ids in the table's order (what the rows show, top to bottom)."""
        if self.table is None:
            return np.zeros(0, dtype=int)
        return self.table.ids[self.feature_order(self.sort_column, self.descending)]

    def sorted_features(self, column: str, descending: bool = True) -> np.ndarray:
        """Feature ids ordered by a measure; NaN last either way."""
        if column not in SORT_COLUMNS:
            raise ValueError(f"sort by one of {SORT_COLUMNS}, not {column!r}")
        return self.table.ids[self.feature_order(column, descending)]

    def feature_order(self, column: str, descending: bool = True) -> np.ndarray:
        """Positions in the table ordered by any column (one numpy argsort, so a 16k-feature
        table sorts at once): measures by number, label and top tokens by case-folded text;
        NaN and empty text last either way."""
        if column in SORT_COLUMNS:
            values = getattr(self.table, "ids" if column == "feature" else column).astype(float)
            missing = np.isnan(values)
        elif column in TEXT_COLUMNS:
            texts = ([self.label_of(int(f)) for f in self.table.ids] if column == "label"
                     else self.table.top_tokens)
            folded = np.array([text.casefold() for text in texts], dtype=str)
            values = np.unique(folded, return_inverse=True)[1].astype(float)
            missing = folded == ""
        else:
            raise ValueError(f"sort by one of {SORT_COLUMNS + TEXT_COLUMNS}, not {column!r}")
        keys = np.where(missing, np.inf, -values if descending else values)
        return np.argsort(keys, kind="stable")

    def density_histogram(self, bins: int = 40) -> dict:
        """A plot spec of log10 feature densities (features that never fire are counted)."""
        density = self.table.density
        live = density[density > 0]
        dead = int(np.sum(density == 0))
        counts, edges = np.histogram(np.log10(live), bins=bins) if live.size else ([], [0])
        centres = [(a + b) / 2 for a, b in zip(edges[:-1], edges[1:], strict=True)]
        return {"kind": "plot", "title": f"Feature density ({dead} never fire)",
                "xlabel": "log10 fraction of tokens active", "ylabel": "features",
                "series": [{"name": "features", "x": centres, "y": [float(c) for c in counts],
                            "style": "bar"}], "hlines": []}

    # -- one feature ---------------------------------------------------------------------------
    def select(self, feature: int) -> FeaturePage:
        if self.table is None or not 0 <= feature < len(self.table):
            raise IndexError(f"no feature {feature}")
        self.current = feature
        page = self.page(feature)
        self.events.emit("selected", feature=feature)
        return page

    def page(self, feature: int) -> FeaturePage:
        t = self.table
        cos = self._unit_decoder @ self._unit_decoder[feature]
        cos[feature] = -np.inf
        near = np.argpartition(-cos, min(NEIGHBOURS, len(cos) - 1))[:NEIGHBOURS]
        near = near[np.argsort(-cos[near])]
        matches = []
        for name, decoder in self._other_decoders.items():
            other = decoder @ self._unit_decoder[feature]
            best = int(np.argmax(other))
            matches.append((name, best, float(other[best])))
        note = self.notes.get(self.current_sae, {}).get(feature, {})
        contexts = self.contexts(feature)
        return FeaturePage(feature, float(t.density[feature]), float(t.importance[feature]),
                           float(t.reproducibility[feature]), float(t.hungarian[feature]),
                           t.top_tokens[feature], contexts,
                           self.activations(feature),
                           [(int(i), float(cos[i])) for i in near if np.isfinite(cos[i])],
                           matches, note.get("label", ""), note.get("note", ""),
                           _output_tokens(contexts))

    @property
    def decoder_checkpoint(self) -> Path | None:
        """The run's decoder LM (steerable), or None for encoder, file and bare SAEs."""
        folder = None if self.run_dir is None else self.run_dir / "checkpoints" / "decoder"
        return folder if folder is not None and (folder / "cfg.json").is_file() else None

    def steer_job(self, feature: int, alpha: float, prompt: str, new_tokens: int
                  ) -> tuple[dict, dict]:
        """(params, inputs) of a ``sae_pc1.steer`` job for a feature of the current SAE."""
        if self.decoder_checkpoint is None:
            raise ValueError("steering needs a run on the decoder LM (source 'decoder')")
        params = {"feature": int(feature), "alpha": float(alpha), "prompt": prompt,
                  "new_tokens": int(new_tokens)}
        inputs = {"decoder": str(self.decoder_checkpoint),
                  "sae": str(self.run_dir / "checkpoints" / self.current_sae)}
        return params, inputs

    def contexts(self, feature: int) -> dict | None:
        if self.run_dir is None:
            return None
        path = self.run_dir / "artifacts" / "contexts" / self.current_sae / f"{feature}.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def activations(self, feature: int) -> np.ndarray:
        if self.code_indices is None:
            return np.zeros(0, dtype=np.float32)
        hit = np.asarray(self.code_indices) == feature
        values = np.asarray(self.code_values)[hit]
        return values[values > 0]

    def activation_histogram(self, feature: int, bins: int = 30) -> dict:
        values = self.activations(feature)
        counts, edges = np.histogram(values, bins=bins) if values.size else ([], [0])
        centres = [(a + b) / 2 for a, b in zip(edges[:-1], edges[1:], strict=True)]
        return {"kind": "plot", "title": f"Feature {feature}: {values.size} activations",
                "xlabel": "activation", "ylabel": "tokens",
                "series": [{"name": "tokens", "x": centres, "y": [float(c) for c in counts],
                            "style": "bar"}], "hlines": []}

    # -- search: which features fire here ------------------------------------------------------
    def run_search(self, text: str) -> list[tuple[int, float, int]]:
        """Search for a word and keep it (the Search tab lists its features)."""
        self.query, self.hits = text, self.search(text)
        self.events.emit("searched")
        return self.hits

    def search(self, text: str, limit: int = 30) -> list[tuple[int, float, int]]:
        """Features active on tokens matching ``text`` (case-insensitive, whitespace-trimmed):
        (feature, summed activation, tokens) by summed activation."""
        needle = text.strip().lower()
        if not needle or self.code_indices is None:
            return []
        rows = [i for i, token in enumerate(self.tokens) if needle == token.strip().lower()]
        if not rows:
            rows = [i for i, token in enumerate(self.tokens) if needle in token.lower()]
        if not rows:
            return []
        width = len(self.table)
        indices = np.asarray(self.code_indices[rows]).ravel()
        values = np.asarray(self.code_values[rows]).ravel()
        total = np.bincount(indices, weights=values, minlength=width)
        count = np.bincount(indices[values > 0], minlength=width)
        order = np.argsort(-total)[:limit]
        return [(int(i), float(total[i]), int(count[i])) for i in order if total[i] > 0]

    # -- labels and notes ----------------------------------------------------------------------
    def note_command(self, feature: int, field_name: str, value: str) -> SetFeatureNote:
        if field_name not in NOTE_FIELDS:
            raise ValueError(f"only {NOTE_FIELDS} can be edited, not {field_name!r}")
        previous = self.note_of(feature, field_name)
        return SetFeatureNote(self.current_sae, feature, field_name, value, previous)

    def note_of(self, feature: int, field_name: str = "note") -> str:
        """A feature's label or note in the SAE shown ("" when it has none)."""
        return self.notes.get(self.current_sae, {}).get(feature, {}).get(field_name, "")

    def set_note(self, sae: str, feature: int, field_name: str, value: str) -> None:
        entry = self.notes.setdefault(sae, {}).setdefault(feature, {})
        if value:
            entry[field_name] = value
        else:
            entry.pop(field_name, None)
        self.events.emit("note_changed", sae=sae, feature=feature)

    def label_of(self, feature: int) -> str:
        return self.note_of(feature, "label")

    # -- provenance ----------------------------------------------------------------------------
    @property
    def sae_folder(self) -> Path | None:
        """The shown SAE's checkpoint folder (the bare folder itself when no run is open)."""
        if self.sae is None:
            return None
        return Path(self.sae.path)

    def training_runs(self) -> list[dict]:
        """The run that trained the shown SAE, as its ``cfg.json`` names it (id, method,
        params, seed), else as the run folder's ``params.json`` does; [] when neither."""
        cfg = self.sae.cfg if self.sae is not None else {}
        named = cfg.get("provenance") or {}
        if named.get("runs"):  # a run without params.json: the method its cfg.json names
            method = (cfg.get("studio") or {}).get("method")
            return [{**run, "method": run.get("method") or method} for run in named["runs"]]
        if self.run_dir is not None and (self.run_dir / "params.json").is_file():
            from engine import provenance

            return [provenance.run_entry(self.run_dir)]
        return []

    def provenance_sources(self) -> list[Path]:
        """The files an export of the shown SAE is made from: its checkpoint and, in a run,
        its feature table."""
        sources = [self.sae_folder] if self.sae_folder is not None else []
        if self.run_dir is not None:
            table = self.run_dir / "artifacts" / f"{self.current_sae}-features.json"
            if table.is_file():
                sources.append(table)
        return sources

    def labels_json(self) -> dict:
        """The labels and notes of the shown SAE's features, as the labels export writes."""
        notes = self.notes.get(self.current_sae, {})
        return {"sae": self.current_sae, "run": str(self.run_dir) if self.run_dir else None,
                "features": [{"feature": feature, **dict(sorted(fields.items()))}
                             for feature, fields in sorted(notes.items()) if fields]}

    # -- export --------------------------------------------------------------------------------
    def dashboard_html(self, feature: int) -> str:
        """A self-contained HTML page for one feature (Neuronpedia-style dashboard)."""
        page = self.page(feature)
        title = f"{self.current_sae} feature {feature}"
        stats = [("label", page.label or "—"), ("note", page.note or "—"),
                 ("density", _fmt(page.density)), ("importance", _fmt(page.importance)),
                 ("reproducibility (best cosine)", _fmt(page.reproducibility)),
                 ("Hungarian cosine", _fmt(page.hungarian)), ("top tokens", page.top_tokens),
                 ("output tokens (logit lens)", page.output_tokens or "—"),
                 ("importance measured as", self.table.importance_kind or "—")]
        parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>"
                 f"{html.escape(title)}</title><style>body{{font-family:sans-serif;"
                 f"max-width:60em;margin:2em auto}} td{{padding:2px 8px}} .ctx{{line-height:1.8}}"
                 f"</style></head><body><h1>{html.escape(title)}</h1><table>"]
        parts += [f"<tr><td><b>{html.escape(k)}</b></td><td>{html.escape(str(v))}</td></tr>"
                  for k, v in stats]
        parts.append("</table><h2>Top activating contexts</h2><p class='ctx'>")
        if page.contexts:
            values = [v for v in page.contexts["values"] if v is not None]
            scale = max(values, default=0.0) or 1.0
            for token, value in zip(page.contexts["tokens"], page.contexts["values"],
                                    strict=True):
                if value is None:
                    parts.append("<br>")
                    continue
                alpha = min(max(value / scale, 0.0), 1.0)
                parts.append(f"<span title='{value:.3f}' style='background:rgba(230,97,1,"
                             f"{alpha:.2f})'>{html.escape(token)}</span>")
        parts.append("</p><h2>Decoder neighbours</h2><ul>")
        parts += [f"<li>feature {i}: cosine {c:.3f}</li>" for i, c in page.neighbours]
        parts.append("</ul><h2>Cross-seed matches</h2><ul>")
        parts += [f"<li>{html.escape(n)}: feature {i}, cosine {c:.3f}</li>"
                  for n, i, c in page.matches]
        parts.append("</ul></body></html>")
        return "".join(parts)


def _output_tokens(contexts: dict | None) -> str:
    listed = (contexts or {}).get("output_tokens") or []
    return " ".join(repr(token) for token, _ in listed)


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)


def _fmt(value: float) -> str:
    return "—" if not np.isfinite(value) else f"{value:.4g}"
