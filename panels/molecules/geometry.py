"""3-D geometry without OpenGL: conformers, ball-and-stick and backbone scenes as numpy
arrays, and Kabsch superposition (RMSD).

A ``Scene`` is what the 3-D view draws: atom positions with a colour and a size each, and
line segments (bonds, or the CA trace of a protein) as consecutive pairs of points. Building
one needs RDKit (small molecules, ETKDG) or a parsed ``Structure``; drawing it needs OpenGL,
so everything here is testable headless.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.io.molecules import Molecule, Structure, parse_smiles

# CPK-like colours and ball radii (Å, drawn scaled) per element; other elements are pink.
ELEMENT_COLOUR = {
    "H": "#e8e8e8", "C": "#808080", "N": "#3050f8", "O": "#ff0d0d", "F": "#90e050",
    "Cl": "#1ff01f", "Br": "#a62929", "I": "#940094", "S": "#ffd030", "P": "#ff8000",
    "B": "#ffb5b5", "Si": "#f0c8a0", "Na": "#ab5cf2", "K": "#8f40d4", "Mg": "#8aff00",
    "Fe": "#e06633", "Zn": "#7d80b0", "Ca": "#3dff00", "Se": "#ffa100",
}
OTHER_COLOUR = "#ff69b4"
COVALENT_RADIUS = {"H": 0.31, "C": 0.76, "N": 0.71, "O": 0.66, "F": 0.57, "Cl": 1.02,
                   "Br": 1.20, "I": 1.39, "S": 1.05, "P": 1.07, "B": 0.84, "Si": 1.11}
CHAIN_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                 "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
CA_BREAK = 4.2  # Å: consecutive CA atoms farther apart than this are not joined
BOND_TOLERANCE = 1.25  # a bond where the distance is below this times the radii's sum
COLOUR_MODES = ("element", "chain", "B-factor")


def rgba(colour: str, alpha: float = 1.0) -> tuple[float, float, float, float]:
    """``#rrggbb`` as floats in 0..1."""
    value = colour.lstrip("#")
    return (*(int(value[i:i + 2], 16) / 255 for i in (0, 2, 4)), alpha)


@dataclass
class Scene:
    """Atoms (positions ``(n, 3)``, RGBA ``(n, 4)``, sizes ``(n,)``) and line segments
    (``(2m, 3)`` points, each consecutive pair one segment, RGBA per point)."""

    elements: list[str]
    positions: np.ndarray
    colours: np.ndarray
    sizes: np.ndarray
    lines: np.ndarray
    line_colours: np.ndarray
    kind: str = "molecule"  # or "structure"

    @property
    def centre(self) -> np.ndarray:
        return self.positions.mean(0) if len(self.positions) else np.zeros(3)

    @property
    def extent(self) -> float:
        """The largest distance from the centre (for framing the camera)."""
        if not len(self.positions):
            return 1.0
        return float(np.linalg.norm(self.positions - self.centre, axis=1).max()) or 1.0

    def moved(self, rotation: np.ndarray, translation: np.ndarray) -> Scene:
        """The scene with every point ``x`` moved to ``x @ rotation.T + translation``."""
        return Scene(self.elements, self.positions @ rotation.T + translation, self.colours,
                     self.sizes, self.lines @ rotation.T + translation if len(self.lines)
                     else self.lines, self.line_colours, self.kind)


# -- small molecules ---------------------------------------------------------------------------

