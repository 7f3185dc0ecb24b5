"""A selection of the set written out as SDF, FASTA or PDB (SMILES and CSV are the model's).

Each writer takes the chosen entries, writes what the format can hold atomically, and says how
many records it wrote and how many entries it skipped (an invalid molecule, a sequence in a
PDB). A selection with nothing the format can hold raises ``ExportRefused`` with the reason,
and no file is written. SDF carries the 3-D conformer where one is loaded (XYZ) or was computed
in the 3-D tab, else 2-D depiction coordinates, with the file's columns, the descriptors and the
flag as SD tags. PDB writes structures back through gemmi and small molecules through RDKit
with a conformer (ETKDG when none is known, as the 3-D tab embeds them). No Qt, no torch.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.atomic import write_bytes_atomic
from engine.io.molecules import Molecule, Sequence, Structure, descriptors, parse_smiles
from panels.molecules.geometry import conformer

FASTA_WIDTH = 60
# Conformers computed in the 3-D tab, by SMILES: (elements with hydrogens, positions (n, 3)).
Conformers = dict[str, tuple[list[str], np.ndarray]]


class ExportRefused(ValueError):
    """The selection holds nothing this format can hold."""


@dataclass
class Written:
    path: Path
    records: int
    skipped: int


def write_sdf(path: str | os.PathLike, entries: list, conformers: Conformers) -> Written:
    """Valid molecules with 3-D coordinates when known (else 2-D); SD tags: the file's
    columns, every descriptor and the flag (``unmarked`` when none)."""
    from rdkit import Chem
    from rdkit.Chem import rdDepictor

    buffer = io.StringIO()
    writer = Chem.SDWriter(buffer)
    written = 0
    for entry in entries:
        if entry.kind != "molecule" or not entry.valid:
            continue
        mol = known_conformer(entry, conformers)
        if mol is None:
            mol = Chem.Mol(parse_smiles(entry.smiles))
            rdDepictor.Compute2DCoords(mol)
        mol.SetProp("_Name", entry.name)
        tags = {**entry.props, **descriptors(parse_smiles(entry.smiles))}
        for name, value in tags.items():
            mol.SetProp(str(name), f"{value:.6g}" if isinstance(value, float) else str(value))
        mol.SetProp("flag", entry.flag or "unmarked")
        writer.write(mol)
        written += 1
    writer.close()
    if not written:
        raise ExportRefused(f"SDF holds small molecules: {_none_fit(entries, 'molecule')}")
    write_bytes_atomic(path, buffer.getvalue().encode())
    return Written(Path(path), written, len(entries) - written)


def write_fasta(path: str | os.PathLike, entries: list) -> Written:
    """One record per sequence (an antibody's VH and VL are entries of their own, named so),
    one per chain of a structure; small molecules are skipped."""
    records: list[tuple[str, str]] = []
    fitted = 0
    for number, entry in enumerate(entries, 1):
        name = entry.name or f"record {number}"
        if isinstance(entry.record, Sequence):
            records.append((name, entry.record.sequence))
        elif isinstance(entry.record, Structure):
            records.extend((f"{name} chain {chain or '-'}", sequence)
                           for chain, sequence in entry.record.chains.items())
        else:
            continue
        fitted += 1
    if not records:
        raise ExportRefused("FASTA holds sequences (proteins, antibody chains, nucleotides, "
                            f"structures' chains): {_none_fit(entries, 'sequence')}")
    text = "".join(f">{name}\n" + "".join(f"{sequence[i:i + FASTA_WIDTH]}\n"
                                          for i in range(0, len(sequence), FASTA_WIDTH))
                   for name, sequence in records)
    write_bytes_atomic(path, text.encode())
    return Written(Path(path), len(records), len(entries) - fitted)


def write_pdb(path: str | os.PathLike, entries: list, conformers: Conformers) -> Written:
    """Structures (through gemmi) and valid molecules (RDKit, with hydrogens and a conformer),
    one MODEL each when there are several; sequences without coordinates are skipped."""
    from rdkit import Chem

    blocks: list[list[str]] = []
    for entry in entries:
        if isinstance(entry.record, Structure):
            blocks.append(_structure_lines(entry.record))
        elif entry.kind == "molecule" and entry.valid:
            try:
                mol = known_conformer(entry, conformers) or _embedded(entry.smiles)
            except ValueError:  # ETKDG failed: counted as skipped
                continue
            mol.SetProp("_Name", entry.name)
            blocks.append([line for line in Chem.MolToPDBBlock(mol).splitlines()
                           if line.startswith(("HETATM", "ATOM", "CONECT"))])
    if not blocks:
        raise ExportRefused("PDB holds 3-D structures and molecules: "
                            f"{_none_fit(entries, 'structure or valid molecule')}")
    if len(blocks) == 1:
        lines = blocks[0]
    else:
        lines = [line for number, block in enumerate(blocks, 1)
                 for line in (f"MODEL     {number:4d}", *block, "ENDMDL")]
    write_bytes_atomic(path, ("\n".join([*lines, "END"]) + "\n").encode())
    return Written(Path(path), len(blocks), len(entries) - len(blocks))


def known_conformer(entry, conformers: Conformers):
    """The entry as an RDKit molecule with hydrogens at known 3-D coordinates: the file's
    (XYZ, while the SMILES is unedited) or those the 3-D tab computed; ``None`` otherwise."""
    record = entry.record
    if isinstance(record, Molecule) and record.coordinates and record.smiles == entry.smiles:
        mol = _from_xyz(record.coordinates)
        if mol is not None:
            return mol
    if entry.smiles in conformers:
        elements, positions = conformers[entry.smiles]
        return _with_positions(entry.smiles, elements, positions)
    return None


def _embedded(smiles: str):
    """An ETKDG conformer (the 3-D tab's seed, so the file matches what it showed)."""
    elements, positions, _ = conformer(smiles)
    return _with_positions(smiles, elements, positions)


def _with_positions(smiles: str, elements: list[str], positions: np.ndarray):
    """The SMILES with hydrogens added in RDKit's order, placed at ``positions`` (which must
    list the same elements in that order; ``None`` if not)."""
    from rdkit import Chem
    from rdkit.Geometry import Point3D

    mol = Chem.AddHs(parse_smiles(smiles))
    if [atom.GetSymbol() for atom in mol.GetAtoms()] != list(elements):
        return None
    placed = Chem.Conformer(mol.GetNumAtoms())
    for index, (x, y, z) in enumerate(np.asarray(positions, dtype=float)):
        placed.SetAtomPosition(index, Point3D(x, y, z))
    placed.Set3D(True)
    mol.AddConformer(placed, assignId=True)
    return mol


def _from_xyz(atoms: list[tuple[str, float, float, float]]):
    """Atoms of an XYZ frame with bonds perceived (orders where RDKit can find them)."""
    from rdkit import Chem
    from rdkit.Chem import rdDetermineBonds

    block = f"{len(atoms)}\n\n" + "".join(f"{e} {x} {y} {z}\n" for e, x, y, z in atoms)
    mol = Chem.MolFromXYZBlock(block)
    if mol is None:
        return None
    try:
        rdDetermineBonds.DetermineBonds(mol, charge=0)
    except Exception:  # noqa: BLE001 - radicals defeat bond orders: connectivity still holds
        mol = Chem.MolFromXYZBlock(block)
        rdDetermineBonds.DetermineConnectivity(mol)
    return mol


def _structure_lines(structure: Structure) -> list[str]:
    """ATOM/HETATM/TER lines of a structure rebuilt as a gemmi model (residues and chains
    in file order)."""
    import gemmi

    model = gemmi.Model(1)
    chain = residue = None
    for atom in structure.atoms:
        if chain is None or chain.name != atom.chain:
            model.add_chain(gemmi.Chain(atom.chain or "A"))
            chain, residue = model[len(model) - 1], None
        if residue is None or (residue.name, residue.seqid.num) != (atom.residue,
                                                                    atom.residue_number):
            made = gemmi.Residue()
            made.name, made.seqid = atom.residue, gemmi.SeqId(atom.residue_number, " ")
            made.het_flag = "H" if atom.hetero else "A"
            chain.add_residue(made)
            residue = chain[len(chain) - 1]
        added = gemmi.Atom()
        added.name, added.pos = atom.name, gemmi.Position(atom.x, atom.y, atom.z)
        added.element, added.b_iso, added.occ = gemmi.Element(atom.element), atom.b_factor, 1.0
        residue.add_atom(added)
    written = gemmi.Structure()
    written.add_model(model)
    written.setup_entities()
    text = written.make_pdb_string(gemmi.PdbWriteOptions(minimal=True))
    return [line for line in text.splitlines() if line.startswith(("ATOM", "HETATM", "TER"))]


def _none_fit(entries: list, wanted: str) -> str:
    """What the selection holds instead, e.g. ``no sequence among 3 small molecule(s)``."""
    kinds: dict[str, int] = {}
    for entry in entries:
        kind = "invalid molecule" if entry.kind == "molecule" and not entry.valid else \
            "small molecule" if entry.kind == "molecule" else entry.kind
        kinds[kind] = kinds.get(kind, 0) + 1
    held = ", ".join(f"{count} {kind}(s)" for kind, count in kinds.items()) or "nothing"
    return f"no {wanted} among {held}"
