"""Molecules: a depiction grid with properties and Murcko scaffolds, set diversity, histograms
against a reference set, SMARTS search, nearest reference, undoable SMILES edits, residue strips
for proteins and antibodies (CDRs numbered by ANARCI), a 3-D view with RMSD superposition and a
cartoon, playback of MD, generation and sequence trajectories, and kCGM and Branching Flows
runs."""

from panels.api import PanelManifest

MANIFEST = PanelManifest(
    id="molecules",
    title="Molecules",
    factory="panels.molecules.view:MoleculesPanel",
    formats=("smiles", "sdf", "xyz", "fasta", "pdb", "mmcif", "md_topology", "md_trajectory"),
    methods=("kcgm.", "branching_flows."),
    exports=("png", "svg", "smi", "csv"),  # 3-D snapshots as png
    papers=("kcgm", "branching_flows"),
)
