"""Molecules and biomolecules: SMILES lists, SDF/MOL, XYZ, FASTA, PDB and mmCIF.

Every reader returns a ``MoleculeFile``: the records it could read, and ``problems`` as
``(location, message)`` where the location is a line number (SMILES, CSV, XYZ, FASTA, PDB) or
``record N (line L)`` for SDF blocks. A bad record never loses the file; only a file with
nothing readable (or binary content under a text name) raises ``FormatError``.

Small molecules (SMILES, SDF, MOL, XYZ) become ``Molecule`` records with a canonical SMILES and
the descriptor set kCGM calibrates (``descriptors``); sequences and structures become
``Sequence`` and ``Structure`` records. RDKit is imported on first use, so listing formats
stays fast; the module never imports torch, so the GUI can use it. Reference sets that ship
offline are read here too: the Jain et al. antibodies and the MOSES SMILES (``load_moses``).
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import importlib.util
import io
import math
import re
import struct
import time
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from engine.io import Format, FormatError, extension_of
from engine.io.limits import (
    ATOMS,
    DESCRIPTOR_TIME,
    ELEMENTS,
    check_text_file,
    open_decompressed,
)

GZIP_MAGIC = b"\x1f\x8b"
SMILES_COLUMNS = ("smiles", "canonical_smiles", "smi", "smiles_string", "molecule")
SMILES_EXTENSIONS = (".smi", ".smiles", ".smi.gz")
TABLE_EXTENSIONS = (".csv", ".tsv", ".csv.gz", ".tsv.gz")
SDF_EXTENSIONS = (".sdf", ".sd", ".mol", ".sdf.gz")
FASTA_EXTENSIONS = (".fasta", ".fa", ".faa", ".fas", ".fasta.gz")
PDB_EXTENSIONS = (".pdb", ".ent", ".pdb.gz")
CIF_EXTENSIONS = (".cif", ".mmcif", ".cif.gz")
# Molecular dynamics, read with MDAnalysis: a topology names the atoms, a trajectory moves them.
MD_TOPOLOGY_EXTENSIONS = (".psf", ".prmtop", ".parm7", ".gro", ".tpr")
MD_TRAJECTORY_EXTENSIONS = (".dcd", ".xtc", ".trr")
PROTEIN_LETTERS = set("ACDEFGHIKLMNPQRSTVWYBXZJUO*-")
NUCLEOTIDE_LETTERS = set("ACGTUN-")
MAX_PROBLEMS_SHOWN = 20
INSPECT_PROPERTY_SAMPLE = 2000
INSPECT_RECORD_LIMIT = 100_000  # inspect stops reading a larger file there (and says so)
# The descriptor vector kCGM's RBF kernel compares (spec order); an invalid molecule maps to 0.
DESCRIPTOR_NAMES = ("MolWt", "LogP", "TPSA", "RotatableBonds", "QED", "SA", "FracCSP3", "HBD",
                    "HBA", "AromaticRings", "HeavyAtoms")
THREE_TO_ONE = {
    "ALA": "A", "ARG": "R", "ASN": "N", "ASP": "D", "CYS": "C", "GLN": "Q", "GLU": "E",
    "GLY": "G", "HIS": "H", "HSD": "H", "HSE": "H", "HSP": "H", "ILE": "I", "LEU": "L",
    "LYS": "K", "MET": "M", "MSE": "M", "PHE": "F", "PRO": "P", "SER": "S", "THR": "T",
    "TRP": "W", "TYR": "Y", "VAL": "V", "SEC": "U", "PYL": "O",
}


@dataclass
class Molecule:
    """One small molecule: canonical SMILES, a name, and the file's own properties."""

    smiles: str
    name: str = ""
    location: str = ""
    props: dict = field(default_factory=dict)
    coordinates: list[tuple[str, float, float, float]] | None = None  # XYZ: (element, x, y, z)


@dataclass
class Sequence:
    """A protein, antibody chain or nucleic-acid sequence."""

    name: str
    sequence: str
    kind: str  # "protein" or "nucleotide"
    location: str = ""


@dataclass
class Atom:
    serial: int
    name: str
    residue: str
    chain: str
    residue_number: int
    x: float
    y: float
    z: float
    element: str
    b_factor: float
    hetero: bool


@dataclass
class Structure:
    """A macromolecular model: its atoms, and one-letter sequences per chain."""

    name: str
    atoms: list[Atom]
    location: str = ""

    @property
    def chains(self) -> dict[str, str]:
        sequences: dict[str, list[str]] = {}
        seen: set[tuple[str, int]] = set()
        for atom in self.atoms:
            if atom.hetero or (atom.chain, atom.residue_number) in seen:
                continue
            seen.add((atom.chain, atom.residue_number))
            letter = THREE_TO_ONE.get(atom.residue)
            if letter:
                sequences.setdefault(atom.chain, []).append(letter)
        return {chain: "".join(letters) for chain, letters in sequences.items()}


@dataclass
class MoleculeFile:
    path: str
    kind: str  # smiles, sdf, xyz, fasta, pdb, mmcif
    records: list
    problems: list[tuple[str, str]] = field(default_factory=list)

    @property
    def molecules(self) -> list[Molecule]:
        return [r for r in self.records if isinstance(r, Molecule)]


# -- RDKit helpers -----------------------------------------------------------------------------