def conformer(smiles: str, seed: int = 42) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(elements, coordinates ``(n, 3)`` in Å, bonds ``(m, 2)``) of an ETKDG conformer with
    explicit hydrogens. ``ValueError`` for an invalid SMILES or a failed embedding."""
    from rdkit import Chem
    from rdkit.Chem import AllChem

    mol = parse_smiles(smiles)
    if mol is None:
        raise ValueError(f"not a valid SMILES: {smiles!r}")
    mol = Chem.AddHs(mol)
    params = AllChem.ETKDGv3()
    params.randomSeed = seed
    if AllChem.EmbedMolecule(mol, params) != 0:
        params.useRandomCoords = True  # big or strained ring systems embed from random start
        if AllChem.EmbedMolecule(mol, params) != 0:
            raise ValueError(f"RDKit could not embed a conformer of {smiles!r}")
    coordinates = np.asarray(mol.GetConformer().GetPositions(), dtype=float)
    bonds = np.array([(b.GetBeginAtomIdx(), b.GetEndAtomIdx()) for b in mol.GetBonds()],
                     dtype=int).reshape(-1, 2)
    return [atom.GetSymbol() for atom in mol.GetAtoms()], coordinates, bonds


def distance_bonds(elements: list[str], coordinates: np.ndarray) -> np.ndarray:
    """Bonds perceived from distances (covalent radii): for coordinates read from a file."""
    radii = np.array([COVALENT_RADIUS.get(e, 0.8) for e in elements])
    distances = np.linalg.norm(coordinates[:, None] - coordinates[None], axis=-1)
    limit = BOND_TOLERANCE * (radii[:, None] + radii[None])
    first, second = np.nonzero(np.triu((distances < limit) & (distances > 0.1), k=1))
    return np.stack([first, second], axis=1)


def ball_and_stick(elements: list[str], coordinates: np.ndarray, bonds: np.ndarray) -> Scene:
    """Atoms coloured by element (hydrogens smaller), bonds as grey sticks."""
    colours = np.array([rgba(ELEMENT_COLOUR.get(e, OTHER_COLOUR)) for e in elements])
    sizes = np.array([0.25 if e == "H" else 0.4 for e in elements])
    lines = coordinates[bonds.reshape(-1)] if len(bonds) else np.zeros((0, 3))
    line_colours = np.tile(rgba("#b0b0b0"), (len(lines), 1))
    return Scene(list(elements), coordinates, colours, sizes, lines, line_colours)


def molecule_scene(molecule: Molecule | str, seed: int = 42) -> Scene:
    """A small molecule in 3-D: the file's own coordinates (XYZ) when it has them, else an
    ETKDG conformer."""
    if isinstance(molecule, Molecule) and molecule.coordinates:
        elements = [atom[0] for atom in molecule.coordinates]
        coordinates = np.array([atom[1:] for atom in molecule.coordinates], dtype=float)
        return ball_and_stick(elements, coordinates, distance_bonds(elements, coordinates))
    smiles = molecule.smiles if isinstance(molecule, Molecule) else molecule
    return ball_and_stick(*conformer(smiles, seed))


# -- proteins ----------------------------------------------------------------------------------

def _b_factor_colours(values: np.ndarray) -> np.ndarray:
    """Blue (low) to white to red (high) over the structure's own B-factor range."""
    low, high = float(values.min()), float(values.max())
    t = (values - low) / (high - low) if high > low else np.full(len(values), 0.5)
    blue, white, red = np.array(rgba("#3b4cc0")), np.ones(4), np.array(rgba("#b40426"))
    lower = blue + (white - blue) * (2 * t[:, None])
    upper = white + (red - white) * (2 * t[:, None] - 1)
    return np.where(t[:, None] < 0.5, lower, upper)


def atom_colours(structure: Structure, mode: str = "chain") -> np.ndarray:
    """RGBA per atom: by ``element``, ``chain`` (a colour per chain) or ``B-factor``."""
    if mode not in COLOUR_MODES:
        raise ValueError(f"colour mode must be one of {COLOUR_MODES}, not {mode!r}")
    atoms = structure.atoms
    if mode == "element":
        return np.array([rgba(ELEMENT_COLOUR.get(a.element, OTHER_COLOUR)) for a in atoms])
    if mode == "B-factor":
        return _b_factor_colours(np.array([a.b_factor for a in atoms], dtype=float))
    chains = list(dict.fromkeys(a.chain for a in atoms))
    return np.array([rgba(CHAIN_COLOURS[chains.index(a.chain) % len(CHAIN_COLOURS)])
                     for a in atoms])


def backbone_trace(structure: Structure) -> tuple[np.ndarray, list[int]]:
    """Segments joining consecutive CA atoms of each chain (``(2m, 3)``), and for each
    segment point the index of its atom (for colouring). Chain breaks are not bridged."""
    points, owners = [], []
    previous = None
    for index, atom in enumerate(structure.atoms):
        if atom.name != "CA" or atom.hetero:
            continue
        here = np.array([atom.x, atom.y, atom.z])
        if previous is not None and previous[0] == atom.chain and \
                np.linalg.norm(here - previous[1]) <= CA_BREAK:
            points += [previous[1], here]
            owners += [previous[2], index]
        previous = (atom.chain, here, index)
    return np.array(points, dtype=float).reshape(-1, 3), owners


def residue_atoms(structure: Structure, chain: str, number: int) -> list[int]:
    """Indices of one residue's atoms (the sequence strip's selection, found in 3-D)."""
    return [i for i, a in enumerate(structure.atoms)
            if a.chain == chain and a.residue_number == number and not a.hetero]


