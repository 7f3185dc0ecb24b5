"""Molecules: a depiction grid with properties and Murcko scaffolds, set diversity, histograms
against a reference set, SMARTS search, nearest reference, undoable SMILES edits, residue strips
for proteins and antibodies (CDRs numbered by ANARCI), a 3-D view with RMSD superposition and a
cartoon, playback of MD, generation and sequence trajectories, and kCGM and Branching Flows
runs. Exports: the grid, histograms and 3-D snapshots as figures; the selected rows as
SMILES, CSV, SDF, FASTA or PDB."""

from panels.api import PanelManifest

MANIFEST = PanelManifest(
    id="molecules",
    title="Molecules",
    factory="panels.molecules.view:MoleculesPanel",
    formats=("smiles", "sdf", "xyz", "fasta", "pdb", "mmcif", "md_topology", "md_trajectory"),
    methods=("kcgm.", "branching_flows."),
    # the grid (png, svg), histograms (png, svg, pdf), 3-D snapshots (png); the selected rows
    # as smi, csv, sdf, fasta or pdb
    exports=("png", "svg", "pdf", "smi", "csv", "sdf", "fasta", "pdb"),
    papers=("kcgm", "branching_flows"),
)
