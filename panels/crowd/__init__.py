"""Crowd previewer: coarse, generated and real clips played side by side or wiped, in sync,
with trajectory overlays (burned into exports when on), per-frame metrics, exports, undoable
edits (prompt, a person's path), a scene editor (buildings, obstacles, groups, paths, camera
keyframes; simulate, render coarse), the camera path in 3-D and the C2R methods (simulate,
train, generate a frame range, reproduce)."""

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
