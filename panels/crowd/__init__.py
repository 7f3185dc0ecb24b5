"""Crowd previewer: coarse, generated and real clips played side by side or wiped, in sync,
with trajectory overlays, per-frame metrics, exports, undoable edits (prompt, a person's path)
and the C2R methods (simulate, train, generate a frame range, reproduce)."""

from panels.api import PanelManifest

MANIFEST = PanelManifest(
    id="crowd",
    title="Crowd previewer",
    factory="panels.crowd.view:CrowdPanel",
    formats=("trajectories", "video", "frames", "crowd-scene"),
    methods=("c2r.",),
    exports=("png", "mp4", "gif", "csv"),
    papers=("c2r",),
)
