"""Molecules: a depiction grid with properties, histograms against a reference set, SMARTS
search, nearest reference, undoable SMILES edits, and kCGM calibration runs."""

from panels.api import PanelManifest

MANIFEST = PanelManifest(
    id="molecules",
    title="Molecules",
    factory="panels.molecules.view:MoleculesPanel",
    formats=("smiles", "sdf", "xyz", "fasta", "pdb", "mmcif"),
    methods=("kcgm.",),
    exports=("png", "svg", "smi", "csv"),
    papers=("kcgm",),
)
