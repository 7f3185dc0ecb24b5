"""A small real ``sae_pc1.train`` run for tests that open the SAE browser on real files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from engine.context import JobContext
from engine.methods import sae_pc1

WORDS = ["alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "green"]


def make_sae_run(root: Path) -> Path:
    """Synthetic activations with word tokens, 2 seeds x raw/bypass, trained into
    ``root/run`` (run id ``r``, seed 0) in a few seconds."""
    x, _, _ = sae_pc1.synthetic_activations(1200, seed=1)
    np.save(root / "acts.npy", x)
    (root / "tokens.json").write_text(json.dumps([WORDS[i % 8] for i in range(len(x))]))
    params = sae_pc1.Params(source="files", d_sae=48, k=4, seeds=2, steps=40, batch_size=256,
                            aux_k=8, top_n=5, contexts=3, context_window=2,
                            importance_sequences=0)
    folder = root / "run"
    sae_pc1.run_train(JobContext("r", folder, emit=lambda e: None, seed=0), params,
                      {"activations": str(root / "acts.npy"),
                       "tokens": str(root / "tokens.json")})
    return folder
