"""Crowd previewer: coarse, generated and real clips played side by side in sync, with
trajectory overlays, and the C2R methods (simulate, train, generate, reproduce)."""

from panels.api import PanelManifest

MANIFEST = PanelManifest(
    id="crowd",
    title="Crowd previewer",
    factory="panels.crowd.view:CrowdPanel",
    formats=("trajectories", "video", "frames", "crowd-scene"),
    methods=("c2r.",),
    exports=("png",),
    papers=("c2r",),
)
