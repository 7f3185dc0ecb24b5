"""Dialogue dynamics: transcripts beside their per-turn beliefs, and the SC-ICL closed-loop
analysis (simulated dyads, collapse maps, controllers, language-model dialogues)."""

from panels.api import PanelManifest

MANIFEST = PanelManifest(
    id="dialogue",
    title="Dialogue dynamics",
    factory="panels.dialogue.view:DialoguePanel",
    formats=("transcripts", "jsonl", "csv"),
    methods=("scicl.",),
    exports=("png", "svg", "pdf", "jsonl", "csv"),
    papers=("scicl",),
)
