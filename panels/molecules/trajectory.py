"""Trajectories to play back: molecular dynamics (a topology and its frames, read with
MDAnalysis), generation trajectories whose atom count changes from frame to frame (multi-frame
XYZ), and sequence trajectories whose length changes (FASTA records headed ``>t=<time>``).

A ``Trajectory`` holds every frame in memory (read on a worker thread) and gives the 3-D scene
or the sequence of frame ``k``, plus one curve to plot against the frames: the RMSD to frame 0
(MD, CA atoms after Kabsch superposition), the atom count (generation) or the length
(sequences). Headless: no Qt, no OpenGL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.io import FormatError
from engine.io.molecules import (
    MD_TOPOLOGY_EXTENSIONS,
    MD_TRAJECTORY_EXTENSIONS,
    Atom,
    Sequence,
    Structure,
    check_md_file,
    frame_time,
    quiet_mdanalysis,
    read_xyz_frames,
)
from panels.molecules.geometry import (
    Scene,
    ball_and_stick,
    distance_bonds,
    kabsch,
    structure_scene,
)

TOPOLOGY_EXTENSIONS = (*MD_TOPOLOGY_EXTENSIONS, ".pdb")  # a PDB is a structure and a topology
TRAJECTORY_EXTENSIONS = (*MD_TRAJECTORY_EXTENSIONS, ".nc", ".netcdf")
MAX_MD_VALUES = 400_000_000  # coordinates kept in memory (1.6 GB of float32); more are strided


@dataclass
class Trajectory:
    """Frames of one of three kinds: ``md`` (``coordinates`` ``(frames, atoms, 3)`` over one
    ``structure``), ``generation`` (``frames`` of ``(elements, (n, 3))``, n changing) or
    ``sequence`` (``sequences``, lengths changing)."""

    kind: str
    name: str
    times: list[float | None]
    curve: tuple[str, np.ndarray]  # (y label, one value per frame)
    structure: Structure | None = None
    coordinates: np.ndarray | None = None
    frames: list[tuple[list[str], np.ndarray]] = field(default_factory=list)
    sequences: list[str] = field(default_factory=list)
    stride: int = 1  # MD: every stride-th frame of the file was kept
    time_label: str = "t"  # the x axis of the curve when frames have times
    _base: dict[str, Scene] = field(default_factory=dict)  # MD: frame 0's scene per colouring

    def __len__(self) -> int:
        return len(self.times)

    @property
    def three_d(self) -> bool:
        return self.kind in ("md", "generation")

    def scene(self, index: int, mode: str = "chain") -> Scene:
        """Frame ``index`` in 3-D: the MD structure moved to its coordinates (colours by
        ``mode``), or a generation frame in ball-and-stick with bonds from distances."""
        if self.kind == "md":
            if mode not in self._base:
                self._base[mode] = structure_scene(self.structure, mode)
            return self._base[mode].with_positions(self.coordinates[index])
        if self.kind == "generation":
            elements, coordinates = self.frames[index]
            return ball_and_stick(elements, coordinates, distance_bonds(elements, coordinates))
        raise ValueError("a sequence trajectory has no 3-D frames")

    def describe(self, index: int) -> str:
        """``frame 3/98 · t=0.350 · 23 atoms · RMSD 1.20 Å`` for the player's label."""
        parts = [f"frame {index + 1}/{len(self)}"]
        if self.times[index] is not None:
            parts.append(f"t={self.times[index]:.3f}")
        if self.kind == "generation":
            parts.append(f"{len(self.frames[index][0])} atoms")
        elif self.kind == "sequence":
            parts.append(f"{len(self.sequences[index])} residues")
        else:
            parts.append(f"RMSD {self.curve[1][index]:.2f} Å")
        return " · ".join(parts)


# -- molecular dynamics ------------------------------------------------------------------------

