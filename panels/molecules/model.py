"""The molecule panel's state without Qt: a set of molecules, their view order, properties
computed on demand, SMARTS hits, the reference set, and the undoable SMILES edits.

Edits are plain command objects (``panels.api.EditCommand``) pushed through
``host.push_edit`` (one undo history for the window, autosaved); ``decode`` turns their JSON
form back into commands. RDKit is used directly (no torch): the GUI imports this module.
"""

from __future__ import annotations

import csv
import io
import os
import re
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.io import FormatError, extension_of
from engine.io.limits import open_decompressed
from engine.io.molecules import (
    DESCRIPTOR_NAMES,
    TABLE_EXTENSIONS,
    Molecule,
    Sequence,
    Structure,
    canonical_smiles,
    descriptor,
    descriptors,
    jain_properties,
    murcko_scaffold,
    parse_smiles,
    read_jain_antibodies,
    read_molecules,
    smiles_column,
    standardise,
)
from panels.lab.model import Events
from panels.molecules.exports import (
    Conformers,
    ExportRefused,
    Written,
    write_fasta,
    write_pdb,
    write_sdf,
)
from panels.molecules.numbering import CDRS, NUMBERING_LIMIT, Numbering

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
ANTIBIOTICS = SHARED_DATA / "molecules" / "GNEprop_known_abx.tsv"
ANTIBODIES = SHARED_DATA / "antibodies"
FINGERPRINT_BITS = 2048
DIVERSITY_SAMPLE = 2000  # pairwise distances over an even sample of a bigger set
HISTOGRAM_BINS = 24
HISTOGRAM_SAMPLE = 2000
FLAGS = ("", "accepted", "rejected", "flagged")
# Exports write each entry's mark to this SD tag / CSV column ("unmarked" for none); opening such
# a file again restores the marks instead of showing the column.
FLAG_COLUMN = "flag"
UNMARKED = "unmarked"
FOREIGN_FLAG_COLUMN = "flag (file)"  # a file's own ``flag`` column that holds other values
NUMBERING_COLUMNS = ("chain type", *CDRS, "CDR3 length")  # table columns once numbered
PROBLEM_COLUMN = "problem"  # why a sample is not a molecule (a set opened for inspection)
INSPECT_LIMIT_BYTES = 64 << 20  # a run's samples read for inspection: a CSV, not a database


@dataclass
class Entry:
    """One row of the set: a molecule (``smiles``), or a sequence/structure shown by name."""

    smiles: str
    name: str = ""
    location: str = ""
    props: dict = field(default_factory=dict)  # the file's own columns
    kind: str = "molecule"  # molecule, protein, nucleotide, structure
    detail: str = ""  # a sequence, or a structure's chains
    flag: str = ""
    record: Any = None  # the Sequence or Structure a non-molecule entry shows
    _valid: bool | None = None
    _scaffold: str | None = None
    _values: dict[str, float] = field(default_factory=dict)  # descriptors computed so far

    @property
    def valid(self) -> bool:
        if self._valid is None:
            self._valid = self.kind == "molecule" and parse_smiles(self.smiles) is not None
        return self._valid

    def descriptor(self, name: str) -> float | None:
        """One descriptor, computed on first use and kept (the grid asks only for the one it
        shows, for the cells on screen); ``None`` for an invalid molecule."""
        if not self.valid:
            return None
        if name not in self._values:
            self._values[name] = descriptor(parse_smiles(self.smiles), name)
        return self._values[name]

    def known_descriptor(self, name: str) -> tuple[bool, float | None]:
        """(known, value) without computing anything: the grid paints what is known and asks
        a worker for the rest. An invalid molecule's value is known: ``None``."""
        if self._valid is False:
            return True, None
        if self._valid and name in self._values:
            return True, self._values[name]
        return False, None

    def remember(self, name: str, value: float | None) -> None:
        """A descriptor computed elsewhere (``None``: the SMILES does not parse)."""
        self._valid = value is not None
        if value is not None:
            self._values[name] = value

    def descriptors(self) -> dict[str, float]:
        """The whole kCGM descriptor set (empty for an invalid molecule)."""
        if self.valid and len(self._values) < len(DESCRIPTOR_NAMES):
            self._values = descriptors(parse_smiles(self.smiles))
        return dict(self._values) if self.valid else {}

    @property
    def scaffold(self) -> str | None:
        """Murcko scaffold SMILES (``""`` acyclic), computed once; ``None`` when invalid."""
        if not self.valid:
            return None
        if self._scaffold is None:
            self._scaffold = murcko_scaffold(self.smiles)
        return self._scaffold

    def replace_smiles(self, smiles: str) -> None:
        self.smiles, self._valid, self._values, self._scaffold = smiles, None, {}, None


