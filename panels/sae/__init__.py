"""SAE feature browser: train sparse autoencoders across seeds with or without the PC1 bypass
(sae_pc1), then browse features by importance, density and cross-seed reproducibility."""

from panels.api import PanelManifest

MANIFEST = PanelManifest(
    id="sae",
    title="SAE features",
    factory="panels.sae.view:SAEPanel",
    formats=("sae",),
    methods=("sae_pc1.",),
    exports=("html", "png", "svg", "pdf", "json"),
    papers=("sae_pc1",),
)
