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
COLOUR_MODES = ("element", "chain", "B-factor", "secondary structure")
# Secondary structure from CA geometry alone (P-SEA's distance criteria, Labesse et al. 1997):
# the CA(i)-CA(i+2), (i+3) and (i+4) distances (Å) of a helix and of a strand, with tolerances.
HELIX_DISTANCES = ((5.5, 0.5), (5.3, 0.5), (6.4, 0.6))
STRAND_DISTANCES = ((6.7, 0.6), (9.9, 0.9), (12.4, 1.1))
MIN_HELIX, MIN_STRAND = 4, 3  # shorter runs are coil
SS_COLOUR = {"H": "#e0407b", "E": "#f2c14e", "C": "#b0b0b0"}
TUBE_RADIUS = {"H": 1.1, "E": 0.8, "C": 0.35}  # Å: helices and strands read as thicker tube
TUBE_SIDES, TUBE_SAMPLES = 10, 6  # vertices around the tube; spline points per residue
STYLES = ("atoms + trace", "cartoon", "cartoon + atoms")  # how the 3-D view draws a protein


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
    line_atoms: np.ndarray | None = None  # the atom at each line point (to move them along)
    tube: Tube | None = None  # a protein's cartoon: which CA atoms, with colours and radii

    def cartoon(self) -> Cartoon | None:
        """The cartoon mesh through this scene's CA positions (``None`` for molecules)."""
        return None if self.tube is None else self.tube.mesh(self.positions)

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
                     else self.lines, self.line_colours, self.kind, self.line_atoms, self.tube)

    def with_positions(self, positions: np.ndarray) -> Scene:
        """The same atoms, bonds and colours at new coordinates (a trajectory's frame)."""
        positions = np.asarray(positions, dtype=float)
        if positions.shape != self.positions.shape:
            raise ValueError(f"a frame of {len(positions)} atoms for a scene of "
                             f"{len(self.positions)}")
        lines = positions[self.line_atoms] if self.line_atoms is not None else self.lines
        return Scene(self.elements, positions, self.colours, self.sizes, lines,
                     self.line_colours, self.kind, self.line_atoms, self.tube)


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
    colours = np.array([rgba(ELEMENT_COLOUR.get(e, OTHER_COLOUR)) for e in elements]
                       ).reshape(-1, 4)
    sizes = np.array([0.25 if e == "H" else 0.4 for e in elements], dtype=float)
    lines = coordinates[bonds.reshape(-1)] if len(bonds) else np.zeros((0, 3))
    line_colours = np.tile(rgba("#b0b0b0"), (len(lines), 1))
    return Scene(list(elements), np.asarray(coordinates, dtype=float).reshape(-1, 3), colours,
                 sizes, lines, line_colours, line_atoms=np.asarray(bonds, dtype=int).reshape(-1))


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


def _secondary_colours(structure: Structure) -> np.ndarray:
    """Each atom in its residue's helix/strand/coil colour (hetero atoms as coil)."""
    positions = np.array([(a.x, a.y, a.z) for a in structure.atoms], dtype=float)
    state_of: dict[tuple[str, int], str] = {}
    for segment in ca_segments(structure):
        for index, state in zip(segment, secondary_structure(positions[segment]), strict=True):
            atom = structure.atoms[index]
            state_of[atom.chain, atom.residue_number] = state
    return np.array([rgba(SS_COLOUR[state_of.get((a.chain, a.residue_number), "C")])
                     for a in structure.atoms])