@dataclass
class EditSmiles:
    """Replace one entry's SMILES (old value kept for undo)."""

    index: int
    smiles: str
    previous: str
    reason: str = "Edit"
    name: str = ""  # the molecule's name, for the undo history's label

    @property
    def label(self) -> str:
        return f"{self.reason} {self.name or f'molecule {self.index + 1}'}"

    def apply(self, model: MoleculeSetModel) -> None:
        model.set_smiles(self.index, self.smiles)

    def revert(self, model: MoleculeSetModel) -> None:
        model.set_smiles(self.index, self.previous)

    def to_json(self) -> dict:
        return {"type": "edit_smiles", "index": self.index, "smiles": self.smiles,
                "previous": self.previous, "reason": self.reason,
                **({"name": self.name} if self.name else {})}


@dataclass
class SetFlag:
    """Accept, reject or flag an entry."""

    index: int
    flag: str
    previous: str
    name: str = ""  # the molecule's name, for the undo history's label

    @property
    def label(self) -> str:
        return f"Mark {self.name or f'molecule {self.index + 1}'} {self.flag or 'unmarked'}"

    def apply(self, model: MoleculeSetModel) -> None:
        model.set_flag(self.index, self.flag)

    def revert(self, model: MoleculeSetModel) -> None:
        model.set_flag(self.index, self.previous)

    def to_json(self) -> dict:
        return {"type": "set_flag", "index": self.index, "flag": self.flag,
                "previous": self.previous, **({"name": self.name} if self.name else {})}


def decode(data: dict) -> EditSmiles | SetFlag:
    """A saved edit back as a command (``host.restore_edits``)."""
    if data.get("type") == "edit_smiles":
        return EditSmiles(int(data["index"]), str(data["smiles"]), str(data["previous"]),
                          str(data.get("reason", "Edit")), str(data.get("name", "")))
    if data.get("type") == "set_flag":
        return SetFlag(int(data["index"]), str(data["flag"]), str(data["previous"]),
                       str(data.get("name", "")))
    raise ValueError(f"not a molecule edit: {data.get('type')!r}")


@dataclass
class Hit:
    index: int
    atoms: tuple[int, ...]  # atoms of the first match, for highlighting