def read_md(topology: str | Path, trajectory: str | Path) -> Trajectory:
    """A topology (PSF, PRMTOP, GRO, PDB…) and its trajectory (DCD, XTC, TRR…) through
    MDAnalysis: every frame's coordinates (strided if they would not fit in memory) and the RMSD
    of the CA atoms to frame 0 after superposition. Slow for long runs: call it off the GUI
    thread."""
    import MDAnalysis

    quiet_mdanalysis()
    check_md_file(topology)  # headers declaring absurd atom counts, before any allocation
    check_md_file(trajectory)
    try:
        universe = MDAnalysis.Universe(str(topology), str(trajectory))
    except Exception as exc:  # MDAnalysis raises many kinds; the user needs the files named
        raise FormatError(Path(trajectory), f"MDAnalysis cannot read it with the topology "
                                            f"{Path(topology).name}: {exc}") from None
    atoms = universe.atoms
    frames = len(universe.trajectory)
    if frames == 0 or len(atoms) == 0:
        raise FormatError(Path(trajectory), "no frames or no atoms in it")
    stride = max(1, -(-frames * len(atoms) * 3 // MAX_MD_VALUES))
    coordinates = np.stack([ts.positions.astype(np.float32, copy=True)
                            for ts in universe.trajectory[::stride]])
    times = [float(ts.time) for ts in universe.trajectory[::stride]]
    structure = _structure_of(atoms, coordinates[0], Path(topology).stem)
    played = Trajectory("md", f"{Path(topology).stem} + {Path(trajectory).name}", times,
                        ("RMSD to frame 0 (Å, CA)", rmsd_to_first(structure, coordinates)),
                        structure=structure, coordinates=coordinates, stride=stride,
                        time_label="time (ps)")
    played.scene(0)  # the default colouring's scene, built here rather than on the GUI thread
    return played


def _structure_of(atoms, positions: np.ndarray, name: str) -> Structure:
    """The topology's atoms at frame 0's coordinates as a ``Structure`` (segment ids as
    chains; elements from the topology, else guessed from the atom name)."""
    elements = _optional(atoms, "elements")
    b_factors = _optional(atoms, "tempfactors")
    b_factors = np.zeros(len(atoms)) if b_factors is None else b_factors
    chains = _optional(atoms, "chainIDs")
    chains = atoms.segids if chains is None else chains
    found = []
    for i, (atom_name, residue, chain, number) in enumerate(zip(
            atoms.names, atoms.resnames, chains, atoms.resids, strict=True)):
        element = (elements[i] if elements is not None and elements[i] else
                   atom_name.lstrip("0123456789")[:1]).capitalize()
        x, y, z = (float(v) for v in positions[i])
        found.append(Atom(i + 1, str(atom_name), str(residue), str(chain), int(number), x, y, z,
                          element, float(b_factors[i]), False))
    return Structure(name, found, "frame 1")


def _optional(atoms, attribute: str):
    """A topology attribute, or ``None`` where the format has none (MDAnalysis raises)."""
    try:
        return getattr(atoms, attribute)
    except (AttributeError, ValueError):  # MDAnalysis' NoDataError is both
        return None


def rmsd_to_first(structure: Structure, coordinates: np.ndarray) -> np.ndarray:
    """Per frame, the RMSD of the CA atoms (all atoms when there are fewer than 3 CA) to frame
    0 after the best rotation and translation."""
    chosen = [i for i, a in enumerate(structure.atoms) if a.name == "CA"]
    if len(chosen) < 3:
        chosen = list(range(len(structure.atoms)))
    if len(chosen) < 3:
        return np.zeros(len(coordinates))
    reference = coordinates[0, chosen].astype(float)
    return np.array([kabsch(frame[chosen].astype(float), reference)[0]
                     for frame in coordinates])


# -- generation trajectories -------------------------------------------------------------------

def read_generation(path: str | Path) -> Trajectory | None:
    """A multi-frame XYZ as a trajectory (``None`` for a single frame): every frame, valid
    molecule or not, with its time and atom count."""
    frames, _ = read_xyz_frames(path)
    if len(frames) < 2:
        return None
    kept = [([e for e, *_ in f.atoms], np.array([xyz for _, *xyz in f.atoms],
                                                dtype=float).reshape(-1, 3)) for f in frames]
    counts = np.array([len(elements) for elements, _ in kept], dtype=float)
    return Trajectory("generation", Path(path).name, [f.time for f in frames],
                      ("atoms", counts), frames=kept)


def sequence_trajectory(records: list, name: str) -> Trajectory | None:
    """FASTA records all headed by a time (``>t=0.350``), two or more: a sequence trajectory
    (``None`` otherwise)."""
    sequences = [r for r in records if isinstance(r, Sequence)]
    times = [frame_time(r.name) for r in sequences]
    if len(sequences) < 2 or len(sequences) != len(records) or None in times:
        return None
    return Trajectory("sequence", name, times, ("residues", np.array(
        [len(r.sequence) for r in sequences], dtype=float)),
        sequences=[r.sequence for r in sequences])
