"""Headless parts of the structure views: residue strips of known sequences, ETKDG conformers
and protein scenes as numpy arrays, and Kabsch superposition."""

from __future__ import annotations

import numpy as np
import pytest

from engine.io.molecules import Molecule, read_fasta, read_pdb
from panels.molecules.geometry import (
    atom_colours,
    backbone_trace,
    conformer,
    kabsch,
    molecule_scene,
    paired_atoms,
    paired_ca,
    structure_scene,
)
from panels.molecules.sequence import CLASS_COLOUR, residue_class, tracks_of


def peptide_pdb(path, sequence: str = "MKVLAD", chains: str = "AB", seed: int = 7):
    """A real peptide geometry (RDKit builds and embeds it), one copy per chain, with
    B-factors rising along the chain."""
    from rdkit import Chem
    from rdkit.Chem import AllChem

    mol = Chem.AddHs(Chem.MolFromSequence(sequence))
    AllChem.EmbedMolecule(mol, randomSeed=seed)
    lines = [line for line in Chem.MolToPDBBlock(Chem.RemoveHs(mol)).splitlines()
             if line.startswith("ATOM")]
    out = []
    for shift, chain in enumerate(chains):
        for line in lines:
            x, y, z = (float(line[30 + 8 * k:38 + 8 * k]) for k in range(3))
            b_factor = 10.0 * int(line[22:26])
            out.append(f"{line[:21]}{chain}{line[22:30]}{x + 30 * shift:8.3f}{y:8.3f}{z:8.3f}"
                       f"{line[54:60]}{b_factor:6.2f}{line[66:]}")
    path.write_text("\n".join(out) + "\nEND\n")
    return path


def test_strip_of_a_known_fasta(tmp_path):
    fasta = tmp_path / "two.fasta"
    fasta.write_text(">vh\nEVQLKD\nGW\n>dna\nACGT\n")
    protein, dna = read_fasta(fasta).records
    (track,) = tracks_of(protein)
    assert track.sequence == "EVQLKDGW" and track.numbers == list(range(1, 9))
    assert [residue_class(c) for c in track.sequence] == [
        "negative", "hydrophobic", "polar", "hydrophobic", "positive", "negative", "special",
        "aromatic"]
    assert track.colour(4) == CLASS_COLOUR["positive"] and track.describe(4) == \
        "vh 5 LYS (positive)"
    assert tracks_of(dna)[0].describe(0) == "dna 1 A (nucleotide)"
    assert tracks_of(None) == [] and residue_class("X") == "other"


def test_pdb_chains_become_tracks_with_their_residue_numbers(tmp_path):
    structure = read_pdb(peptide_pdb(tmp_path / "pep.pdb")).records[0]
    tracks = tracks_of(structure)
    assert [(t.label, t.sequence) for t in tracks] == [("A", "MKVLAD"), ("B", "MKVLAD")]
    assert tracks[1].numbers == [1, 2, 3, 4, 5, 6] and tracks[1].describe(5) == \
        "B 6 ASP (negative)"


def test_conformer_has_every_atom_with_hydrogens_and_sensible_bonds():
    elements, coordinates, bonds = conformer("CC(C)Cc1ccc(cc1)C(C)C(=O)O")  # ibuprofen
    assert len(elements) == coordinates.shape[0] == 33 and coordinates.shape == (33, 3)
    assert elements.count("C") == 13 and elements.count("H") == 18 and len(bonds) == 33
    lengths = np.linalg.norm(coordinates[bonds[:, 0]] - coordinates[bonds[:, 1]], axis=1)
    assert lengths.min() > 0.9 and lengths.max() < 1.6  # C-H ~1.09 up to C-C ~1.52 Å
    again = conformer("CC(C)Cc1ccc(cc1)C(C)C(=O)O")[1]
    np.testing.assert_allclose(again, coordinates)  # seeded: the same conformer
    with pytest.raises(ValueError, match="not a valid SMILES"):
        conformer("C1CC")


def test_molecule_scene_from_smiles_and_from_file_coordinates():
    scene = molecule_scene("O")
    assert scene.elements == ["O", "H", "H"] and scene.lines.shape == (4, 3)
    assert tuple(scene.colours[0][:3]) == (1.0, 13 / 255, 13 / 255)  # oxygen red
    xyz = Molecule("O", coordinates=[("O", 0.0, 0.0, 0.0), ("H", 0.96, 0.0, 0.0),
                                     ("H", -0.24, 0.93, 0.0)])
    from_file = molecule_scene(xyz)
    np.testing.assert_allclose(from_file.positions[1], [0.96, 0.0, 0.0])
    assert len(from_file.lines) == 4  # two O-H bonds from distances, no H-H


def test_protein_scene_traces_ca_within_chains_and_colours(tmp_path):
    structure = read_pdb(peptide_pdb(tmp_path / "pep.pdb")).records[0]
    trace, owners = backbone_trace(structure)
    assert trace.shape == (2 * 2 * 5, 3)  # 5 CA-CA links per chain, none across chains
    assert all(structure.atoms[i].name == "CA" for i in owners)
    scene = structure_scene(structure, "chain")
    assert scene.positions.shape == (len(structure.atoms), 3) and scene.kind == "structure"
    assert len({tuple(c) for c in scene.colours}) == 2  # one colour per chain
    b_colours = atom_colours(structure, "B-factor")
    first, last = b_colours[0], b_colours[-1]  # residue 1 is bluest, residue 6 reddest
    assert first[2] > first[0] and last[0] > last[2]
    with pytest.raises(ValueError, match="colour mode"):
        atom_colours(structure, "rainbow")


def test_kabsch_rmsd_of_a_rotated_copy_is_zero_and_of_a_changed_one_is_not():
    rng = np.random.default_rng(0)
    points = rng.normal(size=(20, 3)) * 5
    angle = 0.7
    rotation = np.array([[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0],
                         [0, 0, 1]]) @ np.array([[1, 0, 0], [0, 0, -1], [0, 1, 0]])
    moved = points @ rotation.T + [3.0, -2.0, 8.0]
    rmsd, found_rotation, translation = kabsch(points, moved)
    assert rmsd < 1e-9 and np.allclose(found_rotation, rotation)
    np.testing.assert_allclose(points @ found_rotation.T + translation, moved, atol=1e-9)
    mirrored = points * [1, 1, -1]  # a mirror image is not superposable by a rotation
    assert kabsch(points, mirrored)[0] > 1.0
    noisy = moved + rng.normal(scale=0.1, size=moved.shape)
    assert 0.05 < kabsch(points, noisy)[0] < 0.2
    with pytest.raises(ValueError, match="at least 3"):
        kabsch(points[:2], moved[:2])


def test_superposing_two_chains_and_two_conformers(tmp_path):
    structure = read_pdb(peptide_pdb(tmp_path / "pep.pdb", chains="A")).records[0]
    other = read_pdb(peptide_pdb(tmp_path / "other.pdb", chains="A", seed=11)).records[0]
    same_a, same_b = paired_ca(structure, structure)
    assert len(same_a) == 6 and kabsch(same_a, same_b)[0] < 1e-9
    assert kabsch(*paired_ca(structure, other))[0] > 0.1  # another embedding
    first, second = molecule_scene("CCCCO", seed=1), molecule_scene("CCCCO", seed=2)
    heavy_a, heavy_b = paired_atoms(first, second)
    assert heavy_a.shape == (5, 3) and kabsch(heavy_a, heavy_a)[0] < 1e-9
    with pytest.raises(ValueError, match="same molecule"):
        paired_atoms(first, molecule_scene("CCO"))
