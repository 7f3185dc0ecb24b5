"""The molecule panel's actions as commands (``studio.commands``): open sets, antibodies,
references, MD runs, trajectories and run outputs; search, sort, scaffold filter and the
selection; SMILES edits, standardising and marks; the shown property, histogram, tab, 3-D
colouring, style and pin, residues and frames; exports and methods to run.

Molecules are named as the panel shows them: by name, by SMILES when no name tells them apart,
and by the ``#`` column's record number only when neither does (``molecule_label``); so a
logged command means the same on another file with the same names. Each edit is one
``EditSmiles`` or ``SetFlag`` pushed through ``host.push_edit`` (undo, redo, autosave). The
functions act on a ``MoleculesState``: the model, the host, the molecule in the editor, the
selection, and the panel's view for what only the window draws (the 3-D view, the player, the
histogram and grid figures). Tests build a state without a window and call ``registry.run``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from engine import provenance
from engine.io import FormatError
from engine.io.molecules import DESCRIPTOR_NAMES
from panels.molecules.exports import ExportRefused
from panels.molecules.geometry import COLOUR_MODES, STYLES
from panels.molecules.model import (
    NUMBERING_COLUMNS,
    PROBLEM_COLUMN,
    UNMARKED,
    EditSmiles,
    MoleculeSetModel,
    SetFlag,
    decode,
)
from panels.molecules.numbering import SCHEMES
from panels.widgets.panel_state import forget_edits
from studio.commands import Command, CommandArgs, CommandRegistry, Refusal

SCOPE = "molecules"
KCGM_METHOD = "kcgm.calibrate"
# Methods the panel launches; their parameter forms come from the engine's method list.
RUN_METHODS = {
    "kcgm.calibrate": "kCGM calibration toward the reference; its samples open here",
    "branching_flows.molecules": "Branching Flows on 3-D molecules; samples and generation "
                                 "trajectories open here",
    "branching_flows.antibodies": "Branching Flows on antibody sequences; samples and "
                                  "sequence trajectories open here",
}
TABS = ("Table", "Histograms", "Edit", "Sequence", "3D")
FIXED_COLUMNS = ("#", "name", "SMILES", "flag")
RECORD = re.compile(r"^#(\d+)$")
READ_ERRORS = (FormatError, ValueError, KeyError, OSError)
LISTED = 12  # names a refusal lists
ROWS_LISTED = 1000  # entry rows an export's provenance lists (the count is always there)

Property = Literal[DESCRIPTOR_NAMES]  # type: ignore[valid-type]
Mark = Literal["accepted", "rejected", "flagged", "unmarked"]
Method = Literal[tuple(RUN_METHODS)]  # type: ignore[valid-type]


@dataclass
class MoleculesState:
    """What the molecule commands act on. ``current`` is the entry in the editor (-1: none),
    ``selection`` the entries chosen without a window (the view keeps its grid's). ``view``
    (the ``MoleculesPanel``) is needed only by the commands that draw."""

    model: MoleculeSetModel
    host: Any
    view: Any = None
    document: str | None = None          # whose steps this panel put on the history
    current: int = -1
    selection: list[int] = field(default_factory=list)
    reference_path: str = ""             # "" = the default reference (GNEprop antibiotics)
    _names: Counter | None = None        # how often each name occurs (for labels)
    _smiles: Counter | None = None       # and each SMILES (edits change them)

    def __post_init__(self) -> None:
        self.model.events.connect("loaded", self._on_loaded)
        self.model.events.connect("changed", self._on_changed)

    def _on_changed(self, index: int) -> None:
        self._smiles = None

    def _on_loaded(self) -> None:
        """A new set: the one before leaves the history (its autosave stays for when it is
        opened again), nothing is current or selected."""
        self.leave_document()
        self.document = self.model.document
        self.current, self.selection, self._names, self._smiles = -1, [], None, None

    def leave_document(self) -> None:
        forget_edits(self.host, self.document)

    def restore_edits(self) -> int:
        """Replay the set's saved edits (autosave); how many."""
        restore = getattr(self.host, "restore_edits", None)
        return restore(self.model.document, self.model, decode) if callable(restore) else 0

    def push(self, edit: EditSmiles | SetFlag) -> None:
        """Apply ``edit`` through the set's history (undo, autosave)."""
        self.host.push_edit(self.model.document, edit, self.model)

    def name_counts(self) -> Counter:
        if self._names is None:
            self._names = Counter(entry.name for entry in self.model.entries)
        return self._names

    def smiles_counts(self) -> Counter:
        if self._smiles is None:
            self._smiles = Counter(entry.smiles for entry in self.model.entries)
        return self._smiles


# -- naming molecules as the user sees them ----------------------------------------------------


def molecule_label(state: MoleculesState, index: int) -> str:
    """How a command names entry ``index``: its name when no other entry has it, else its
    SMILES when that is unique, else its record number (the table's ``#`` column)."""
    entry = state.model.entries[index]
    if entry.name and state.name_counts()[entry.name] == 1:
        return entry.name
    if entry.smiles and entry.smiles not in state.name_counts() and \
            state.smiles_counts()[entry.smiles] == 1:
        return entry.smiles
    return f"#{index + 1}"


def _file(state: MoleculesState) -> str:
    return Path(state.model.path).name or state.model.path or "the set"


def _opened(state: MoleculesState) -> None:
    if not state.model.entries:
        raise Refusal("no molecules are open: open a set first")


def find_molecule(state: MoleculesState, molecule: str) -> int:
    """The entry a name, SMILES or ``#N`` names; refused when none or several do."""
    _opened(state)
    entries = state.model.entries
    found = RECORD.match(molecule.strip())
    if found:
        index = int(found.group(1)) - 1
        if 0 <= index < len(entries):
            return index
        raise Refusal(f"{_file(state)} has no record {molecule} (it has {len(entries)})")
    named = [i for i, entry in enumerate(entries) if entry.name == molecule]
    if not named:
        named = [i for i, entry in enumerate(entries) if entry.smiles == molecule]
    if len(named) == 1:
        return named[0]
    if named:
        records = ", ".join(f"#{i + 1}" for i in named[:LISTED])
        raise Refusal(f"{len(named)} molecules of {_file(state)} are named {molecule!r}: "
                      f"name one by its record ({records})")
    raise Refusal(f"no molecule named {molecule!r} in {_file(state)}")


def _editor_molecule(state: MoleculesState, molecule: str | None) -> int:
    """The named entry, or the one in the editor when none is named."""
    if molecule is not None:
        return find_molecule(state, molecule)
    _opened(state)
    if state.current < 0:
        raise Refusal("no molecule is chosen: name one, or choose it in the grid or table")
    return state.current


def table_columns(model: MoleculeSetModel) -> list[str]:
    """The table's columns: fixed ones (and why each sample is invalid, for a set opened for
    inspection), the scaffold and descriptors (for molecules), the numbering's, the file's."""
    problem = [PROBLEM_COLUMN] if model.inspecting else []
    chemistry = ["scaffold", *DESCRIPTOR_NAMES] if model.has_molecules() else []
    numbering = list(NUMBERING_COLUMNS) if model.numbering else []
    return [*FIXED_COLUMNS, *problem, *chemistry, *numbering, *model.file_columns()]


def _view(state: MoleculesState, what: str) -> Any:
    if state.view is None:
        raise Refusal(f"cannot {what} without the panel's window")
    return state.view


def _read(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except READ_ERRORS as exc:
        raise Refusal(str(exc.args[0]) if isinstance(exc, KeyError) and exc.args
                      else str(exc)) from None


# -- arguments ---------------------------------------------------------------------------------


class OpenArgs(CommandArgs):
    path: str = Field(description="a molecule file: SMILES, CSV/TSV, SDF, XYZ, FASTA, PDB, or "
                      "an MD topology or trajectory")
    inspect_invalid: bool = Field(False, description="a file without one valid molecule opens "
                                  "with each sample marked invalid and why")


class OptionalFolderArgs(CommandArgs):
    directory: str | None = Field(None, description="the folder (default: the shared "
                                  "data's antibodies)")


class ReferenceArgs(CommandArgs):
    path: str | None = Field(None, description="the reference molecules (default: GNEprop "
                             "known antibiotics)")


class MdArgs(CommandArgs):
    topology: str = Field(description="PSF, PDB, GRO or PRMTOP")
    trajectory: str = Field(description="DCD, XTC or TRR")


class PathArgs(CommandArgs):
    path: str = Field(description="the file or folder")


class TrajectoryArgs(CommandArgs):
    path: str = Field(description="a multi-frame XYZ or a '>t=' FASTA, or the name of one of "
                      "the open run's trajectories")


class SmartsArgs(CommandArgs):
    smarts: str = Field(description="SMARTS substructure ('' clears the search)")


class SortArgs(CommandArgs):
    column: str = Field(description="a table column's name ('#': the file's order)")
    descending: bool = Field(False, description="largest first")


class ScaffoldArgs(CommandArgs):
    scaffold: str | None = Field(None, description="Murcko scaffold SMILES ('acyclic' or '' "
                                 "for molecules without rings; none: all)")


class MoleculeArgs(CommandArgs):
    molecule: str | None = Field(None, description="its name, SMILES or #record (default: "
                                 "the one in the editor)")


class ChooseArgs(CommandArgs):
    molecule: str = Field(description="its name, SMILES or #record")


class SelectArgs(CommandArgs):
    molecules: list[str] = Field(default_factory=list, description="names, SMILES or "
                                 "#records (none: clear the selection)")


class EditArgs(MoleculeArgs):
    smiles: str = Field(description="the new SMILES")


class MarkArgs(MoleculeArgs):
    flag: Mark = Field(description="accepted, rejected, flagged or unmarked")


class PropertyArgs(CommandArgs):
    property: Property = Field(description="a descriptor: MolWt, LogP, TPSA, QED, …")


class TabArgs(CommandArgs):
    tab: Literal[TABS] = Field(description="Table, Histograms, Edit, Sequence or 3D")  # type: ignore[valid-type]


class FigureArgs(CommandArgs):
    path: str = Field(description="the figure's file")
    dpi: int = Field(192, ge=36, le=1200, description="resolution")
    caption: bool = Field(False, description="the information line under the figure")


class SnapshotArgs(CommandArgs):
    path: str = Field(description="the snapshot's .png")
    dpi: int = Field(192, ge=36, le=1200, description="resolution")


class ExportSetArgs(CommandArgs):
    path: str = Field(description=".smi, .csv, .sdf, .fasta or .pdb")
    molecules: list[str] = Field(default_factory=list, description="names, SMILES or #records "
                                 "(none: the selection, else every molecule shown)")
    background: bool = Field(False, description="write on the panel's worker thread (its "
                             "status line reports it)")


class RunArgs(CommandArgs):
    method: Method = Field(description="the method to run")
    params: dict = Field(default_factory=dict, description="its parameters (its schema's "
                         "defaults for the rest)")


class SchemeArgs(CommandArgs):
    scheme: Literal[SCHEMES] = Field("imgt", description="imgt, kabat or chothia")  # type: ignore[valid-type]


class ResidueArgs(CommandArgs):
    chain: str = Field(description="the strip's chain label (A, VH, …)")
    residue: int = Field(description="the residue's number as the strip gives it")


class ColourArgs(CommandArgs):
    colouring: Literal[COLOUR_MODES] = Field(description="element, chain, B-factor or "  # type: ignore[valid-type]
                                             "secondary structure")


class StyleArgs(CommandArgs):
    style: Literal[STYLES] = Field(description="how a protein is drawn")  # type: ignore[valid-type]


class FrameArgs(CommandArgs):
    frame: int = Field(ge=1, description="the frame, from 1 as the player counts")


class PlayArgs(CommandArgs):
    playing: bool = Field(True, description="play (false: pause)")


class SpeedArgs(CommandArgs):
    fps: int = Field(ge=1, le=60, description="frames per second")


# -- opening -----------------------------------------------------------------------------------


def open_file(state: MoleculesState, args: OpenArgs) -> bool:
    """A molecule set (with the window: trajectories play, MD files pair up)."""
    if not Path(args.path).exists():
        raise Refusal(f"{args.path}: no such file")
    if state.view is not None:
        return state.view.load_path(args.path, args.inspect_invalid)
    _read(lambda: state.model.load(args.path))
    state.restore_edits()
    return True


def open_antibodies(state: MoleculesState, args: OptionalFolderArgs) -> str:
    from panels.molecules.model import ANTIBODIES

    _read(lambda: state.model.load_antibodies(args.directory or ANTIBODIES))
    return (f"Jain et al. 2017: {len(state.model.entries)} chains (VH and VL) with measured "
            "properties")


def open_reference(state: MoleculesState, args: ReferenceArgs) -> str:
    if args.path is not None and not Path(args.path).exists():
        raise Refusal(f"{args.path}: no such file")
    count = _read(lambda: state.model.load_reference(args.path))
    state.reference_path = args.path or ""
    if state.view is not None:
        state.view.reference_changed()
    return f"reference: {count} molecules after cleaning"


def open_md(state: MoleculesState, args: MdArgs) -> bool:
    for path in (args.topology, args.trajectory):
        if not Path(path).exists():
            raise Refusal(f"{path}: no such file")
    _view(state, "play an MD run").start_md(args.topology, args.trajectory)
    return True


def open_trajectory(state: MoleculesState, args: TrajectoryArgs) -> bool:
    view = _view(state, "play a trajectory")
    path = view.trajectory_sources.get(args.path, args.path)
    if not Path(path).exists():
        raise Refusal(f"{args.path}: no such file, nor a trajectory of the open run")
    return view.play_file(path)


def open_run(state: MoleculesState, args: PathArgs) -> bool:
    if not Path(args.path).is_dir():
        raise Refusal(f"{args.path}: not a run folder")
    return _view(state, "open a run").load_run(args.path)


def open_output(state: MoleculesState, args: PathArgs) -> bool:
    """What a run made: a run folder, or a generated set (opened even when invalid)."""
    if Path(args.path).is_dir():
        return open_run(state, args)
    return open_file(state, OpenArgs(path=args.path, inspect_invalid=True))


# -- order, search, selection ------------------------------------------------------------------


def search(state: MoleculesState, args: SmartsArgs) -> int:
    """How many molecules hold the substructure; a bad pattern is refused before the search
    shown is forgotten."""
    from rdkit import Chem

    _opened(state)
    if args.smarts.strip() and Chem.MolFromSmarts(args.smarts.strip()) is None:
        raise Refusal(f"not a valid SMARTS pattern: {args.smarts!r}")
    return len(state.model.search(args.smarts))


def sort_by(state: MoleculesState, args: SortArgs) -> bool:
    _opened(state)
    columns = table_columns(state.model)
    name = {"smiles": "SMILES"}.get(args.column, args.column)
    if name not in columns:
        raise Refusal(f"no column {args.column!r} in the table of {_file(state)} (its columns: "
                      f"{', '.join(columns[:LISTED])}{'…' if len(columns) > LISTED else ''})")
    if name == "#":
        state.model.unsort()
    else:
        state.model.sort({"SMILES": "smiles"}.get(name, name), descending=args.descending)
    return True


def filter_scaffold(state: MoleculesState, args: ScaffoldArgs) -> str:
    _opened(state)
    scaffold = "" if args.scaffold == "acyclic" else args.scaffold
    if scaffold is not None and not any(entry.valid and entry.scaffold == scaffold
                                        for entry in state.model.entries):
        raise Refusal(f"no molecule of {_file(state)} has the scaffold {args.scaffold!r}")
    state.model.filter_scaffold(scaffold)
    shown = "all" if scaffold is None else (scaffold or "acyclic")
    return f"scaffold {shown}: {len(state.model.order)} molecule(s)"


def select_molecule(state: MoleculesState, args: ChooseArgs) -> bool:
    """Show a molecule in the editor (and the 3-D view, the strip, the player)."""
    index = find_molecule(state, args.molecule)
    if state.view is not None:
        state.view.show_entry(index)
    else:
        state.current = index
    return True


def select_molecules(state: MoleculesState, args: SelectArgs) -> int:
    """Choose the molecules an export takes (and whose diversity is measured)."""
    chosen = [find_molecule(state, name) for name in args.molecules] if args.molecules \
        else []
    hidden = [name for name, index in zip(args.molecules, chosen, strict=True)
              if index not in state.model.order]
    if hidden:
        raise Refusal(f"not shown (the scaffold filter hides them): {', '.join(hidden)}")
    state.selection = list(dict.fromkeys(chosen))
    if state.view is not None:
        state.view.select_entries(state.selection)
    return len(state.selection)


# -- edits -------------------------------------------------------------------------------------


def edit_smiles(state: MoleculesState, args: EditArgs) -> bool:
    index = _editor_molecule(state, args.molecule)
    try:
        edit = state.model.edit(index, args.smiles)
    except ValueError as exc:
        raise Refusal(str(exc)) from None
    if edit.smiles == edit.previous:
        return False  # the same molecule: nothing to undo
    state.push(edit)
    return True


def standardise_molecule(state: MoleculesState, args: MoleculeArgs) -> bool | str:
    """True when it changed the molecule; what it says when there was nothing to do."""
    index = _editor_molecule(state, args.molecule)
    edit = state.model.standardisation(index)
    if edit is None:
        return f"{molecule_label(state, index)}: already standard (or not a valid molecule)"
    state.push(edit)
    return True


def mark_molecule(state: MoleculesState, args: MarkArgs) -> bool:
    index = _editor_molecule(state, args.molecule)
    flag = "" if args.flag == UNMARKED else args.flag
    if state.model.entries[index].flag == flag:
        return False  # marked so already
    state.push(state.model.flagging(index, flag))
    return True


# -- what is shown -----------------------------------------------------------------------------


def show_property(state: MoleculesState, args: PropertyArgs) -> bool:
    _view(state, "show a property under the depictions").show_grid_property(args.property)
    return True


def show_histogram(state: MoleculesState, args: PropertyArgs) -> bool:
    _view(state, "draw a histogram").show_histogram_of(args.property)
    return True


def show_tab(state: MoleculesState, args: TabArgs) -> bool:
    view = _view(state, "show a tab")
    view.tabs.setCurrentIndex(TABS.index(args.tab))
    return True


def number_chains(state: MoleculesState, args: SchemeArgs) -> bool:
    """Number the antibody chains (ANARCI) in a scheme; the CDRs follow it."""
    view = _view(state, "number chains")
    if not state.model.numbering_targets():
        raise Refusal(f"no protein chains in {_file(state)} to number")
    return view.number_in(args.scheme)


def select_residue(state: MoleculesState, args: ResidueArgs) -> str:
    view = _view(state, "choose a residue")
    tracks = view.sequence_strip.tracks
    track = next((i for i, t in enumerate(tracks) if t.label == args.chain), None)
    if track is None:
        labels = ", ".join(t.label for t in tracks) or "none"
        raise Refusal(f"no chain {args.chain!r} in the strip (its chains: {labels})")
    numbers = tracks[track].numbers
    if args.residue not in numbers:
        raise Refusal(f"chain {args.chain} has no residue {args.residue} (it runs "
                      f"{numbers[0]}-{numbers[-1]})" if numbers else f"chain {args.chain} "
                      "has no residues")
    position = numbers.index(args.residue)
    view.choose_residue(track, position)
    return view.residue_label.text()


def colour_3d(state: MoleculesState, args: ColourArgs) -> bool:
    _view(state, "colour the 3-D view").colour_box.setCurrentText(args.colouring)
    return True


def style_3d(state: MoleculesState, args: StyleArgs) -> bool:
    _view(state, "draw the 3-D view").style_box.setCurrentText(args.style)
    return True


def pin_structure(state: MoleculesState, args: MoleculeArgs) -> str:
    """Keep a structure; the next one shown is superposed on it and its RMSD given."""
    view = _view(state, "pin a structure")
    index = _editor_molecule(state, args.molecule)
    if index != state.current:
        view.show_entry(index)
    return view.pin_current()


def show_frame(state: MoleculesState, args: FrameArgs) -> bool:
    player = _view(state, "show a frame").player
    if player.trajectory is None:
        raise Refusal("no trajectory is playing")
    if args.frame > len(player.trajectory):
        raise Refusal(f"{player.trajectory.name} has {len(player.trajectory)} frames, not "
                      f"{args.frame}")
    player.set_frame(args.frame - 1)
    return True


def play_trajectory(state: MoleculesState, args: PlayArgs) -> bool:
    player = _view(state, "play a trajectory").player
    if args.playing and player.trajectory is None:
        raise Refusal("no trajectory is open")
    player.play() if args.playing else player.pause()
    return True


def set_speed(state: MoleculesState, args: SpeedArgs) -> bool:
    _view(state, "set the playing speed").player.fps_box.setValue(args.fps)
    return True


# -- exports and runs --------------------------------------------------------------------------


def _figure(write: Callable[[], Path], path: str, dpi: int) -> str:
    try:
        written = write()
    except (OSError, ValueError) as exc:
        raise Refusal(str(exc) if path in str(exc) or Path(path).name in str(exc)
                      else f"{path}: {exc}") from None
    return f"Exported {written} ({dpi} dpi, provenance inside)"


def export_grid(state: MoleculesState, args: FigureArgs) -> str:
    _opened(state)
    view = _view(state, "draw the grid")
    return _figure(lambda: view.export_grid(args.path, args.dpi, args.caption), args.path,
                   args.dpi)


def export_histogram(state: MoleculesState, args: FigureArgs) -> str:
    """The histogram is drawn on its tab (shown for it); refused, the tab shown before
    comes back."""
    _opened(state)
    view = _view(state, "draw the histogram")
    tab = view.tabs.currentIndex()
    try:
        return _figure(lambda: view.export_histogram(args.path, args.dpi, args.caption),
                       args.path, args.dpi)
    except Refusal:
        view.tabs.setCurrentIndex(tab)
        raise


def export_curve(state: MoleculesState, args: FigureArgs) -> str:
    view = _view(state, "draw the trajectory's curve")
    if view.player.trajectory is None:
        raise Refusal("no trajectory is playing")
    return _figure(lambda: view.export_curve(args.path, args.dpi, args.caption), args.path,
                   args.dpi)


def export_3d(state: MoleculesState, args: SnapshotArgs) -> str:
    view = _view(state, "draw the 3-D view")
    return _figure(lambda: view.export_3d(args.path, args.dpi), args.path, args.dpi)


def export_rows(state: MoleculesState, names: list[str]) -> tuple[list[int], str]:
    """Entry indices to export, in display order, and which they are: the named ones, else
    the selection, else every one shown."""
    model = state.model
    if names:
        chosen = {find_molecule(state, name) for name in names}
        return [i for i in model.order if i in chosen] + sorted(chosen - set(model.order)), \
            f"{len(chosen)} selected"
    if state.view is not None:
        return state.view.export_rows()
    if state.selection:
        chosen = set(state.selection)
        return [i for i in model.order if i in chosen], f"{len(chosen)} selected"
    return list(model.order), f"all {len(model.order)} shown (none selected)"


def export_selection(state: MoleculesState, args: ExportSetArgs) -> str | None:
    """The chosen molecules as SMILES, CSV, SDF, FASTA or PDB by the suffix, with a
    ``.provenance.json`` sidecar; a format that holds none of them is refused."""
    _opened(state)
    indices, which = export_rows(state, args.molecules)
    if state.view is not None:
        return state.view.write_set(args.path, indices, which, args.background)
    if args.background:
        raise Refusal("a background export needs the panel's window")
    parts = export_parts(state, "selection", indices, selection=which)
    try:
        written = state.model.export(args.path, indices)
        provenance.write_sidecar(written.path, provenance.record(*parts))
    except ExportRefused as exc:
        raise Refusal(str(exc)) from None
    except OSError as exc:
        raise Refusal(f"{args.path}: {exc}") from None
    return f"Exported {written.records} record(s) of {which} to {written.path.name}"


def export_parts(state: MoleculesState, figure: str, indices: list[int],
                 shown_property: str | None = None, **view: Any
                 ) -> tuple[list[str], dict, list[dict]]:
    """(sources, view, runs) of ``provenance.record`` for an export: the open file and the
    run that made it, the view that chose and ordered the molecules, and which (rows of the
    file, the first ``ROWS_LISTED``). Gathered on the GUI thread; the record (which hashes
    the files) may be made on a worker."""
    model = state.model
    path = model.path
    sources = [path] if path and Path(path).exists() else []
    run = provenance.run_folder(path) if sources else None
    entries = model.entries
    described = {"panel": "molecules", "figure": figure,
                 **view_summary(model, shown_property), "count": len(indices),
                 "molecules": [{"row": i + 1, "name": entries[i].name,
                                "smiles": entries[i].smiles} for i in indices[:ROWS_LISTED]],
                 **view}
    return sources, described, [provenance.run_entry(run)] if run is not None else []


def view_summary(model: MoleculeSetModel, shown_property: str | None = None
                 ) -> dict[str, Any]:
    """How the shown rows were chosen, in words (provenance, the information line)."""
    sort = model.sort_key
    return {"file": model.path,
            "sorted by": f"{sort[0]} {'descending' if sort[1] else 'ascending'}"
            if sort else None,
            "scaffold": model.scaffold_filter,
            "SMARTS": f"{model.query} ({len(model.hits)} hits)" if model.query else None,
            "shown": f"{len(model.order)} of {len(model.entries)}",
            "property": shown_property}


def run_method(state: MoleculesState, args: RunArgs) -> str:
    """Submit a job; kCGM gets the chosen reference set as its input. What it makes opens in
    the panel (asked first when a set is open)."""
    inputs = {"reference": state.reference_path} if args.method == KCGM_METHOD and \
        state.reference_path else {}
    if state.view is not None:
        state.view.jobs.submit(args.method, args.params, inputs)
    else:
        state.host.submit_job(args.method, args.params, inputs)
    return f"submitted {args.method}"


# -- the registry ------------------------------------------------------------------------------

COMMANDS = [
    Command("molecules.open", "Open the molecules", "Open a molecule set (SMILES, CSV, SDF, "
            "XYZ, FASTA, PDB) or an MD topology/trajectory.", open_file, OpenArgs,
            menu="Molecules/Open…"),
    Command("molecules.open_antibodies", "Open the antibodies", "The 137 clinical antibodies "
            "of Jain et al. 2017 (VH/VL) with their measured properties.", open_antibodies,
            OptionalFolderArgs),
    Command("molecules.open_reference", "Open the reference set", "The reference set for "
            "histograms and nearest neighbours (default: GNEprop antibiotics).",
            open_reference, ReferenceArgs),
    Command("molecules.open_md", "Open the MD run", "Play an MD run (topology + trajectory) "
            "in 3-D with its RMSD to frame 0.", open_md, MdArgs),
    Command("molecules.open_trajectory", "Open the trajectory", "Play a generation (XYZ) or "
            "sequence (>t= FASTA) trajectory beside the set.", open_trajectory,
            TrajectoryArgs),
    Command("molecules.open_run", "Open the run", "A Branching Flows run folder: its samples "
            "and its first trajectory.", open_run, PathArgs),
    Command("molecules.open_output", "Open the run's output", "What a run made: its folder "
            "or its generated set (each invalid sample marked).", open_output, PathArgs),
    Command("molecules.search", "Search", "Find molecules with a SMARTS substructure (hits "
            "highlighted).", search, SmartsArgs),
    Command("molecules.sort_by", "Sort by a column", "Order the grid and table by a column "
            "('#': the file's order).", sort_by, SortArgs),
    Command("molecules.filter_scaffold", "Filter by scaffold", "Show only one Murcko "
            "scaffold's molecules (none: all).", filter_scaffold, ScaffoldArgs),
    Command("molecules.select_molecule", "Select a molecule", "Choose a molecule for the "
            "editor, the strip and the 3-D view.", select_molecule, ChooseArgs),
    Command("molecules.select_molecules", "Select molecules to export", "Select molecules "
            "in the grid (what an export takes; their diversity is measured).",
            select_molecules, SelectArgs),
    Command("molecules.edit_smiles", "Edit the molecule", "Replace a molecule's SMILES "
            "(undoable).", edit_smiles, EditArgs, undoable=True),
    Command("molecules.standardise_molecule", "Standardise the molecule", "Largest fragment, "
            "no stereo, neutral charges (undoable).", standardise_molecule, MoleculeArgs,
            undoable=True),
    Command("molecules.mark_molecule", "Mark the molecule", "Mark a molecule accepted, "
            "rejected, flagged or unmarked (undoable).", mark_molecule, MarkArgs,
            undoable=True),
    Command("molecules.show_property", "Show the property", "The descriptor shown under each "
            "depiction in the grid.", show_property, PropertyArgs),
    Command("molecules.show_histogram", "Draw the histogram", "A descriptor's histogram, the "
            "set against the reference.", show_histogram, PropertyArgs),
    Command("molecules.show_tab", "Show the tab", "Table, Histograms, Edit, Sequence or 3D.",
            show_tab, TabArgs),
    Command("molecules.number_chains", "Number the antibody chains", "ANARCI numbering in "
            "IMGT, Kabat or Chothia; CDRs follow it.", number_chains, SchemeArgs),
    Command("molecules.select_residue", "Show the residue", "Name a residue of the strip and "
            "highlight its atoms in 3-D.", select_residue, ResidueArgs),
    Command("molecules.colour_3d", "Colour the structure", "Colour a protein by element, "
            "chain, B-factor or secondary structure.", colour_3d, ColourArgs),
    Command("molecules.style_3d", "Draw the structure", "Atoms with the CA trace, or a "
            "cartoon tube.", style_3d, StyleArgs),
    Command("molecules.pin_structure", "Pin the structure", "Keep a structure; the next one "
            "shown is superposed on it with its RMSD.", pin_structure, MoleculeArgs),
    Command("molecules.show_frame", "Show the frame", "Move the trajectory player to a "
            "frame.", show_frame, FrameArgs),
    Command("molecules.play_trajectory", "Play the trajectory", "Play or pause the "
            "trajectory.", play_trajectory, PlayArgs),
    Command("molecules.set_speed", "Set the playing speed", "Frames per second of the "
            "trajectory player.", set_speed, SpeedArgs),
    Command("molecules.export_grid", "Export the grid", "The grid as PNG or SVG, hits "
            "highlighted, provenance inside.", export_grid, FigureArgs),
    Command("molecules.export_histogram", "Export the histogram", "The histogram as PNG, SVG "
            "or PDF, provenance inside.", export_histogram, FigureArgs),
    Command("molecules.export_curve", "Export the trajectory's curve", "The player's curve "
            "(RMSD, atoms or length per frame) as PNG, SVG or PDF, provenance inside.",
            export_curve, FigureArgs),
    Command("molecules.export_3d", "Export a 3-D snapshot", "The 3-D view as PNG (needs "
            "OpenGL), provenance inside.", export_3d, SnapshotArgs),
    Command("molecules.export_selection", "Export this selection", "Molecules as SMILES, CSV, "
            "SDF, FASTA or PDB with a provenance sidecar.", export_selection, ExportSetArgs),
    Command("molecules.run_method", "Run the method", "Run kCGM or Branching Flows; what it "
            "makes opens here.", run_method, RunArgs),
]


def register(registry: CommandRegistry) -> CommandRegistry:
    """Add the molecule commands (again, for a panel rebuilt in the same window)."""
    return registry.add_all(COMMANDS)