def _quiet_rdkit() -> None:
    """RDKit prints every parse error to stderr; we collect them as problems instead."""
    from rdkit import RDLogger

    RDLogger.DisableLog("rdApp.*")


def parse_smiles(smiles: str):
    """An RDKit molecule, or ``None`` for an invalid SMILES (RDKit's own message is dropped)."""
    from rdkit import Chem

    _quiet_rdkit()
    if not smiles or len(smiles) > 2000:
        return None
    return Chem.MolFromSmiles(smiles)


def heavy_atoms_estimate(smiles: str) -> int:
    """Heavy atoms counted on the SMILES text (a bracket atom counts once, hydrogens too):
    cheap enough to decide before parsing whether a molecule is over the atom budget."""
    return len(_SMILES_ATOM.findall(smiles))


_SMILES_ATOM = re.compile(r"\[[^\]]*\]|Cl|Br|[BCNOSPFI]|[bcnosp]")


def canonical_smiles(smiles: str) -> str | None:
    """RDKit's canonical form, or ``None`` when the SMILES does not parse."""
    from rdkit import Chem

    mol = parse_smiles(smiles)
    return None if mol is None else Chem.MolToSmiles(mol)


def standardise(smiles: str) -> str | None:
    """kCGM's cleaning of a reference SMILES: keep the largest fragment of a salt, drop
    stereochemistry, neutralise charges; canonical SMILES or ``None``."""
    from rdkit import Chem
    from rdkit.Chem.MolStandardize import rdMolStandardize

    mol = parse_smiles(smiles)
    if mol is None:
        return None
    fragments = Chem.GetMolFrags(mol, asMols=True)
    mol = max(fragments, key=lambda m: m.GetNumHeavyAtoms())
    Chem.RemoveStereochemistry(mol)
    with contextlib.suppress(Exception):  # RDKit raises bare runtime errors on odd valences
        mol = rdMolStandardize.Uncharger().uncharge(mol)
    return Chem.MolToSmiles(mol)


def murcko_scaffold(smiles: str) -> str | None:
    """The Bemis-Murcko scaffold (ring systems and the linkers between them) as canonical
    SMILES; ``""`` for an acyclic molecule, ``None`` for an invalid SMILES."""
    from rdkit import Chem
    from rdkit.Chem.Scaffolds import MurckoScaffold

    mol = parse_smiles(smiles)
    if mol is None:
        return None
    if mol.GetRingInfo().NumRings() == 0:
        return ""
    return Chem.MolToSmiles(MurckoScaffold.GetScaffoldForMol(mol))


def _qed(mol) -> float:
    from rdkit.Chem import QED

    try:
        return QED.qed(mol)
    except Exception:  # noqa: BLE001 - QED fails on a few exotic valence states
        return 0.0


def _sa_score(mol) -> float:
    from rdkit.Contrib.SA_Score import sascorer

    return sascorer.calculateScore(mol)


@cache
def _descriptor_functions() -> dict[str, Callable]:
    from rdkit.Chem import Crippen, Descriptors, Lipinski, rdMolDescriptors

    return {
        "MolWt": Descriptors.MolWt,
        "LogP": Crippen.MolLogP,
        "TPSA": rdMolDescriptors.CalcTPSA,
        "RotatableBonds": rdMolDescriptors.CalcNumRotatableBonds,
        "QED": _qed,
        "SA": _sa_score,
        "FracCSP3": rdMolDescriptors.CalcFractionCSP3,
        "HBD": Lipinski.NumHDonors,
        "HBA": Lipinski.NumHAcceptors,
        "AromaticRings": rdMolDescriptors.CalcNumAromaticRings,
        "HeavyAtoms": lambda mol: mol.GetNumHeavyAtoms(),
    }


def descriptor(mol, name: str) -> float:
    """One descriptor of ``DESCRIPTOR_NAMES`` (QED and SA cost the most); 0 for ``None``."""
    return 0.0 if mol is None else float(_descriptor_functions()[name](mol))


def descriptors(mol) -> dict[str, float]:
    """The spec's descriptor set for one RDKit molecule; zeros for ``None`` (invalid)."""
    if mol is None:
        return dict.fromkeys(DESCRIPTOR_NAMES, 0.0)
    return {name: float(function(mol)) for name, function in _descriptor_functions().items()}


def smiles_descriptors(smiles: Iterable[str]) -> list[dict[str, float]]:
    return [descriptors(parse_smiles(s)) for s in smiles]


# -- text access -------------------------------------------------------------------------------

def _open_binary(path: Path) -> io.BufferedIOBase:
    """Plain or gzip bytes, within the decompression budgets (``engine.io.limits``)."""
    return open_decompressed(path)


