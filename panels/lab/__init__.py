"""The lab: a generic workbench for any method the engine lists (forms, live curves, artifacts,
claims). The papers without a domain panel of their own live here."""

from panels.api import PanelManifest

LAB_PAPERS = (
    "eos",
    "concept_frustration",
    "hybrid_tokens",
    "discriminative_factorization",
    "pita",
    "bottleneck",
    "ccfm",
    "markovization_gap",
    "bitdance",
    "iqp_qcbm",
    "svan",
    "causal_fairness",
)

MANIFEST = PanelManifest(
    id="lab",
    title="Lab",
    factory="panels.lab.view:LabPanel",
    formats=("npy", "npz", "safetensors", "csv", "parquet", "jsonl"),
    methods=("",),  # every method: the lab runs anything the engine lists
    exports=("png", "svg", "pdf"),
    papers=LAB_PAPERS,
)
