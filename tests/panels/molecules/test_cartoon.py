"""The cartoon: helix/strand/coil from CA geometry on ideal helices and strands, a spline that
passes through every CA, and a tube mesh whose rings sit at their radius around it."""

from __future__ import annotations

import numpy as np
import pytest

from engine.io.molecules import Atom, Structure
from panels.molecules.geometry import (
    SS_COLOUR,
    TUBE_RADIUS,
    TUBE_SAMPLES,
    TUBE_SIDES,
    atom_colours,
    ca_segments,
    catmull_rom,
    rgba,
    secondary_structure,
    structure_scene,
)


def ideal_helix(n: int) -> np.ndarray:
    """An alpha helix's CA atoms: radius 2.3 Å, 100° and 1.5 Å per residue."""
    turn = np.radians(100.0) * np.arange(n)
    return np.stack([2.3 * np.cos(turn), 2.3 * np.sin(turn), 1.5 * np.arange(n)], 1)


def ideal_strand(n: int) -> np.ndarray:
    """A beta strand's CA atoms: 3.3 Å per residue along x, a 3.8 Å CA-CA zigzag."""
    return np.stack([3.3 * np.arange(n), 0.94 * (-1.0) ** np.arange(n), np.zeros(n)], 1)


def test_helix_strand_and_coil_from_ca_distances():
    assert secondary_structure(ideal_helix(12)) == ["H"] * 12
    assert secondary_structure(ideal_strand(8)) == ["E"] * 8
    rng = np.random.default_rng(0)
    steps = rng.normal(size=(10, 3))
    coil = np.cumsum(3.8 * steps / np.linalg.norm(steps, axis=1, keepdims=True), 0)
    assert secondary_structure(coil).count("H") == 0
    assert secondary_structure(ideal_helix(3)) == ["C"] * 3  # too short to tell


def test_the_spline_passes_through_every_ca():
    points = ideal_helix(7)
    curve, owners = catmull_rom(points)
    assert len(curve) == 6 * TUBE_SAMPLES + 1
    np.testing.assert_allclose(curve[::TUBE_SAMPLES], points, atol=1e-9)
    assert owners[0] == 0 and owners[-1] == 6 and owners[TUBE_SAMPLES] == 1
    assert np.linalg.norm(np.diff(curve, axis=0), axis=1).max() < 3.8 / 2  # smooth, no jumps


def helix_structure(chains: str = "AB") -> Structure:
    atoms = []
    for shift, chain in enumerate(chains):
        for i, (x, y, z) in enumerate(ideal_helix(12)):
            atoms.append(Atom(len(atoms) + 1, "CA", "ALA", chain, i + 1, x + 40 * shift, y, z,
                              "C", 10.0 * i, False))
            atoms.append(Atom(len(atoms) + 1, "CB", "ALA", chain, i + 1, x + 40 * shift + 1.0,
                              y, z, "C", 10.0 * i, False))
    return Structure("helices", atoms)


def test_the_tube_mesh_rings_sit_at_their_radius_and_follow_the_frame():
    structure = helix_structure()
    assert [len(s) for s in ca_segments(structure)] == [12, 12]  # one run per chain
    scene = structure_scene(structure, "chain")
    cartoon = scene.cartoon()
    rings = 11 * TUBE_SAMPLES + 1
    assert cartoon.vertices.shape == (2 * rings * TUBE_SIDES, 3)
    assert cartoon.faces.max() == len(cartoon.vertices) - 1 and cartoon.faces.min() == 0
    assert len(cartoon.faces) == 2 * 2 * (rings - 1) * TUBE_SIDES
    curve, _ = catmull_rom(scene.positions[ca_segments(structure)[0]])
    middle = rings // 2  # well inside the helix: the full helix radius
    ring = cartoon.vertices[middle * TUBE_SIDES:(middle + 1) * TUBE_SIDES]
    np.testing.assert_allclose(np.linalg.norm(ring - curve[middle], axis=1), TUBE_RADIUS["H"],
                               rtol=1e-6)
    colours = cartoon.colours
    assert np.allclose(colours[0], rgba("#1f77b4")) and np.allclose(colours[-1],
                                                                    rgba("#ff7f0e"))
    moved = scene.with_positions(scene.positions + [0.0, 0.0, 5.0]).cartoon()
    np.testing.assert_allclose(moved.vertices, cartoon.vertices + [0.0, 0.0, 5.0], atol=1e-9)


def test_secondary_structure_colouring():
    structure = helix_structure("A")
    colours = atom_colours(structure, "secondary structure")
    assert np.allclose(colours, rgba(SS_COLOUR["H"]))  # CB atoms take their residue's state
    with pytest.raises(ValueError, match="colour mode"):
        atom_colours(structure, "rainbow")