def _read_text(path: Path) -> str:
    """The whole file as text; binary content (NUL bytes, not UTF-8) is a ``FormatError``."""
    try:
        with _open_binary(path) as handle:
            data = handle.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise FormatError(path, f"cannot read it ({exc})") from None
    if b"\x00" in data[:65536]:
        raise FormatError(path, "binary content, not a text molecule file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(path, f"not UTF-8 text (byte {exc.start})") from None


def _numeric(value: str):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return value
    return number if math.isfinite(number) else value


def _nothing_readable(path: Path, what: str, problems: list[tuple[str, str]]) -> FormatError:
    if not problems:
        return FormatError(path, f"no {what} in it")
    where, problem = problems[0]
    return FormatError(path, f"no readable {what} ({where}: {problem}; {len(problems)} bad "
                             f"records)")


# -- SMILES lists and tables -------------------------------------------------------------------

def read_smiles(path: str | Path, limit: int | None = None) -> MoleculeFile:
    """A ``.smi`` list (``SMILES [name]`` per line) or a CSV/TSV with a SMILES column."""
    path = Path(path)
    text = _read_text(path)
    if extension_of(path) in TABLE_EXTENSIONS:
        records, problems = _smiles_table(path, text, limit)
    else:
        records, problems = _smiles_lines(text, limit)
    if not records:
        raise _nothing_readable(path, "valid SMILES", problems)
    return MoleculeFile(str(path), "smiles", records, problems)


def _smiles_lines(text: str, limit: int | None) -> tuple[list[Molecule], list]:
    records, problems = [], []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split(None, 1)
        if not fields or fields[0].startswith("#"):
            continue
        if number == 1 and fields[0].lower() in SMILES_COLUMNS:
            continue  # a header line
        _add_smiles(records, problems, fields[0], fields[1].strip() if len(fields) > 1 else "",
                    f"line {number}", {})
        if limit is not None and len(records) >= limit:
            break
    return records, problems


def _delimiter(path: Path, header: str) -> str:
    if ".tsv" in extension_of(path) or header.count("\t") > header.count(","):
        return "\t"
    return ","


def smiles_column(columns: list[str]) -> str | None:
    """The first column whose name says it holds SMILES (case-insensitive)."""
    lowered = {c.strip().lower(): c for c in columns if c}
    return next((lowered[name] for name in SMILES_COLUMNS if name in lowered), None)


def _smiles_table(path: Path, text: str, limit: int | None) -> tuple[list[Molecule], list]:
    header = text.split("\n", 1)[0]
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=_delimiter(path, header))
    column = smiles_column(reader.fieldnames or [])
    if column is None:
        raise FormatError(path, f"no SMILES column (columns: {', '.join(reader.fieldnames or [])};"
                                f" name one {' or '.join(SMILES_COLUMNS[:2])})")
    name_column = next((c for c in reader.fieldnames if c and c.lower() in ("name", "id",
                                                                            "pref_name")), None)
    records, problems = [], []
    try:
        for row in reader:
            number = reader.line_num
            if None in row:
                problems.append((f"line {number}", "more cells than columns"))
                continue
            props = {k: _numeric(v) for k, v in row.items()
                     if k and k not in (column, name_column) and v not in (None, "")}
            _add_smiles(records, problems, (row.get(column) or "").strip(),
                        row.get(name_column, "") if name_column else "", f"line {number}", props)
            if limit is not None and len(records) >= limit:
                break
    except csv.Error as exc:
        problems.append((f"line {reader.line_num}", f"CSV error ({exc})"))
    return records, problems


def _add_smiles(records: list, problems: list, smiles: str, name: str, location: str,
                props: dict) -> None:
    if not smiles:
        problems.append((location, "empty SMILES"))
        return
    from rdkit import Chem

    mol = parse_smiles(smiles)
    if mol is None:
        problems.append((location, f"invalid SMILES {smiles[:60]!r}"))
        return
    # Canonical ranking grows faster than the atom count: a molecule over the atom budget
    # keeps the SMILES as written (still validated) rather than cost seconds per record.
    big = mol.GetNumHeavyAtoms() > ATOMS.value
    records.append(Molecule(smiles if big else Chem.MolToSmiles(mol), name, location, props))


# -- SDF / MOL ---------------------------------------------------------------------------------

def read_sdf(path: str | Path, limit: int | None = None) -> MoleculeFile:
    """Each ``$$$$``-separated block: a molecule with its ``> <field>`` data as properties."""
    from rdkit import Chem

    _quiet_rdkit()
    path = Path(path)
    text = _read_text(path)
    records, problems = [], []
    for index, (first_line, block) in enumerate(_sdf_blocks(text), 1):
        location = f"record {index} (line {first_line})"
        if "M  END" not in block and "V3000" not in block:
            problems.append((location, "no 'M  END': a broken or truncated molfile"))
            continue
        molfile, _, data = block.partition("M  END")
        mol = Chem.MolFromMolBlock(molfile + "M  END\n", sanitize=True, removeHs=True)
        if mol is None:
            problems.append((location, "RDKit cannot read this molfile (bad counts line, "
                                       "atoms or valence)"))
            continue
        name = block.split("\n", 1)[0].strip()
        records.append(Molecule(Chem.MolToSmiles(mol), name, location, _sdf_fields(data)))
        if limit is not None and len(records) >= limit:
            break
    if not records:
        raise _nothing_readable(path, "molecule", problems)
    return MoleculeFile(str(path), "sdf", records, problems)