def atom_colours(structure: Structure, mode: str = "chain") -> np.ndarray:
    """RGBA per atom: by ``element``, ``chain`` (a colour per chain) or ``B-factor``."""
    if mode not in COLOUR_MODES:
        raise ValueError(f"colour mode must be one of {COLOUR_MODES}, not {mode!r}")
    atoms = structure.atoms
    if mode == "element":
        return np.array([rgba(ELEMENT_COLOUR.get(a.element, OTHER_COLOUR)) for a in atoms])
    if mode == "B-factor":
        return _b_factor_colours(np.array([a.b_factor for a in atoms], dtype=float))
    if mode == "secondary structure":
        return _secondary_colours(structure)
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
    """Every atom as a small sphere and the CA trace as thick lines, coloured by ``mode``;
    the cartoon tube (drawn instead of or beside them) follows the same colours."""
    colours = atom_colours(structure, mode)
    positions = np.array([(a.x, a.y, a.z) for a in structure.atoms], dtype=float)
    sizes = np.where([a.name == "CA" for a in structure.atoms], 0.9, 0.5)
    lines, owners = backbone_trace(structure)
    segments = ca_segments(structure)
    states = {int(i): state for segment in segments for i, state in zip(
        segment, secondary_structure(positions[segment]), strict=True)}
    tube = Tube(segments, {i: colours[i] for i in states},
                {i: TUBE_RADIUS[state] for i, state in states.items()})
    return Scene([a.element for a in structure.atoms], positions, colours, sizes, lines,
                 colours[owners] if owners else np.zeros((0, 4)), "structure",
                 np.asarray(owners, dtype=int), tube)


# -- cartoon -----------------------------------------------------------------------------------

def ca_segments(structure: Structure) -> list[np.ndarray]:
    """Atom indices of each unbroken run of CA atoms (one chain, no gap over ``CA_BREAK``)."""
    segments: list[list[int]] = []
    previous = None
    for index, atom in enumerate(structure.atoms):
        if atom.name != "CA" or atom.hetero:
            continue
        here = np.array([atom.x, atom.y, atom.z])
        joined = previous is not None and previous[0] == atom.chain and \
            np.linalg.norm(here - previous[1]) <= CA_BREAK
        if joined:
            segments[-1].append(index)
        else:
            segments.append([index])
        previous = (atom.chain, here)
    return [np.array(segment, dtype=int) for segment in segments]


def secondary_structure(ca: np.ndarray) -> list[str]:
    """``H`` (helix), ``E`` (strand) or ``C`` (coil) per residue of one CA run, from the
    CA(i)-CA(i+k) distances for k = 2, 3, 4 alone (no hydrogen bonds, so an isolated
    extended stretch reads as strand too). Runs shorter than a helical turn or three strand
    residues are coil."""
    ca = np.asarray(ca, dtype=float)
    n = len(ca)
    states = ["C"] * n

    def fits(start: int, targets: tuple) -> bool:
        return all(start + k < n and abs(np.linalg.norm(ca[start + k] - ca[start]) - mean)
                   <= tolerance for k, (mean, tolerance) in zip((2, 3, 4), targets, strict=True))

    for start in range(n - 4):
        if fits(start, HELIX_DISTANCES):
            states[start:start + 5] = ["H"] * 5
    for start in range(n - 4):
        if fits(start, STRAND_DISTANCES) and "H" not in states[start:start + 5]:
            states[start:start + 5] = ["E"] * 5
    return _drop_short_runs(states)


def _drop_short_runs(states: list[str]) -> list[str]:
    out, start = list(states), 0
    while start < len(out):
        end = start
        while end < len(out) and out[end] == out[start]:
            end += 1
        shortest = {"H": MIN_HELIX, "E": MIN_STRAND}.get(out[start], 0)
        if end - start < shortest:
            out[start:end] = ["C"] * (end - start)
        start = end
    return out


def catmull_rom(points: np.ndarray, samples: int = TUBE_SAMPLES) -> tuple[np.ndarray, np.ndarray]:
    """A smooth curve through every point (uniform Catmull-Rom), ``samples`` points per span,
    and for each curve point the index of the nearest control point (for its colour)."""
    points = np.asarray(points, dtype=float)
    if len(points) < 2:
        return points.copy(), np.arange(len(points))
    padded = np.vstack([2 * points[0] - points[1], points, 2 * points[-1] - points[-2]])
    p0, p1, p2, p3 = (padded[k:k + len(points) - 1, None] for k in range(4))  # (spans, 1, 3)
    t = np.linspace(0.0, 1.0, samples, endpoint=False)[None, :, None]
    spans = 0.5 * (2 * p1 + (p2 - p0) * t + (2 * p0 - 5 * p1 + 4 * p2 - p3) * t ** 2 +
                   (3 * p1 - p0 - 3 * p2 + p3) * t ** 3)
    curve = np.vstack([spans.reshape(-1, 3), points[-1:]])
    owners = np.minimum(np.round(np.arange(len(curve)) / samples).astype(int), len(points) - 1)
    return curve, owners


