"""Molecules: a depiction grid with properties and Murcko scaffolds, set diversity, histograms
against a reference set, SMARTS search, nearest reference, undoable SMILES edits, residue strips
for proteins and antibodies, a 3-D view with RMSD superposition, and kCGM calibration runs."""

from panels.api import PanelManifest

MANIFEST = PanelManifest(
    id="molecules",
    title="Molecules",
    factory="panels.molecules.view:MoleculesPanel",
    formats=("smiles", "sdf", "xyz", "fasta", "pdb", "mmcif"),
    methods=("kcgm.",),
    exports=("png", "svg", "smi", "csv"),  # 3-D snapshots as png
    papers=("kcgm",),
)