def _sdf_blocks(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, block text) for every non-blank block."""
    line_number = 1
    for block in re.split(r"^\$\$\$\$[^\n]*\n?", text, flags=re.MULTILINE):
        if block.strip():
            yield line_number, block
        line_number += block.count("\n") + 1


def _sdf_fields(data: str) -> dict:
    fields, name = {}, None
    for line in data.splitlines():
        match = re.match(r">\s*.*<([^>]+)>", line)
        if match:
            name = match.group(1)
            fields[name] = ""
        elif name is not None and line.strip():
            fields[name] = (fields[name] + "\n" + line).strip()
    return {k: _numeric(v) for k, v in fields.items()}


# -- XYZ ---------------------------------------------------------------------------------------

@dataclass
class XyzFrame:
    """One frame of an XYZ file, read without chemistry (a generation trajectory's early frames
    are noise): its atoms, comment, time (``t=0.350`` in the comment) and first line."""

    atoms: list[tuple[str, float, float, float]]
    comment: str
    time: float | None
    line: int


TIME_PATTERN = re.compile(r"(?:^|[\s,;])t\s*=\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")


def frame_time(comment: str) -> float | None:
    """The time a frame's comment or a FASTA header names (``t=0.350``), else ``None``."""
    match = TIME_PATTERN.search(comment)
    return float(match.group(1)) if match else None


def read_xyz_frames(path: str | Path) -> tuple[list[XyzFrame], list[tuple[str, str]]]:
    """Every frame: an atom count, a comment, then ``element x y z`` lines. The atom count may
    change from frame to frame (a generation trajectory that adds and deletes atoms). A
    truncated or malformed frame is a problem at its line; reading goes on after it."""
    path = Path(path)
    lines = _read_text(path).splitlines()
    frames, problems, at = [], [], 0
    while at < len(lines):
        if not lines[at].strip():
            at += 1
            continue
        start = at + 1
        try:
            count = int(lines[at].split()[0])
        except ValueError:
            problems.append((f"line {start}", f"expected an atom count, got {lines[at][:40]!r}"))
            break
        atoms, bad = [], None
        for offset in range(count):
            number = at + 2 + offset
            if number >= len(lines):
                bad = (f"line {number + 1}", f"truncated frame: {count} atoms announced at line "
                                             f"{start}, {offset} present")
                break
            parts = lines[number].split()
            try:
                coordinates = [float(part) for part in parts[1:4]]
                if len(parts) < 4 or not all(map(math.isfinite, coordinates)):
                    raise ValueError
                atoms.append((parts[0].capitalize(), *coordinates))
            except ValueError:
                bad = (f"line {number + 1}", f"expected 'element x y z', got "
                                             f"{lines[number][:40]!r}")
                break
        comment = lines[at + 1].strip() if at + 1 < len(lines) else ""
        at += 2 + count
        if bad:
            problems.append(bad)
        else:
            frames.append(XyzFrame(atoms, comment, frame_time(comment), start))
    return frames, problems


def read_xyz(path: str | Path) -> MoleculeFile:
    """One or more frames, each a molecule where its bonds make sense: bonds are perceived
    from distances (RDKit ``DetermineConnectivity``) to give a SMILES. In a file of several
    frames each molecule's properties give its ``frame`` (from 1) and time ``t`` when the
    comment names one; frames that are no molecule are problems at their line."""
    path = Path(path)
    frames, problems = read_xyz_frames(path)
    records = []
    for number, frame in enumerate(frames, 1):
        smiles = _xyz_smiles(frame.atoms) if frame.atoms else None
        if smiles is None:
            problems.append((f"line {frame.line}", "unknown element or no sensible bonding"))
            continue
        props: dict = {}
        if len(frames) > 1:
            props["frame"] = number
            if frame.time is not None:
                props["t"] = frame.time
        records.append(Molecule(smiles, frame.comment, f"line {frame.line}", props,
                                frame.atoms))
    if not records:
        raise _nothing_readable(path, "XYZ frame", problems)
    return MoleculeFile(str(path), "xyz", records, problems)


def _xyz_smiles(atoms: list[tuple[str, float, float, float]]) -> str | None:
    from rdkit import Chem
    from rdkit.Chem import rdDetermineBonds
    from rdkit.Geometry import Point3D

    _quiet_rdkit()
    block = f"{len(atoms)}\n\n" + "".join(f"{e} {x} {y} {z}\n" for e, x, y, z in atoms)
    try:
        mol = Chem.MolFromXYZBlock(block)
        if mol is None:
            return None
        try:
            rdDetermineBonds.DetermineBonds(mol, charge=0)
        except Exception:  # noqa: BLE001 - bond orders fail on radicals; keep single bonds
            mol = Chem.MolFromXYZBlock(block)
            rdDetermineBonds.DetermineConnectivity(mol)
        conformer = mol.GetConformer()
        for index, (_, x, y, z) in enumerate(atoms):
            conformer.SetAtomPosition(index, Point3D(x, y, z))
        return Chem.MolToSmiles(Chem.RemoveHs(mol, sanitize=False))
    except Exception:  # noqa: BLE001 - RDKit raises bare runtime errors on unknown elements
        return None


# -- FASTA -------------------------------------------------------------------------------------

