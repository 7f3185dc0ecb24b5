"""SAELens checkpoint folders: written, detected, inspected and read back without torch."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.io import FormatError, detect, inspect_file
from engine.io.sae import BYPASS_FILE, CFG_FILE, WEIGHTS_FILE, read_sae, write_sae


def weights(d_in: int = 6, d_sae: int = 10, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    decoder = rng.standard_normal((d_sae, d_in)).astype(np.float32)
    decoder /= np.linalg.norm(decoder, axis=1, keepdims=True)
    return {"W_enc": decoder.T.copy(), "b_enc": rng.standard_normal(d_sae).astype(np.float32),
            "W_dec": decoder, "b_dec": rng.standard_normal(d_in).astype(np.float32)}


def test_round_trip_keeps_tensors_cfg_and_bypass(tmp_path):
    tensors = weights()
    bypass = {"mean": np.arange(6, dtype=np.float32), "pc1": np.eye(6, dtype=np.float32)[2]}
    write_sae(tmp_path / "sae", tensors, {"architecture": "topk", "k": 3, "hook_name": "h.2"},
              bypass)
    sae = read_sae(tmp_path / "sae")
    for name, value in tensors.items():
        np.testing.assert_array_equal(sae.weights[name], value)
    np.testing.assert_array_equal(sae.bypass["pc1"], bypass["pc1"])
    assert (sae.architecture, sae.k, sae.hook_name) == ("topk", 3, "h.2")
    cfg = json.loads((tmp_path / "sae" / CFG_FILE).read_text())
    assert cfg["d_in"] == 6 and cfg["d_sae"] == 10 and "pc1" in cfg["pc1_bypass"]["doc"]


def test_numpy_encode_keeps_k_codes_and_applies_the_bypass(tmp_path):
    write_sae(tmp_path / "topk", weights(), {"architecture": "topk", "k": 3})
    x = np.random.default_rng(1).standard_normal((20, 6)).astype(np.float32)
    codes = read_sae(tmp_path / "topk").encode(x)
    assert codes.shape == (20, 10) and ((codes > 0).sum(1) <= 3).all()
    assert (codes >= 0).all() and (codes > 0).sum() > 20
    bypass = {"mean": x.mean(0), "pc1": np.eye(6, dtype=np.float32)[0]}
    write_sae(tmp_path / "pc1", weights(), {"architecture": "topk", "k": 3}, bypass)
    shifted = x.copy()
    shifted[:, 0] += 5.0  # moving along PC1 changes nothing the bypassed SAE sees
    sae = read_sae(tmp_path / "pc1")
    np.testing.assert_allclose(sae.encode(x), sae.encode(shifted), atol=1e-5)


def test_sae_lens_style_cfg_with_activation_kwargs_is_read(tmp_path):
    """SAELens 5 puts k under activation_fn_kwargs and the hook at top level; 6 under metadata."""
    folder = write_sae(tmp_path / "s", weights(), {"architecture": "topk",
                                                   "activation_fn_kwargs": {"k": 4},
                                                   "metadata": {"hook_name": "blocks.3"}})
    sae = read_sae(folder / WEIGHTS_FILE)
    assert sae.k == 4 and sae.hook_name == "blocks.3"
    write_sae(tmp_path / "relu", weights(), {"architecture": "standard"})
    assert read_sae(tmp_path / "relu").architecture == "standard"


def test_registry_detects_and_inspects_the_folder(tmp_path):
    write_sae(tmp_path / "sae", weights(), {"architecture": "standard"})
    assert detect(tmp_path / "sae").name == "sae"
    report = inspect_file(tmp_path / "sae")
    assert report["panel"] == "sae"
    assert report["summary"]["d_sae"] == 10 and report["summary"]["pc1_bypass"] is False


def test_damaged_folders_give_errors_naming_the_file(tmp_path):
    folder = write_sae(tmp_path / "sae", weights(), {"architecture": "topk", "k": 3})
    (folder / CFG_FILE).write_text('{"architecture": "jumprelu"}')
    with pytest.raises(FormatError, match="jumprelu"):
        read_sae(folder)
    (folder / CFG_FILE).write_text('{"architecture": "topk", "k": 3, "d_sae": 11}')
    with pytest.raises(FormatError, match="d_sae=11"):
        read_sae(folder)
    (folder / CFG_FILE).write_text('{"architecture": "topk", "pc1_bypass": {}}')
    with pytest.raises(FormatError, match="k"):
        read_sae(folder)
    (folder / CFG_FILE).write_text('{"architecture": "topk", "k": 2, "pc1_bypass": {"x": 1}}')
    with pytest.raises(FormatError, match=BYPASS_FILE):
        read_sae(folder)
    (folder / WEIGHTS_FILE).unlink()
    with pytest.raises(FormatError, match=f"{WEIGHTS_FILE} is missing"):
        read_sae(folder)


def test_wrong_shapes_are_refused(tmp_path):
    tensors = weights()
    tensors["W_dec"] = tensors["W_dec"][:, :5]
    from safetensors.numpy import save_file

    (tmp_path / "bad").mkdir()
    save_file(tensors, str(tmp_path / "bad" / WEIGHTS_FILE))
    (tmp_path / "bad" / CFG_FILE).write_text('{"architecture": "standard"}')
    with pytest.raises(FormatError, match="W_dec has shape"):
        read_sae(tmp_path / "bad")