@dataclass
class Cartoon:
    """A triangle mesh: vertices ``(v, 3)``, faces ``(f, 3)`` and a colour per vertex."""

    vertices: np.ndarray
    faces: np.ndarray
    colours: np.ndarray


@dataclass
class Tube:
    """What the cartoon needs besides coordinates: the CA runs, and per CA its colour and
    radius (thicker through helices and strands)."""

    segments: list[np.ndarray]
    colours: dict[int, np.ndarray]
    radii: dict[int, float]

    def mesh(self, positions: np.ndarray, sides: int = TUBE_SIDES) -> Cartoon:
        """A tube along a spline through each run's CA atoms at ``positions``; rings are
        oriented by parallel transport, so the tube does not twist."""
        vertices, faces, colours = [], [], []
        angles = np.linspace(0.0, 2 * np.pi, sides, endpoint=False)
        for segment in (s for s in self.segments if len(s) >= 2):
            curve, owners = catmull_rom(positions[segment])
            radius = _smooth(np.array([self.radii[int(i)] for i in segment])[owners])
            normals, binormals = _transported_frames(curve)
            ring = (np.cos(angles)[None, :, None] * normals[:, None] +
                    np.sin(angles)[None, :, None] * binormals[:, None]) * radius[:, None, None]
            base = sum(len(v) for v in vertices)
            vertices.append((curve[:, None] + ring).reshape(-1, 3))
            palette = np.array([self.colours[int(i)] for i in segment])
            colours.append(np.repeat(palette[owners], sides, axis=0))
            faces.append(_tube_faces(len(curve), sides) + base)
        if not vertices:
            return Cartoon(np.zeros((0, 3)), np.zeros((0, 3), dtype=int), np.zeros((0, 4)))
        return Cartoon(np.vstack(vertices), np.vstack(faces), np.vstack(colours))


def _smooth(values: np.ndarray, width: int = TUBE_SAMPLES) -> np.ndarray:
    """A moving average, so the radius swells and narrows rather than jumping."""
    if len(values) < width:
        return values
    padded = np.pad(values, (width // 2, width - 1 - width // 2), mode="edge")
    return np.convolve(padded, np.ones(width) / width, mode="valid")


def _transported_frames(curve: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit normals and binormals along the curve (rotation-minimising frames)."""
    tangents = np.gradient(curve, axis=0)
    tangents /= np.maximum(np.linalg.norm(tangents, axis=1, keepdims=True), 1e-9)
    start = np.cross(tangents[0], [0.0, 0.0, 1.0])
    if np.linalg.norm(start) < 1e-6:
        start = np.cross(tangents[0], [0.0, 1.0, 0.0])
    normal = list(start / np.linalg.norm(start))
    normals = [normal]
    for tx, ty, tz in tangents[1:].tolist():  # plain floats: a numpy call per point is slow
        along = normal[0] * tx + normal[1] * ty + normal[2] * tz
        px, py, pz = normal[0] - along * tx, normal[1] - along * ty, normal[2] - along * tz
        length = (px * px + py * py + pz * pz) ** 0.5
        if length > 1e-9:
            normal = [px / length, py / length, pz / length]
        normals.append(normal)
    normals = np.array(normals)
    return normals, np.cross(tangents, normals)


def _tube_faces(rings: int, sides: int) -> np.ndarray:
    """Two triangles per quad between consecutive rings."""
    ring = np.arange(rings - 1)[:, None] * sides
    side = np.arange(sides)[None, :]
    a, b = ring + side, ring + (side + 1) % sides
    c, d = a + sides, b + sides
    return np.stack([np.stack([a, b, c], -1), np.stack([b, d, c], -1)], 2).reshape(-1, 3)


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
