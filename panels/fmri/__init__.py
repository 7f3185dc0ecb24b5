"""The fMRI 4D viewer: NIfTI files and BIDS folders as three linked slices or a lightbox, a
time axis, an overlay on the anatomy, ROIs and their connectivity (FSLeyes-style), and
BrainWorld generations beside the real run as editable layers."""

from panels.api import PanelManifest

MANIFEST = PanelManifest(
    id="fmri",
    title="fMRI 4D viewer",
    factory="panels.fmri.view:FmriPanel",
    formats=("nifti", "bids"),
    methods=("brainworld.",),
    exports=("png", "svg", "pdf", "mp4"),
    papers=("brainworld",),
)