class MoleculeSetModel:
    """Events: ``loaded`` (), ``changed`` (index), ``order`` (), ``search`` (hits)."""

    def __init__(self) -> None:
        self.path = ""
        self.entries: list[Entry] = []
        self.order: list[int] = []  # entry indices in display order
        self.problems: list[tuple[str, str]] = []
        self.hits: dict[int, Hit] = {}
        self.query = ""  # the SMARTS the hits matched ("" = no search)
        self.reference_path: Path = ANTIBIOTICS  # the file the reference set was read from
        self.sort_key: tuple[str, bool] | None = None
        self.scaffold_filter: str | None = None  # show only this scaffold's molecules
        self._fingerprints: dict[str, np.ndarray] = {}  # Morgan bits per SMILES, kept
        self.reference: list[tuple[str, str]] = []  # (name, cleaned SMILES)
        self._reference_fps: np.ndarray | None = None
        self._reference_values: dict[str, np.ndarray] = {}
        self.numbering: dict[int, Numbering] = {}  # entry index -> its antibody numbering
        self.conformers: Conformers = {}  # 3-D conformers the 3-D tab computed, by SMILES
        # Called between molecules by the long loops (scaffolds, fingerprints) that run on a
        # worker: the panel makes it wait while the grid scrolls, so paints get the GIL.
        self.pause: Callable[[], Any] = lambda: None
        self.inspecting = False  # opened by ``load_invalid``: the problem column is shown
        self.events = Events("loaded", "changed", "order", "search")

    # -- loading -------------------------------------------------------------------------

    @property
    def document(self) -> str:
        return f"molecules:{self.path}"

    def load(self, path: str | os.PathLike, limit: int | None = None) -> None:
        """Raises ``FormatError`` naming the file; bad records end up in ``problems``."""
        found = read_molecules(path, limit=limit)
        self.path = str(path)
        self.entries = [_entry(record) for record in found.records]
        _restore_marks(self.entries)
        self.problems = found.problems
        self._reset()

    def load_records(self, records: list, name: str | os.PathLike) -> None:
        """Records read elsewhere (an MD run's structure; none for a trajectory of noise)."""
        self.path = str(name)
        self.entries = [_entry(record) for record in records]
        self.problems = []
        self._reset()

    def load_smiles(self, smiles: list[str], name: str = "generated") -> None:
        """A set given directly (a run's samples); invalid ones are kept (and shown)."""
        self.path = name
        self.entries = [Entry(s) for s in smiles]
        self.problems = []
        self._reset()

    def load_antibodies(self, directory: str | os.PathLike = ANTIBODIES) -> None:
        """The Jain et al. 2017 clinical antibodies: one entry per VH and VL chain, with the
        antibody's measured properties as columns (a reference table beside generated
        sequences)."""
        found = read_jain_antibodies(directory)
        measured = jain_properties(directory)
        self.path = str(directory)
        self.entries = [Entry("", r.name, r.location, dict(measured.get(r.location, {})),
                              kind="protein", detail=r.sequence, record=r)
                        for r in found.records]
        self.problems = found.problems
        self._reset()

    def load_invalid(self, path: str | os.PathLike) -> int:
        """Every sample of a file that holds no valid molecule (a run that generated none),
        each an entry marked invalid with why (the ``problem`` column): for inspection, and
        an edit can mend one. Returns how many; ``FormatError`` when it lists no SMILES.
        The panel reads them with ``read_samples`` on a worker and shows them here with
        ``show_samples``."""
        return self.show_samples(path, read_samples(path))

    def show_samples(self, path: str | os.PathLike, samples: list[Entry]) -> int:
        """Samples read by ``read_samples`` as the set, for inspection; how many."""
        self.path = str(path)
        self.entries = samples
        self.problems = []
        self._reset(inspecting=True)
        return len(self.entries)

    def _reset(self, inspecting: bool = False) -> None:
        self.inspecting = inspecting
        self.hits, self.sort_key, self.scaffold_filter, self.query = {}, None, None, ""
        self.numbering, self.conformers = {}, {}
        self.order = list(range(len(self.entries)))
        self.events.emit("loaded")

    def load_reference(self, path: str | os.PathLike | None = None) -> int:
        """The reference set (default: the GNEprop antibiotics), cleaned like kCGM's."""
        molecules = [r for r in read_molecules(path or ANTIBIOTICS).records
                     if isinstance(r, Molecule)]
        cleaned: dict[str, str] = {}
        for molecule in molecules:
            smiles = standardise(molecule.smiles)
            if smiles and smiles not in cleaned:
                cleaned[smiles] = molecule.name or smiles
        self.reference = [(name, smiles) for smiles, name in cleaned.items()]
        self.reference_path = Path(path or ANTIBIOTICS)
        self._reference_fps = None
        self._reference_values = {}
        return len(self.reference)

    def entry_at(self, row: int) -> Entry:
        """The entry shown at display position ``row``."""
        return self.entries[self.order[row]]

    # -- properties and order ------------------------------------------------------------

    @staticmethod
    def property_names() -> list[str]:
        return list(DESCRIPTOR_NAMES)

    def has_molecules(self) -> bool:
        return any(entry.kind == "molecule" for entry in self.entries[:1000])

    def file_columns(self) -> list[str]:
        """The file's own columns (first appearance order, from the first 200 entries), less
        those ``value`` computes itself (an exported file carries the descriptors back)."""
        computed = {*DESCRIPTOR_NAMES, *NUMBERING_COLUMNS, PROBLEM_COLUMN}
        return list(dict.fromkeys(k for entry in self.entries[:200] for k in entry.props
                                  if k not in computed))

    def value(self, index: int, name: str) -> float | str | None:
        entry = self.entries[index]
        if name in DESCRIPTOR_NAMES:
            return entry.descriptor(name)
        if name in NUMBERING_COLUMNS:
            return self.numbering_value(index, name)
        if name == PROBLEM_COLUMN and self.inspecting:
            return smiles_problem(entry.smiles) if entry.kind == "molecule" else ""
        return entry.props.get(name, getattr(entry, name, None))

    def sort(self, name: str, descending: bool = False) -> None:
        """Order by a descriptor or a file column; entries without a value go last."""
        values = {i: self.value(i, name) for i in self._shown()}
        present = [i for i, v in values.items() if v is not None and v != ""]
        missing = [i for i, v in values.items() if v is None or v == ""]

        def key(index: int) -> tuple:
            value = values[index]
            numeric = isinstance(value, (int, float))
            return (0, float(value), "") if numeric else (1, 0.0, str(value))

        self.order = sorted(present, key=key, reverse=descending) + missing
        self.sort_key = (name, descending)
        self.events.emit("order")

    def unsort(self) -> None:
        """Back to file order (keeping the scaffold filter)."""
        self.order, self.sort_key = self._shown(), None
        self.events.emit("order")

    def _shown(self) -> list[int]:
        """Entry indices that pass the scaffold filter, in file order."""
        if self.scaffold_filter is None:
            return list(range(len(self.entries)))
        return [i for i, entry in enumerate(self.entries)
                if entry.scaffold == self.scaffold_filter]

    # -- antibody numbering --------------------------------------------------------------

    def numbering_targets(self) -> list[tuple[int, str, str]]:
        """(entry index, name, sequence) of the protein chains to number (antibodies among
        them are found by ANARCI; at most ``NUMBERING_LIMIT``)."""
        return [(i, e.name or f"#{i + 1}", e.detail) for i, e in enumerate(self.entries)
                if e.kind == "protein" and isinstance(e.record, Sequence)][:NUMBERING_LIMIT]

    def add_numbering(self, indices: list[int], results: list[Numbering | None]) -> int:
        """Keep the numbering of these entries (``None``: not an antibody chain); how many
        chains are numbered so far."""
        self.numbering.update({i: n for i, n in zip(indices, results, strict=True)
                               if n is not None})
        return len(self.numbering)

    def numbering_value(self, index: int, name: str) -> str | int | None:
        numbering = self.numbering.get(index)
        if numbering is None:
            return None
        if name == "chain type":
            return numbering.chain
        if name == "CDR3 length":
            return len(numbering.cdr(self.entries[index].detail, "CDR3"))
        return numbering.cdr(self.entries[index].detail, name)

    # -- scaffolds and diversity ---------------------------------------------------------

    def scaffold_groups(self) -> list[tuple[str, int]]:
        """(scaffold SMILES, molecules) largest group first; ``""`` gathers the acyclic ones.
        Computes every scaffold once (call it off the GUI thread for big sets)."""
        counts: Counter = Counter()
        for entry in self.entries:
            self.pause()
            if entry.valid:
                counts[entry.scaffold] += 1
        return sorted(counts.items(), key=lambda item: (-item[1], item[0]))

    def filter_scaffold(self, scaffold: str | None) -> None:
        """Show only the molecules with this Murcko scaffold (``None``: all), in the current
        sort."""
        self.scaffold_filter = scaffold
        if self.sort_key is None:
            self.unsort()
        else:
            self.sort(*self.sort_key)

    def fingerprints(self, indices: list[int]) -> np.ndarray:
        """Morgan (r2, 2048 bits) rows of the given entries, from a per-SMILES cache (an
        invalid molecule is all zeros)."""
        missing = sorted({self.entries[i].smiles for i in indices} - self._fingerprints.keys())
        for smiles, row in zip(missing, _fingerprints(missing, self.pause), strict=True):
            self._fingerprints[smiles] = row.astype(np.float32)
        out = np.zeros((len(indices), FINGERPRINT_BITS), dtype=np.float32)
        for row, i in enumerate(indices):
            out[row] = self._fingerprints[self.entries[i].smiles]
        return out

    def diversity(self, indices: list[int] | None = None) -> float | None:
        """Mean pairwise Tanimoto distance (1 - similarity, Morgan r2) over the valid
        molecules among ``indices`` (all by default; an even sample of ``DIVERSITY_SAMPLE``
        for bigger sets); ``None`` with fewer than two. 0 for identical molecules."""
        chosen = range(len(self.entries)) if indices is None else indices
        valid = [i for i in chosen if self.pause() or self.entries[i].valid]
        if len(valid) < 2:
            return None
        valid = valid[::max(1, len(valid) // DIVERSITY_SAMPLE)]
        bits = self.fingerprints(valid)
        shared = bits @ bits.T
        counts = bits.sum(1)
        union = counts[:, None] + counts[None, :] - shared
        similarity = np.divide(shared, union, out=np.ones_like(shared), where=union > 0)
        upper = np.triu_indices(len(valid), k=1)
        return float(1.0 - similarity[upper].mean())

    # -- search, similarity --------------------------------------------------------------

    def search(self, smarts: str) -> dict[int, Hit]:
        """Entries with the SMARTS substructure; ``ValueError`` for a bad pattern. An empty
        pattern clears the search."""
        from rdkit import Chem

        self.hits, self.query = {}, smarts.strip()
        if smarts.strip():
            pattern = Chem.MolFromSmarts(smarts.strip())
            if pattern is None:
                raise ValueError(f"not a valid SMARTS pattern: {smarts!r}")
            for index, entry in enumerate(self.entries):
                mol = parse_smiles(entry.smiles) if entry.kind == "molecule" else None
                if mol is not None:
                    match = mol.GetSubstructMatch(pattern)
                    if match:
                        self.hits[index] = Hit(index, tuple(match))
        self.events.emit("search", hits=self.hits)
        return self.hits

    def nearest_reference(self, index: int) -> tuple[str, str, float] | None:
        """(name, SMILES, Tanimoto) of the most similar reference molecule (Morgan r2, 2048
        bits; the query cleaned as the reference is), or ``None`` for an invalid molecule or an
        empty reference."""
        if not self.reference or not self.entries[index].valid:
            return None
        if self._reference_fps is None:
            self._reference_fps = _fingerprints([s for _, s in self.reference])
        cleaned = standardise(self.entries[index].smiles) or ""
        if cleaned not in self._fingerprints:
            self._fingerprints[cleaned] = _fingerprints([cleaned])[0].astype(np.float32)
        query = self._fingerprints[cleaned].astype(np.float64)
        shared = self._reference_fps @ query
        union = self._reference_fps.sum(1) + query.sum() - shared
        similarity = np.divide(shared, union, out=np.zeros_like(shared), where=union > 0)
        best = int(similarity.argmax())
        name, smiles = self.reference[best]
        return name, smiles, float(similarity[best])

    # -- edits ---------------------------------------------------------------------------

    def edit(self, index: int, smiles: str) -> EditSmiles:
        """The command that sets an entry's SMILES; ``ValueError`` when it does not parse."""
        canonical = canonical_smiles(smiles.strip())
        if canonical is None:
            raise ValueError(f"not a valid SMILES: {smiles!r}")
        return EditSmiles(index, canonical, self.entries[index].smiles,
                          name=self.entries[index].name)

    def standardisation(self, index: int) -> EditSmiles | None:
        """Largest fragment, no stereo, neutral: the cleaning kCGM's reference gets; ``None``
        when the molecule is already clean (or invalid)."""
        current = self.entries[index].smiles
        cleaned = standardise(current) if self.entries[index].valid else None
        if cleaned is None or cleaned == current:
            return None
        return EditSmiles(index, cleaned, current, "Standardise", self.entries[index].name)

    def flagging(self, index: int, flag: str) -> SetFlag:
        if flag not in FLAGS:
            raise ValueError(f"flag must be one of {FLAGS}")
        return SetFlag(index, flag, self.entries[index].flag, self.entries[index].name)

    def set_smiles(self, index: int, smiles: str) -> None:
        self.entries[index].replace_smiles(smiles)
        self.events.emit("changed", index=index)

    def set_flag(self, index: int, flag: str) -> None:
        self.entries[index].flag = flag
        self.events.emit("changed", index=index)

    # -- histograms and export -----------------------------------------------------------

    def histogram_spec(self, name: str) -> dict:
        """Density of ``name`` over the valid molecules (an even sample of at most
        ``HISTOGRAM_SAMPLE`` for big sets) vs the reference set (a plot spec)."""
        from engine.plots import plot, series

        step = max(1, len(self.entries) // HISTOGRAM_SAMPLE)
        sampled = [self.value(i, name) for i in range(0, len(self.entries), step)]
        generated = np.array([v for v in sampled if isinstance(v, (int, float))], dtype=float)
        if name not in self._reference_values:
            self._reference_values[name] = np.array(
                [descriptor(parse_smiles(s), name) for _, s in self.reference], dtype=float)
        reference = self._reference_values[name]
        pooled = np.concatenate([generated, reference])
        if not len(pooled):
            return plot(f"{name}: nothing to show", [], xlabel=name, ylabel="density")
        edges = np.histogram_bin_edges(pooled, bins=HISTOGRAM_BINS)
        centres = (edges[:-1] + edges[1:]) / 2
        curves = []
        for label, values in ((Path(self.path).name or "set", generated),
                              ("reference", reference)):
            if len(values):
                density = np.histogram(values, edges, density=True)[0]
                curves.append(series(label, centres, density, "step"))
        sample = f" (every {step}th molecule)" if step > 1 else ""
        return plot(f"{name}: set{sample} vs reference", curves, xlabel=name, ylabel="density")

    def export(self, path: str | os.PathLike, indices: list[int] | None = None) -> Written:
        """The given entries (default: all, in display order) in the format the suffix names:
        ``.smi``, ``.csv``, ``.sdf``, ``.fasta``/``.fa`` or ``.pdb``. ``ExportRefused`` when
        the format holds none of them (or the suffix is none of these)."""
        chosen = [self.entries[i] for i in (self.order if indices is None else indices)]
        suffix = Path(path).suffix.lower()
        if suffix == ".csv":
            return self.export_csv(path, indices)
        if suffix == ".sdf":
            return write_sdf(path, chosen, self.conformers)
        if suffix in (".fasta", ".fa"):
            return write_fasta(path, chosen)
        if suffix == ".pdb":
            return write_pdb(path, chosen, self.conformers)
        if suffix in (".smi", ".smiles", ""):
            return self.export_smiles(path, indices)
        raise ExportRefused(f"{Path(path).name}: export as .smi, .csv, .sdf, .fasta or .pdb")

    def export_smiles(self, path: str | os.PathLike, indices: list[int] | None = None
                      ) -> Written:
        """``SMILES name`` lines of the molecules, in display order (or the given entries)."""
        from engine.atomic import write_bytes_atomic

        chosen = self.order if indices is None else indices
        lines = [f"{self.entries[i].smiles} {self.entries[i].name}".rstrip() + "\n"
                 for i in chosen if self.entries[i].kind == "molecule"]
        if not lines:
            raise ExportRefused("SMILES lists small molecules: the selection holds none")
        write_bytes_atomic(path, "".join(lines).encode())
        return Written(Path(path), len(lines), len(chosen) - len(lines))

    def export_csv(self, path: str | os.PathLike, indices: list[int] | None = None) -> Written:
        """SMILES, name, flag and every descriptor, in display order (or the given entries)."""
        from engine.atomic import write_bytes_atomic

        chosen = self.order if indices is None else indices
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["smiles", "name", "flag", *DESCRIPTOR_NAMES])
        for i in chosen:
            entry = self.entries[i]
            values = entry.descriptors() if entry.valid else {}
            writer.writerow([entry.smiles, entry.name, entry.flag,
                             *(f"{values[n]:.4g}" if values else "" for n in DESCRIPTOR_NAMES)])
        write_bytes_atomic(path, buffer.getvalue().encode())
        return Written(Path(path), len(chosen), 0)


def _entry(record) -> Entry:
    if isinstance(record, Sequence):
        return Entry("", record.name, record.location, kind=record.kind,
                     detail=record.sequence, record=record)
    if isinstance(record, Structure):
        chains = ", ".join(f"{c}: {len(s)} residues" for c, s in record.chains.items())
        return Entry("", record.name, record.location, kind="structure",
                     detail=f"{len(record.atoms)} atoms; {chains}", record=record)
    return Entry(record.smiles, record.name, record.location, dict(record.props), record=record)


def smiles_problem(smiles: str) -> str:
    """Why a SMILES is not a molecule ("" when it is one): its syntax, or RDKit's complaint
    about the chemistry (a valence, an aromatic ring it cannot kekulize)."""
    from rdkit import Chem

    if not smiles.strip():
        return "empty SMILES"
    if parse_smiles(smiles) is not None:
        return ""
    if len(smiles) > 2000:
        return "longer than 2000 characters"
    mol = Chem.MolFromSmiles(smiles, sanitize=False)
    if mol is None:
        return _syntax_problem(smiles)
    found = Chem.DetectChemistryProblems(mol)
    return found[0].Message() if found else "RDKit cannot sanitize it"


def _syntax_problem(smiles: str) -> str:
    """The first syntax slip a reader can fix: an open bracket atom, branch or ring bond."""
    if smiles.count("[") != smiles.count("]"):
        return "SMILES syntax: an unclosed [atom]"
    outside = re.sub(r"\[[^\]]*\]", "", smiles)  # ring digits, not charges or isotopes
    if outside.count("(") != outside.count(")"):
        return "SMILES syntax: unbalanced branch parentheses"
    rings = Counter(re.findall(r"%\d\d|\d", outside))
    unclosed = sorted(bond for bond, count in rings.items() if count % 2)
    if unclosed:
        return f"SMILES syntax: ring bond {', '.join(unclosed)} is never closed"
    return "SMILES syntax error"


def read_samples(path: str | os.PathLike) -> list[Entry]:
    """Every sample of a SMILES list or table, valid or not, as entries (no RDKit: safe on a
    worker thread); ``FormatError`` when it lists no SMILES."""
    return [Entry(smiles, name, location, props)
            for smiles, name, location, props in _raw_smiles(Path(path))]


def _raw_smiles(path: Path) -> list[tuple[str, str, str, dict]]:
    """(SMILES, name, location, other columns) of every sample of a SMILES list or a table
    with a SMILES column, valid or not (``read_molecules`` keeps only the valid ones)."""
    too_big = (f"over the {INSPECT_LIMIT_BYTES >> 20} MB that are inspected sample by "
               "sample; open a smaller part of it")
    try:
        if path.stat().st_size > INSPECT_LIMIT_BYTES:
            raise FormatError(path, f"{path.stat().st_size:,} bytes: {too_big}")
        # a .csv.gz (every gzip member) within the engine's decompression budgets
        with open_decompressed(path) as stream:
            data = stream.read(INSPECT_LIMIT_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise FormatError(path, f"cannot read it ({exc})") from None
    if len(data) > INSPECT_LIMIT_BYTES:  # never a silently partial set
        raise FormatError(path, f"unpacks to {too_big}")
    text = data.decode("utf-8", "replace")
    samples: list[tuple[str, str, str, dict]] = []
    if extension_of(path) in TABLE_EXTENSIONS:
        delimiter = "\t" if ".tsv" in extension_of(path) else ","
        reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
        column = smiles_column(reader.fieldnames or [])
        if column is None:
            raise FormatError(path, "no SMILES column")
        for row in reader:
            props = {k: v for k, v in row.items() if k and k != column and v}
            samples.append(((row.get(column) or "").strip(), "", f"line {reader.line_num}",
                            props))
    else:
        for number, line in enumerate(text.splitlines(), 1):
            fields = line.split(None, 1)
            if fields and not fields[0].startswith("#"):
                samples.append((fields[0], fields[1].strip() if len(fields) > 1 else "",
                                f"line {number}", {}))
    if not samples:
        raise FormatError(path, "no SMILES in it")
    return samples


def _restore_marks(entries: list[Entry]) -> None:
    """Marks an exported SDF or CSV carries in its ``flag`` tag or column go back onto the
    entries (and out of their properties). A ``flag`` column with any other value is the
    file's own: it stays a property, renamed so the mark column does not hide it."""
    words = {UNMARKED: "", **{flag: flag for flag in FLAGS}}
    carrying = [entry for entry in entries if FLAG_COLUMN in entry.props]
    values = [entry.props[FLAG_COLUMN] for entry in carrying]
    marks = all(isinstance(v, str) and v.strip().lower() in words for v in values)
    for entry in carrying:
        if marks:
            entry.flag = words[entry.props.pop(FLAG_COLUMN).strip().lower()]
        else:
            entry.props = {FOREIGN_FLAG_COLUMN if key == FLAG_COLUMN else key: value
                           for key, value in entry.props.items()}


def _fingerprints(smiles: list[str], pause: Callable[[], Any] = lambda: None) -> np.ndarray:
    from rdkit.Chem import rdFingerprintGenerator

    generator = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=FINGERPRINT_BITS)
    out = np.zeros((len(smiles), FINGERPRINT_BITS), dtype=np.float64)
    for i, text in enumerate(smiles):
        pause()
        mol = parse_smiles(text)
        if mol is not None:
            out[i] = generator.GetFingerprintAsNumPy(mol)
    return out