def structure_scene(structure: Structure, mode: str = "chain") -> Scene:
    """Every atom as a small sphere and the CA trace as thick lines, coloured by ``mode``."""
    colours = atom_colours(structure, mode)
    positions = np.array([(a.x, a.y, a.z) for a in structure.atoms], dtype=float)
    sizes = np.where([a.name == "CA" for a in structure.atoms], 0.9, 0.5)
    lines, owners = backbone_trace(structure)
    return Scene([a.element for a in structure.atoms], positions, colours, sizes, lines,
                 colours[owners] if owners else np.zeros((0, 4)), "structure")


# -- superposition -----------------------------------------------------------------------------

def kabsch(moving: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """The rotation and translation that best superpose ``moving`` on ``target`` (both
    ``(n, 3)``, rows paired), and the RMSD after it: (rmsd, rotation, translation) with
    ``moving @ rotation.T + translation`` ≈ ``target``. Proper rotations only (no mirror)."""
    moving, target = np.asarray(moving, dtype=float), np.asarray(target, dtype=float)
    if moving.shape != target.shape or moving.ndim != 2 or moving.shape[1] != 3:
        raise ValueError(f"superposition needs two (n, 3) arrays of one shape, got "
                         f"{moving.shape} and {target.shape}")
    if len(moving) < 3:
        raise ValueError("superposition needs at least 3 paired points")
    moving_centre, target_centre = moving.mean(0), target.mean(0)
    covariance = (moving - moving_centre).T @ (target - target_centre)
    u, _, vt = np.linalg.svd(covariance)
    mirror = np.sign(np.linalg.det(vt.T @ u.T))
    rotation = vt.T @ np.diag([1.0, 1.0, mirror]) @ u.T
    translation = target_centre - moving_centre @ rotation.T
    moved = moving @ rotation.T + translation
    return float(np.sqrt(((moved - target) ** 2).sum(1).mean())), rotation, translation


def paired_ca(first: Structure, second: Structure) -> tuple[np.ndarray, np.ndarray]:
    """CA coordinates of the residues both structures have, paired by (chain, residue
    number); by order instead when that pairs fewer than 3 but the CA counts agree."""
    def cas(structure: Structure) -> dict[tuple[str, int], np.ndarray]:
        return {(a.chain, a.residue_number): np.array([a.x, a.y, a.z])
                for a in structure.atoms if a.name == "CA" and not a.hetero}

    a, b = cas(first), cas(second)
    shared = [key for key in a if key in b]
    if len(shared) >= 3:
        return np.array([a[k] for k in shared]), np.array([b[k] for k in shared])
    if len(a) == len(b):
        return np.array(list(a.values())), np.array(list(b.values()))
    raise ValueError(f"the structures share {len(shared)} residues (by chain and number) "
                     f"and have {len(a)} and {len(b)} CA atoms: nothing to superpose")


def paired_atoms(first: Scene, second: Scene) -> tuple[np.ndarray, np.ndarray]:
    """Heavy atoms of two small-molecule scenes, paired by element order; both must be the
    same molecule (same heavy-atom elements in the same order, as two conformers are)."""
    heavy_a = [i for i, e in enumerate(first.elements) if e != "H"]
    heavy_b = [i for i, e in enumerate(second.elements) if e != "H"]
    if [first.elements[i] for i in heavy_a] != [second.elements[i] for i in heavy_b]:
        raise ValueError("RMSD between molecules needs the same molecule (its atoms in one "
                         "order): two conformers or two files of one compound")
    return first.positions[heavy_a], second.positions[heavy_b]


def superpose(scene: Scene, record, pinned_scene: Scene, pinned_record
              ) -> tuple[float, int, Scene]:
    """The pinned scene moved onto ``scene`` (Kabsch on paired CA atoms for structures, heavy
    atoms for molecules): (RMSD in Å, paired points, the moved pinned scene)."""
    if isinstance(record, Structure) and isinstance(pinned_record, Structure):
        target, moving = paired_ca(record, pinned_record)
    elif scene.kind == pinned_scene.kind == "molecule":
        target, moving = paired_atoms(scene, pinned_scene)
    else:
        raise ValueError("RMSD compares two structures or two conformers of one molecule")
    rmsd, rotation, translation = kabsch(moving, target)
    return rmsd, len(target), pinned_scene.moved(rotation, translation)