def read_fasta(path: str | Path) -> MoleculeFile:
    """``>name`` headers and wrapped sequence lines; a record with letters outside the protein
    (or nucleotide) alphabet is reported at its first bad line."""
    path = Path(path)
    records, problems = [], []
    name, start, chunks, bad = None, 0, [], None

    def finish() -> None:
        if name is None:
            return
        sequence = "".join(chunks).upper()
        if bad:
            problems.append(bad)
        elif not sequence:
            problems.append((f"line {start}", f"record {name!r} has no sequence"))
        else:
            kind = "nucleotide" if set(sequence) <= NUCLEOTIDE_LETTERS else "protein"
            records.append(Sequence(name, sequence, kind, f"line {start}"))

    for number, line in enumerate(_read_text(path).splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(";"):
            continue
        if line.startswith(">"):
            finish()
            name = line[1:].strip() or f"record at line {number}"
            start, chunks, bad = number, [], None
        elif name is None:
            problems.append((f"line {number}", "sequence before the first '>' header"))
        else:
            letters = line.replace(" ", "").upper()
            unknown = sorted(set(letters) - PROTEIN_LETTERS)
            if unknown and bad is None:
                bad = (f"line {number}", f"record {name!r}: characters {''.join(unknown)!r} "
                                         "are not amino acids or nucleotides")
            chunks.append(letters)
    finish()
    if not records:
        raise _nothing_readable(path, "sequence", problems)
    return MoleculeFile(str(path), "fasta", records, problems)


# -- Jain et al. 2017 antibodies --------------------------------------------------------------

JAIN_SEQUENCES = "jain2017_sd02.csv"
JAIN_PROPERTIES = "jain2017_sd03.csv"


def read_jain_antibodies(directory: str | Path) -> MoleculeFile:
    """The 137 clinical antibodies of Jain et al. 2017 (``jain2017_sd02.csv``): a ``Sequence``
    per VH and VL chain, named ``<antibody> VH``, located at the antibody's name."""
    directory = Path(directory)
    path = directory / JAIN_SEQUENCES
    if not path.is_file():
        raise FormatError(path, "no such file (the Jain antibody sequences)")
    records, problems = [], []
    for row in csv.DictReader(io.StringIO(_read_text(path), newline="")):
        name = (row.get("Name") or "").strip()
        for chain in ("VH", "VL"):
            sequence = (row.get(chain) or "").strip().upper()
            if not name or not sequence:
                continue
            if set(sequence) - PROTEIN_LETTERS:
                problems.append((f"{name} {chain}", "letters that are not amino acids"))
                continue
            records.append(Sequence(f"{name} {chain}", sequence, "protein", name))
    if not records:
        raise _nothing_readable(path, "antibody sequence", problems)
    return MoleculeFile(str(path), "fasta", records, problems)


def jain_properties(directory: str | Path) -> dict[str, dict[str, float]]:
    """Measured biophysical properties per antibody name (empty when the file is absent);
    columns named by their acronym (``PSR``, ``AC-SINS``) or the text before the unit."""
    path = Path(directory) / JAIN_PROPERTIES
    if not path.is_file():
        return {}
    table: dict[str, dict[str, float]] = {}
    for row in csv.DictReader(io.StringIO(_read_text(path), newline="")):
        name = (row.pop("Name", "") or "").strip()
        values = {_short_column(key): _numeric(value) for key, value in row.items()
                  if key and value not in (None, "")}
        if name and values:
            table[name] = {k: v for k, v in values.items() if isinstance(v, float)}
    return table


def _short_column(name: str) -> str:
    acronym = re.search(r"\(([A-Z][A-Z-]+)\)", name)
    return acronym.group(1) if acronym else re.split(r"\s*\(", name)[0].strip()


# -- MOSES ------------------------------------------------------------------------------------

def moses_path(split: str = "train") -> Path:
    """MOSES SMILES inside the ``molsets`` wheel (``import moses`` itself fails: we only read)."""
    spec = importlib.util.find_spec("moses")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("MOSES SMILES need the 'molsets' package "
                                "(pip install --no-deps molsets)")
    return Path(spec.submodule_search_locations[0]) / "dataset" / "data" / f"{split}.csv.gz"


@cache
def _moses_lines() -> tuple[str, ...]:
    """All 1.58 M training SMILES, read once per process (about 1 s)."""
    with gzip.open(moses_path(), "rt") as handle:
        return tuple(line for line in handle.read().split("\n")[1:] if line)


def load_moses(count: int, seed: int) -> list[str]:
    """``count`` training SMILES drawn without replacement (the same for the same seed)."""
    import numpy as np  # here, not at the top: listing formats imports this module

    lines = _moses_lines()
    picked = np.random.default_rng(seed).choice(len(lines), size=min(count, len(lines)),
                                                replace=False)
    return [lines[i] for i in picked]


# -- PDB and mmCIF -----------------------------------------------------------------------------

def read_pdb(path: str | Path) -> MoleculeFile:
    """ATOM/HETATM records by their fixed columns; each MODEL is one structure. A short or
    non-numeric coordinate line is a problem at its line number (a truncated file keeps the
    atoms before the cut)."""
    path = Path(path)
    structures, problems, atoms, model = [], [], [], 1
    name = path.stem
    for number, line in enumerate(_read_text(path).splitlines(), 1):
        record = line[:6].strip()
        if record == "HEADER" and len(line) > 62:
            name = line[62:66].strip() or name
        elif record in ("ATOM", "HETATM"):
            try:
                atoms.append(_pdb_atom(line))
            except ValueError as exc:
                problems.append((f"line {number}", str(exc)))
        elif record == "ENDMDL" and atoms:
            structures.append(Structure(f"{name} model {model}", atoms, f"model {model}"))
            atoms, model = [], model + 1
    if atoms:
        label = f"{name} model {model}" if structures else name
        structures.append(Structure(label, atoms, f"model {model}"))
    if not structures:
        raise _nothing_readable(path, "ATOM record", problems)
    return MoleculeFile(str(path), "pdb", structures, problems)


def _pdb_atom(line: str) -> Atom:
    if len(line) < 54:
        raise ValueError(f"ATOM record cut short ({len(line)} of at least 54 columns)")
    try:
        x, y, z = float(line[30:38]), float(line[38:46]), float(line[46:54])
        serial = int(line[6:11]) if line[6:11].strip() else 0
        residue_number = int(line[22:26])
    except ValueError:
        raise ValueError("coordinates or numbers are not numeric") from None
    if not all(math.isfinite(v) for v in (x, y, z)):
        raise ValueError(f"coordinates are not finite ({x}, {y}, {z})")
    name = line[12:16].strip()
    element = line[76:78].strip() if len(line) >= 78 else ""
    b_factor = float(line[60:66]) if len(line) >= 66 and line[60:66].strip() else 0.0
    return Atom(serial, name, line[17:20].strip(), line[21:22].strip(), residue_number, x, y, z,
                (element or name.lstrip("0123456789")[:1]).capitalize(), b_factor,
                line.startswith("HETATM"))


def read_mmcif(path: str | Path) -> MoleculeFile:
    """mmCIF through gemmi (the first model); gemmi's parse error names the line."""
    try:
        import gemmi
    except ImportError:
        raise FormatError(path, "reading mmCIF needs the 'gemmi' package") from None
    path = Path(path)
    _read_text(path)  # binary content is our error, not gemmi's
    try:
        structure = gemmi.read_structure(str(path))
    except (RuntimeError, ValueError) as exc:
        raise FormatError(path, f"not a readable mmCIF ({exc})") from None
    if len(structure) == 0:
        raise FormatError(path, "no model in it")
    atoms = []
    for chain in structure[0]:
        for residue in chain:
            for atom in residue:
                atoms.append(Atom(atom.serial, atom.name, residue.name, chain.name,
                                  residue.seqid.num, atom.pos.x, atom.pos.y, atom.pos.z,
                                  atom.element.name.capitalize(), atom.b_iso,
                                  residue.het_flag == "H"))
    if not atoms:
        raise FormatError(path, "no atoms in its first model")
    return MoleculeFile(str(path), "mmcif", [Structure(structure.name, atoms, "model 1")], [])


# -- one entry point ---------------------------------------------------------------------------

def read_molecules(path: str | Path, limit: int | None = None) -> MoleculeFile:
    """Any molecule file by its extension (CSV/TSV need a SMILES column)."""
    path = Path(path)
    if not path.is_file():
        raise FormatError(path, "no such file")
    if path.stat().st_size == 0:
        raise FormatError(path, "the file is empty")
    ext = extension_of(path)
    if ext in SMILES_EXTENSIONS or ext in TABLE_EXTENSIONS:
        return read_smiles(path, limit)
    if ext in SDF_EXTENSIONS:
        return read_sdf(path, limit)
    if ext == ".xyz":
        return read_xyz(path)
    if ext in FASTA_EXTENSIONS:
        return read_fasta(path)
    if ext in PDB_EXTENSIONS:
        return read_pdb(path)
    if ext in CIF_EXTENSIONS:
        return read_mmcif(path)
    raise FormatError(path, f"not a molecule file extension ({ext or 'none'})")


def property_summary(molecules: list[Molecule], skipped: list[str] | None = None
                     ) -> dict[str, dict[str, float]]:
    """Mean, min and max of each descriptor over (a sample of) the molecules. Descriptors
    (SA score and QED cost seconds on a large molecule) are computed only for molecules under
    the atom budget and within the time budget per file; what was left out is appended to
    ``skipped`` with the budget that left it out."""
    deadline = time.monotonic() + DESCRIPTOR_TIME.value
    rows, too_big, late = [], 0, 0
    sample = molecules[:INSPECT_PROPERTY_SAMPLE]
    for index, molecule in enumerate(sample):
        if time.monotonic() > deadline:
            late = len(sample) - index
            break
        if heavy_atoms_estimate(molecule.smiles) > ATOMS.value:
            too_big += 1  # counted on the text: a large molecule is not even parsed again
            continue
        rows.append(descriptors(parse_smiles(molecule.smiles)))
    if skipped is not None and too_big:
        skipped.append(f"descriptors of {too_big} molecule(s) over the budget of "
                       f"{ATOMS.show()} not computed (raise it with {ATOMS.env})")
    if skipped is not None and late:
        skipped.append(f"descriptors of {late} molecule(s) not computed within the "
                       f"{DESCRIPTOR_TIME.show()} budget per file (raise it with "
                       f"{DESCRIPTOR_TIME.env})")
    summary = {}
    for name in DESCRIPTOR_NAMES if rows else ():
        values = [row[name] for row in rows]
        summary[name] = {"mean": round(sum(values) / len(values), 3),
                         "min": round(min(values), 3), "max": round(max(values), 3)}
    return summary


# -- the registry ------------------------------------------------------------------------------

def _head_text(head: bytes) -> str:
    if head.startswith(GZIP_MAGIC):
        try:
            head = zlib.decompressobj(wbits=31).decompress(head, 4096)
        except zlib.error:
            return ""
    return head.decode("utf-8", "replace")


def _sniff_kind(path: Path, head: bytes) -> tuple[str, int]:
    """(format name, score): 2 where the name and the content agree (a CSV only with a SMILES
    column, which outbids the plain table format); 1 where only the name fits, so a broken file
    still gets this module's error naming the record."""
    ext, text = extension_of(path), _head_text(head)
    first = text.split("\n", 1)[0]
    if ext in TABLE_EXTENSIONS:
        columns = next(csv.reader([first], delimiter=_delimiter(path, first)), [])
        return "smiles", 2 if smiles_column(columns) else 0
    if ext in SMILES_EXTENSIONS:
        return "smiles", 2
    if ext in SDF_EXTENSIONS:
        return "sdf", 2 if ("M  END" in text or "V2000" in text or "V3000" in text) else 1
    if ext == ".xyz":
        return "xyz", 2 if first.strip().isdigit() else 1
    if ext in FASTA_EXTENSIONS:
        return "fasta", 2 if text.lstrip().startswith(">") else 1
    if ext in PDB_EXTENSIONS:
        pdb_like = re.search(r"^(HEADER|ATOM  |HETATM|CRYST1|REMARK)", text, re.M)
        return "pdb", 2 if pdb_like else 1
    if ext in CIF_EXTENSIONS:
        return "mmcif", 2 if text.lstrip().startswith("data_") else 1
    return "", 0


def _sniff_md(path: Path, head: bytes) -> tuple[str, int]:
    """MD files by name; 2 where the content agrees (a PSF's first word, a DCD's ``CORD``)."""
    ext = extension_of(path)
    if ext in MD_TOPOLOGY_EXTENSIONS:
        return "md_topology", 1 if ext == ".psf" and not head.lstrip().startswith(b"PSF") else 2
    if ext in MD_TRAJECTORY_EXTENSIONS:
        return "md_trajectory", 1 if ext == ".dcd" and head[4:8] != b"CORD" else 2
    return "", 0


def quiet_mdanalysis() -> None:
    """MDAnalysis 2.x warns on every DCD frame about a change planned for 3.0 that readers
    copying each frame's positions (ours) do not depend on."""
    warnings.filterwarnings("ignore", message="DCDReader currently makes independent",
                            category=DeprecationWarning)


MD_PARSE_EXPANSION = 20  # MDAnalysis' topology arrays and strings per byte of text
MD_TEXT_TOPOLOGIES = (".psf", ".gro", ".prmtop", ".parm7")
HEADER_SCAN_LINES = 10_000  # a PSF's title may be long; its !NATOM line comes after it


def check_md_file(path: str | Path) -> None:
    """Refuse an MD file before MDAnalysis allocates for it: a text topology over the text
    size budget (or the memory its parse needs), and a topology or trajectory whose header
    declares more atoms than the element budget (MDAnalysis sizes its arrays from that
    number, so a 1 KB PSF claiming 10^9 atoms would take gigabytes)."""
    path = Path(path)
    ext = extension_of(path)
    if ext in MD_TEXT_TOPOLOGIES:
        check_text_file(path, MD_PARSE_EXPANSION)
    try:
        atoms = _declared_atoms(path, ext)
    except OSError as exc:
        raise FormatError(path, f"cannot read it ({exc.strerror})") from None
    if atoms is not None:
        ELEMENTS.check(path, atoms, "its header declares")


def _declared_atoms(path: Path, ext: str) -> int | None:
    """The atom count a PSF, GRO, PRMTOP, DCD or XTC header declares (None: not found, the
    reader reports it)."""
    if ext in MD_TEXT_TOPOLOGIES:
        with open(path, encoding="latin-1") as handle:
            lines = [line for _, line in zip(range(HEADER_SCAN_LINES), handle, strict=False)]
        if ext == ".gro":
            count = lines[1].split()[:1] if len(lines) > 1 else []
        elif ext == ".psf":
            count = next((line.split()[:1] for line in lines if "!NATOM" in line), [])
        else:
            after = next((n for n, line in enumerate(lines) if line.startswith(
                "%FLAG POINTERS")), None)
            count = lines[after + 2].split()[:1] if after is not None and len(
                lines) > after + 2 else []
        return int(count[0]) if count and count[0].lstrip("-").isdigit() else None
    with open(path, "rb") as handle:
        head = handle.read(4096)
    if ext == ".xtc" and len(head) >= 8 and struct.unpack(">i", head[:4])[0] == 1995:
        return struct.unpack(">i", head[4:8])[0]
    if ext == ".dcd" and len(head) >= 100:
        order = "<" if struct.unpack("<i", head[:4])[0] == 84 else ">"
        if struct.unpack(order + "i", head[:4])[0] != 84:
            return None  # CHARMM's 64-bit markers: MDAnalysis checks those itself
        title = struct.unpack(order + "i", head[92:96])[0]
        at = 96 + title + 4
        if title >= 0 and at + 8 <= len(head):
            return struct.unpack(order + "i", head[at + 4:at + 8])[0]
    return None


def _inspect_md(path: Path) -> dict:
    """A topology's atoms and residues, or a trajectory's atoms and frames (MDAnalysis reads
    DCD/XTC/TRR headers without a topology); the molecule panel plays the pair."""
    from MDAnalysis.coordinates.core import get_reader_for
    from MDAnalysis.topology.core import get_parser_for

    quiet_mdanalysis()
    with open(path, "rb") as handle:
        head = handle.read(16)
    if _sniff_md(path, head)[1] < 2:
        raise FormatError(path, "not what its name says (no PSF title or DCD 'CORD' header)")
    check_md_file(path)
    try:
        if extension_of(path) in MD_TRAJECTORY_EXTENSIONS:
            reader = get_reader_for(str(path))(str(path))
            summary = {"kind": "md_trajectory", "atoms": reader.n_atoms,
                       "frames": reader.n_frames}
            reader.close()
        else:
            with get_parser_for(str(path))(str(path)) as parser:
                topology = parser.parse()
            summary = {"kind": "md_topology", "atoms": topology.n_atoms,
                       "residues": topology.n_residues}
    except Exception as exc:  # MDAnalysis raises many kinds; name the file
        raise FormatError(path, f"MDAnalysis cannot read it ({type(exc).__name__}: "
                                f"{exc})") from None
    return {"summary": summary, "metadata": {
        "plays_with": "a trajectory (DCD, XTC, TRR)" if summary["kind"] == "md_topology"
        else "its topology (PSF, PRMTOP, GRO, TPR or PDB)"}}


def _sniffer(name: str):
    def sniff(path: Path, head: bytes) -> int:
        kind, score = _sniff_md(path, head) if name.startswith("md_") else \
            _sniff_kind(path, head)
        return score if kind == name else 0

    return sniff


def _xyz_trajectory(path: Path) -> dict:
    """A multi-frame XYZ read as a trajectory: frames, atoms per frame, the time span."""
    frames, _ = read_xyz_frames(path)
    if len(frames) < 2:
        return {}
    counts = [len(f.atoms) for f in frames]
    times = [f.time for f in frames if f.time is not None]
    found = {"frames": len(frames), "atoms_per_frame": {"min": min(counts), "max": max(counts)}}
    if times:
        found["time"] = {"first": times[0], "last": times[-1]}
    return found


def _inspect(path: Path) -> dict:
    trajectory = _xyz_trajectory(path) if extension_of(path) == ".xyz" else {}
    try:
        found = read_molecules(path, limit=INSPECT_RECORD_LIMIT)
    except FormatError:
        if not trajectory:
            raise
        found = MoleculeFile(str(path), "xyz", [], [])  # noise frames only: still a trajectory
    summary: dict = {"kind": found.kind, "records": len(found.records),
                     "invalid": len(found.problems)}
    if trajectory:
        summary["frames"] = trajectory.pop("frames")
    if len(found.records) >= INSPECT_RECORD_LIMIT:
        summary["stopped_after"] = INSPECT_RECORD_LIMIT
    metadata: dict = {"problems": [f"{where}: {problem}" for where, problem in
                                   found.problems[:MAX_PROBLEMS_SHOWN]]}
    molecules = found.molecules
    if molecules:
        summary["unique"] = len({m.smiles for m in molecules})
        skipped: list[str] = []
        metadata["properties"] = property_summary(molecules, skipped)
        if skipped:
            summary["skipped"] = skipped
        metadata["file_properties"] = sorted({k for m in molecules[:100] for k in m.props})
    sequences = [r for r in found.records if isinstance(r, Sequence)]
    if sequences:
        lengths = [len(s.sequence) for s in sequences]
        summary["residues"] = sum(lengths)
        metadata["lengths"] = {"min": min(lengths), "max": max(lengths)}
        metadata["kinds"] = sorted({s.kind for s in sequences})
    structures = [r for r in found.records if isinstance(r, Structure)]
    if structures:
        summary["atoms"] = len(structures[0].atoms)
        metadata["chains"] = {c: len(s) for c, s in structures[0].chains.items()}
    metadata.update(trajectory)
    return {"summary": summary, "metadata": metadata}


FORMATS = [
    Format("smiles", "SMILES list or table with a SMILES column",
           SMILES_EXTENSIONS + TABLE_EXTENSIONS, _sniffer("smiles"), _inspect, panel="molecules",
           kinds=("molecules",)),
    Format("sdf", "SDF/MOL molecules", SDF_EXTENSIONS, _sniffer("sdf"), _inspect, panel="molecules",
           kinds=("molecules",)),
    Format("xyz", "XYZ coordinates", (".xyz",), _sniffer("xyz"), _inspect, panel="molecules",
           kinds=("molecules",)),
    Format("fasta", "FASTA sequences (proteins, antibodies, nucleotides)", FASTA_EXTENSIONS,
           _sniffer("fasta"), _inspect, panel="molecules", kinds=("sequences",)),
    Format("pdb", "PDB structure", PDB_EXTENSIONS, _sniffer("pdb"), _inspect, panel="molecules",
           kinds=("structure",)),
    Format("mmcif", "mmCIF structure", CIF_EXTENSIONS, _sniffer("mmcif"), _inspect,
           panel="molecules", kinds=("structure",)),
    Format("md_topology", "MD topology (atoms, residues, bonds)", MD_TOPOLOGY_EXTENSIONS,
           _sniffer("md_topology"), _inspect_md, panel="molecules", kinds=("structure",)),
    Format("md_trajectory", "MD trajectory (frames of coordinates)", MD_TRAJECTORY_EXTENSIONS,
           _sniffer("md_trajectory"), _inspect_md, panel="molecules", kinds=("trajectory",)),
]
