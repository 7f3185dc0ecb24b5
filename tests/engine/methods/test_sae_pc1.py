"""sae_pc1: TopK/ReLU SAEs, the PC1 bypass, cross-seed measures, MiniLM activations, reproduce."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from engine.context import Cancelled, JobContext
from engine.io.sae import read_sae
from engine.methods import sae_pc1
from engine.models.sae import SAEConfig, SparseAutoencoder, sae_from_tensors

SPECS = {spec.id: spec for spec in sae_pc1.SPECS}
TRAIN = SPECS["sae_pc1.train"]
REPRODUCE = SPECS["sae_pc1.reproduce"]


@pytest.fixture(scope="module")
def synthetic():
    x, features, dominant = sae_pc1.synthetic_activations(3000, seed=0)
    return x, features, dominant


def small(**overrides) -> sae_pc1.Params:
    values = dict(source="files", d_sae=64, k=4, seeds=2, steps=60, batch_size=256, lr=3e-3,
                  aux_k=16, dead_after_tokens=2000, top_n=10, contexts=3, context_window=2,
                  importance_sequences=0)
    return sae_pc1.Params(**{**values, **overrides})


def save_inputs(tmp_path, x: np.ndarray, tokens: list[str] | None = None) -> dict[str, str]:
    np.save(tmp_path / "acts.npy", x)
    inputs = {"activations": str(tmp_path / "acts.npy")}
    if tokens is not None:
        (tmp_path / "tokens.json").write_text(json.dumps(tokens))
        inputs["tokens"] = str(tmp_path / "tokens.json")
    return inputs


# -- the model ---------------------------------------------------------------------------------

def test_synthetic_data_has_the_asked_dominant_share(synthetic):
    x, features, dominant = synthetic
    mean, pc1, share = sae_pc1.principal_direction(x)
    assert share == pytest.approx(sae_pc1.SYNTH_SHARE, abs=0.02)
    assert abs(float(pc1 @ dominant)) > 0.99 and features.shape == (256, 64)


def test_training_lowers_mse_and_topk_keeps_exactly_k(synthetic):
    x = torch.from_numpy(synthetic[0])
    seen = []
    cfg = SAEConfig(d_in=64, d_sae=128, k=6, aux_k=32)
    sae, last = sae_pc1.train_sae(x, cfg, small(steps=100), seed=0, bypass_tensors=None,
                                  on_step=lambda step, metrics: seen.append(metrics["mse"]))
    assert last["mse"] < 0.5 * seen[0]
    assert 0 < last["explained_variance"] <= 1
    codes = sae.encode(x[:500])
    assert ((codes > 0).sum(-1) == 6).all()
    assert last["l0"] == pytest.approx(6.0)


def test_relu_l1_sae_is_sparser_with_a_larger_penalty(synthetic):
    x = torch.from_numpy(synthetic[0])
    l0 = []
    for l1 in (1e-4, 3.0):
        cfg = SAEConfig(d_in=64, d_sae=128, architecture="standard", l1_coefficient=l1)
        l0.append(sae_pc1.train_sae(x, cfg, small(steps=80), 0, None)[1]["l0"])
    assert l0[1] < 0.5 * l0[0]


def test_bypass_removes_pc1_from_the_sae_input_and_adds_it_back(synthetic):
    x = torch.from_numpy(synthetic[0][:400])
    mean, pc1, _ = sae_pc1.principal_direction(synthetic[0])
    torch.manual_seed(0)
    with_bypass = SparseAutoencoder(SAEConfig(d_in=64, d_sae=128, k=6, bypass=True))
    with_bypass.set_bypass(torch.from_numpy(mean), torch.from_numpy(pc1))
    torch.manual_seed(0)
    without = SparseAutoencoder(SAEConfig(d_in=64, d_sae=128, k=6))
    with torch.no_grad():
        out = with_bypass(x)
    u1 = torch.from_numpy(pc1)
    assert ((out.x_sae - torch.from_numpy(mean)) @ u1).abs().max() < 1e-3
    np.testing.assert_allclose((out.x_hat - out.sae_hat).numpy(),
                               torch.outer((x - torch.from_numpy(mean)) @ u1, u1).numpy(),
                               atol=1e-4)
    moved = x + 3.0 * u1  # a shift along PC1: invisible to the bypassed SAE only
    with torch.no_grad():
        assert torch.allclose(with_bypass.encode(moved), with_bypass.encode(x), atol=1e-4)
        assert not torch.allclose(without.encode(moved), without.encode(x), atol=1e-2)
        assert not torch.allclose(without(x).x_hat, out.x_hat)


def test_bypass_switch_changes_what_is_learned(synthetic):
    x = torch.from_numpy(synthetic[0])
    mean, pc1, _ = sae_pc1.principal_direction(synthetic[0])
    decoders = []
    for bypass in (False, True):
        cfg = SAEConfig(d_in=64, d_sae=64, k=4, bypass=bypass)
        sae, _ = sae_pc1.train_sae(x, cfg, small(steps=40), 0, (mean, pc1))
        decoders.append(sae.W_dec.detach().numpy())
    assert not np.allclose(decoders[0], decoders[1], atol=1e-3)
    # the bypassed decoder has (nearly) nothing along PC1 left to represent
    assert np.abs(decoders[1] @ pc1).mean() < np.abs(decoders[0] @ pc1).mean()


def test_aux_loss_gives_dead_latents_a_gradient(synthetic):
    x = torch.from_numpy(synthetic[0][:256])
    torch.manual_seed(0)
    sae = SparseAutoencoder(SAEConfig(d_in=64, d_sae=64, k=2, aux_k=8))
    dead = torch.zeros(64, dtype=torch.bool)
    dead[32:] = True
    loss, _, parts = sae.loss(x, dead)
    loss.backward()
    assert parts["aux"] > 0
    never_active = (sae.encode(x) == 0).all(0) & dead
    assert never_active.any() and sae.W_enc.grad[:, never_active].abs().sum() > 0
    sae.zero_grad()
    sae.loss(x, torch.zeros(64, dtype=torch.bool))[0].backward()
    assert sae.W_enc.grad[:, never_active].abs().sum() == 0


# -- cross-seed measures -----------------------------------------------------------------------

def test_reproducibility_is_one_for_identical_decoders_and_below_otherwise():
    rng = np.random.default_rng(0)
    decoder = rng.standard_normal((30, 8))
    best, matched = sae_pc1.reproducibility([decoder, decoder[rng.permutation(30)] * 2.0])
    np.testing.assert_allclose(best, 1.0)
    np.testing.assert_allclose(matched, 1.0)
    importance = [rng.random(30), rng.random(30)]
    assert sae_pc1.top_recovery([decoder, decoder], importance, 10, 0.9) == 1.0
    other = rng.standard_normal((30, 8))
    best, matched = sae_pc1.reproducibility([decoder, other])
    assert best.max() < 1.0 and (matched <= best + 1e-12).all()
    assert sae_pc1.top_recovery([decoder, other], importance, 10, 0.9) < 1.0
    assert math.isnan(sae_pc1.top_recovery([decoder], importance[:1], 10, 0.9))


def test_identical_seeds_train_identical_saes(synthetic):
    x = torch.from_numpy(synthetic[0])
    cfg = SAEConfig(d_in=64, d_sae=64, k=4)
    same = [sae_pc1.train_sae(x, cfg, small(steps=20), 5, None)[0].W_dec.detach().numpy()
            for _ in range(2)]
    other = sae_pc1.train_sae(x, cfg, small(steps=20), 6, None)[0].W_dec.detach().numpy()
    assert sae_pc1.reproducibility(same)[0].min() == pytest.approx(1.0)
    assert sae_pc1.reproducibility([same[0], other])[0].mean() < 0.99


def test_reconstruction_importance_matches_explicit_ablation(synthetic):
    x = synthetic[0][:200]
    torch.manual_seed(0)
    sae = SparseAutoencoder(SAEConfig(d_in=64, d_sae=32, k=4))
    importance = sae_pc1.reconstruction_importance(sae, x)
    xt = torch.from_numpy(x)
    with torch.no_grad():
        codes = sae.encode(xt)
        base = (sae.decode(codes) - xt).pow(2).sum(-1).mean()
        for latent in (0, 7, 31):
            ablated = codes.clone()
            ablated[:, latent] = 0
            change = (sae.decode(ablated) - xt).pow(2).sum(-1).mean() - base
            assert importance[latent] == pytest.approx(float(change), rel=1e-3, abs=1e-5)


# -- the train method --------------------------------------------------------------------------

def test_train_from_files_saves_saelens_folders_that_load_back(tmp_path, synthetic):
    x = synthetic[0][:1500]
    inputs = save_inputs(tmp_path, x, [f"t{i % 50}" for i in range(len(x))])
    events = []
    ctx = JobContext("j", tmp_path / "run", emit=events.append, seed=0)
    outputs = TRAIN.run(ctx, small(), inputs)
    assert set(outputs["checkpoints"]) == {"L0-raw-s0", "L0-raw-s1", "L0-bypass-s0",
                                           "L0-bypass-s1"}
    folder = tmp_path / "run" / outputs["checkpoints"]["L0-bypass-s1"]
    saved = read_sae(folder)
    assert saved.bypass is not None and saved.k == 4
    assert not (folder / "model.safetensors").exists()
    cfg = SAEConfig(d_in=64, d_sae=64, k=4, bypass=True)
    sae = sae_from_tensors(cfg, saved.weights, saved.bypass)
    with torch.no_grad():
        torch_codes = sae.encode(torch.from_numpy(x[:50])).numpy()
    np.testing.assert_allclose(saved.encode(x[:50]), torch_codes, atol=1e-4)
    table = json.loads((tmp_path / "run" / outputs["L0-raw-s0/features"]).read_text())
    assert table["columns"][:5] == ["feature", "density", "importance", "recon_importance",
                                    "reproducibility"]
    assert len(table["rows"]) == 64 and table["other_seeds"] == ["L0-raw-s1"]
    progress = [e for e in events if e["type"] == "job_progress" and e["metrics"]]
    assert {"mse", "explained_variance", "l0", "dead_fraction"} <= set(progress[-1]["metrics"])
    summary = json.loads((tmp_path / "run" / outputs["summary"]).read_text())
    assert [row[1] for row in summary["rows"]] == ["raw", "bypass"]
    context = next((tmp_path / "run" / "artifacts" / "contexts" / "L0-raw-s0").glob("*.json"))
    view = json.loads(context.read_text())
    assert view["view"] == "token_heat" and len(view["tokens"]) == len(view["values"])


def test_bad_inputs_give_clear_errors(tmp_path, synthetic):
    x = synthetic[0][:300].copy()
    ctx = JobContext("j", tmp_path / "run", emit=lambda e: None, seed=0)
    with pytest.raises(sae_pc1.SAEInputError, match="300 activation rows but 299 tokens"):
        TRAIN.run(ctx, small(), save_inputs(tmp_path, x, ["a"] * 299))
    x[17, 3] = np.nan
    with pytest.raises(sae_pc1.SAEInputError, match="NaN.*row 17"):
        TRAIN.run(ctx, small(), save_inputs(tmp_path, x))
    with pytest.raises(sae_pc1.SAEInputError, match="needs the input 'activations'"):
        TRAIN.run(ctx, small(), {})
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    with pytest.raises(sae_pc1.SAEInputError, match="has no weights"):
        TRAIN.run(ctx, small(source="model", model_path=str(tmp_path / "model")), {})
    with pytest.raises(ValidationError, match="k=65 exceeds d_sae=64"):
        small(k=65)
    with pytest.raises(ValidationError, match="layers"):
        small(layers=[2, 2])
    with pytest.raises(ValidationError, match="extra"):
        sae_pc1.Params(d_sea=3)


def test_cancel_stops_training(tmp_path, synthetic):
    ctx = JobContext("j", tmp_path, emit=lambda e: None, seed=0)
    ctx.request_cancel()
    with pytest.raises(Cancelled):
        TRAIN.run(ctx, small(steps=10_000), save_inputs(tmp_path, synthetic[0][:500]))


def test_minilm_activations_anisotropy_splicing_and_contexts(tmp_path):
    ctx = JobContext("j", tmp_path / "run", emit=lambda e: None, seed=0,
                     cache_root=tmp_path / "cache")
    p = sae_pc1.Params(max_tokens=300, max_length=32, layers=[2], d_sae=48, k=4, seeds=2,
                       bypass="on", steps=15, batch_size=128, aux_k=8, importance_sequences=2,
                       importance_length=12, contexts=2, context_window=3, top_n=5)
    outputs = TRAIN.run(ctx, p, {})
    shards = list((tmp_path / "cache").glob("*/layer2/shard*.npy"))
    assert shards and np.load(shards[0], mmap_mode="r").shape[1] == 384
    assert set(outputs["pc1_share_by_layer"]) == set(range(7))
    assert all(0 < share < 1 for share in outputs["pc1_share_by_layer"].values())
    table = json.loads((tmp_path / "run" / outputs["L2-bypass-s0/features"]).read_text())
    assert table["importance"].startswith("spliced")
    assert sum(row[2] > 0 for row in table["rows"]) > 0
    tokens = json.loads((tmp_path / "run" / outputs["tokens"]).read_text())
    assert len(tokens) >= 300 and "[CLS]" not in tokens
    summary = json.loads((tmp_path / "run" / outputs["summary"]).read_text())
    splice_error = summary["rows"][0][summary["columns"].index("splice_error")]
    assert splice_error is not None and splice_error > 0
    again = TRAIN.run(JobContext("k", tmp_path / "run2", emit=lambda e: None, seed=0,
                                 cache_root=tmp_path / "cache"), p, {})  # from the cache
    assert again["pc1_share_by_layer"] == outputs["pc1_share_by_layer"]


def test_the_users_text_files_replace_the_corpus(tmp_path):
    """A folder of the user's text is what MiniLM reads; progress never passes its total, and
    the packaged model is named by its hub name (its package folder is just "model")."""
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "a.txt").write_text("Zeppelins drifted over Quarrington harbour.\n\n"
                                             "The zeppelin crews waved at the lighthouse. " * 8)
    (tmp_path / "text" / "b.md").write_text("Quarrington fishermen mended nets at dawn. " * 8)
    (tmp_path / "text" / "skip.bin").write_bytes(b"\xff\xfe not text")
    events = []
    ctx = JobContext("j", tmp_path / "run", emit=events.append, seed=0,
                     cache_root=tmp_path / "cache")
    p = sae_pc1.Params(max_tokens=400, max_length=32, layers=[1], d_sae=32, k=4, seeds=1,
                       bypass="off", steps=5, batch_size=64, aux_k=8, importance_sequences=0)
    outputs = TRAIN.run(ctx, p, {"text": str(tmp_path / "text")})
    tokens = json.loads((tmp_path / "run" / outputs["tokens"]).read_text())
    assert any("zeppelin" in t for t in tokens) and any("fishermen" in t for t in tokens)
    progress = [e for e in events if e["type"] == "job_progress" and e["total"]]
    assert progress and all(e["step"] <= e["total"] for e in progress)
    title = json.loads((tmp_path / "run" / outputs["anisotropy"]).read_text())["title"]
    assert "all-MiniLM-L6-v2 on text" in title
    checkpoint = next(iter(outputs["checkpoints"].values()))
    cfg = json.loads((tmp_path / "run" / checkpoint / "cfg.json").read_text())
    assert cfg["dataset_path"] == str((tmp_path / "text").resolve())  # not "news"
    assert cfg["provenance"]["runs"][0]["run_id"] == "j" and cfg["provenance"]["runs"][0][
        "seed"] == 0
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    with pytest.raises(sae_pc1.SAEInputError, match="latin1.txt: not UTF-8"):
        TRAIN.run(ctx, p, {"text": str(tmp_path / "latin1.txt")})
    with pytest.raises(sae_pc1.SAEInputError, match="layers \\[9\\]: sentence-transformers"):
        TRAIN.run(ctx, p.model_copy(update={"layers": [9]}), {})


def test_a_broken_tokens_file_is_named(tmp_path, synthetic):
    inputs = save_inputs(tmp_path, synthetic[0][:300])
    (tmp_path / "tokens.json").write_text('["a", ')
    ctx = JobContext("j", tmp_path / "run", emit=lambda e: None, seed=0)
    with pytest.raises(sae_pc1.SAEInputError, match="tokens.json: unreadable tokens"):
        TRAIN.run(ctx, small(), {**inputs, "tokens": str(tmp_path / "tokens.json")})


def test_smoke_reproduce_reports_both_criteria(tmp_path):
    ctx = JobContext("j", tmp_path, emit=lambda e: None, seed=0, cache_root=tmp_path / "cache")
    result = REPRODUCE.run(ctx, REPRODUCE.params(smoke=True), {})
    claim = result["claim"]
    assert claim["smoke"] and claim["paper"] == "sae_pc1"
    assert [c["target"] for c in claim["criteria"]] == [0.2, 0.7]
    assert all(math.isfinite(c["measured"]) and c["paper"] for c in claim["criteria"])
    assert "MiniLM layer 3" in claim["notes"] and "Decoder LM layer 2" in claim["notes"]
    assert "cross-entropy" in claim["notes"]
    assert set(result["decoder_recovery"]) == {"raw", "bypass"}
    assert 0 < result["decoder_pc1_share"] < 1


# -- the decoder LM: activations, cross-entropy splicing, output tokens, steering ---------------

def tiny_decoder(**overrides) -> sae_pc1.Params:
    values = dict(source="decoder", corpus="news", decoder_steps=40, bypass="off",
                  decoder_d_model=32, decoder_layers=2, decoder_vocab=300, decoder_chars=20_000,
                  max_tokens=1200, max_length=32, layers=[1], d_sae=64, k=4, seeds=2, steps=30,
                  batch_size=256, aux_k=16, top_n=10, contexts=3, context_window=2,
                  importance_sequences=3, importance_length=16)
    return sae_pc1.Params(**{**values, **overrides})


@pytest.fixture(scope="module")
def decoder_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoder")
    ctx = JobContext("d", root / "run", emit=lambda e: None, seed=0, cache_root=root / "cache")
    return root, TRAIN.run(ctx, tiny_decoder(), {})


def identity_sae(width: int) -> SparseAutoencoder:
    """ReLU SAE with latents +e_j and -e_j: its reconstruction is exactly x."""
    eye = np.eye(width, dtype=np.float32)
    tensors = {"W_enc": np.concatenate([eye, -eye], 1), "b_enc": np.zeros(2 * width),
               "W_dec": np.concatenate([eye, -eye], 0), "b_dec": np.zeros(width)}
    return sae_from_tensors(SAEConfig(d_in=width, d_sae=2 * width, architecture="standard"),
                            tensors)


def test_decoder_activations_have_the_lm_width_and_its_tokens(decoder_run):
    root, outputs = decoder_run
    lm = sae_pc1.load_decoder(root / "run" / outputs["decoder"])
    p = tiny_decoder(layers=[0, 2])
    acts = sae_pc1.collect_decoder_activations(
        JobContext("a", root / "acts", emit=lambda e: None, seed=0), p, lm)
    assert set(acts.layers) == {0, 2} and acts.layers[2].shape == (len(acts.tokens), 32)
    assert len(acts.tokens) == sum(map(len, acts.sequences)) >= 1200
    first = acts.sequences[0]
    assert "".join(acts.tokens[:len(first)]) == lm.tokenizer.tokenizer.decode(first)
    with torch.no_grad():  # layer 0 = token + position embeddings of the first sequence
        ids = torch.tensor(first)
        embedded = lm.model.embed(ids) + lm.model.pos.weight[:len(first)]
    np.testing.assert_allclose(acts.layers[0][:len(first)], embedded.numpy(), atol=1e-5)
    assert set(acts.pc1_share_by_layer) == {0, 1, 2}
    table = json.loads((root / "run" / outputs["L1-raw-s0/features"]).read_text())
    assert table["importance"].startswith("spliced: next-token cross-entropy")
    assert table["columns"][-1] == "output_tokens" and table["rows"][0][-1]
    page = json.loads((root / "run/artifacts/contexts/L1-raw-s0/0.json").read_text())
    assert len(page["output_tokens"]) == sae_pc1.TOP_TOKENS


def test_decoder_checkpoint_is_saved_cached_and_reused(decoder_run):
    root, outputs = decoder_run
    saved = root / "run" / outputs["decoder"]
    cached = list((root / "cache").glob("*/model.safetensors"))
    assert len(cached) == 1 and cached[0].read_bytes() == (saved / "model.safetensors").read_bytes()
    with pytest.raises(sae_pc1.SAEInputError, match="decoder"):
        TRAIN.run(JobContext("x", root / "bad", emit=lambda e: None, seed=0), tiny_decoder(),
                  {"decoder": str(root / "run" / outputs["L1-raw-s0/features"])})
    with pytest.raises(sae_pc1.SAEInputError, match="layers"):
        TRAIN.run(JobContext("y", root / "bad2", emit=lambda e: None, seed=0),
                  tiny_decoder(layers=[5]), {"decoder": str(saved)})


def test_spliced_cross_entropy_importance_on_the_decoder(decoder_run):
    root, outputs = decoder_run
    lm = sae_pc1.load_decoder(root / "run" / outputs["decoder"])
    sequences = sae_pc1.decoder_sequences(lm, "news", 200, 16)[:4]
    importance, splice_error = sae_pc1.spliced_ce_importance(
        identity_sae(32), lm, 1, sequences, lambda: None)
    assert splice_error == pytest.approx(0.0, abs=1e-5)  # exact reconstruction loses nothing
    assert importance.max() > 0 and importance.sum() > 0
    latent = int(importance.argmax())  # check it against an explicit ablation
    sign, axis = (1.0 if latent < 32 else -1.0), latent % 32
    ids = torch.tensor([s[:16] for s in sequences])

    def ablate(x):
        x = x.clone()
        x[..., axis] -= sign * torch.relu(sign * x[..., axis])
        return x

    with torch.no_grad():
        def ce(edit):
            logits = sae_pc1.decoder_logits(lm.model, ids[:, :-1], 1, edit)
            return torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:])
        explicit = float(ce(ablate) - ce(lambda x: x))
    assert importance[latent] == pytest.approx(explicit, rel=1e-3, abs=1e-6)
    trained_error = json.loads((root / "run" / outputs["summary"]).read_text())
    assert trained_error["rows"][0][trained_error["columns"].index("splice_error")] > 0


def test_loss_recovered_is_one_for_an_exact_sae_and_reported_for_trained_ones(decoder_run):
    root, outputs = decoder_run
    lm = sae_pc1.load_decoder(root / "run" / outputs["decoder"])
    sequences = sae_pc1.decoder_sequences(lm, "news", 200, 16)[:4]
    assert sae_pc1.loss_recovered(identity_sae(32), lm, 1, sequences) == pytest.approx(1.0)
    summary = json.loads((root / "run" / outputs["summary"]).read_text())
    recovered = [row[summary["columns"].index("loss_recovered")] for row in summary["rows"]]
    assert all(r is not None and r < 1 for r in recovered)


def test_steering_alpha_zero_is_unsteered_and_a_large_alpha_changes_it(decoder_run):
    root, outputs = decoder_run
    steer = SPECS["sae_pc1.steer"]
    inputs = {"decoder": str(root / "run" / outputs["decoder"]),
              "sae": str(root / "run" / outputs["checkpoints"]["L1-raw-s0"])}
    results = []
    for alpha in (0.0, 60.0):
        ctx = JobContext(f"s{alpha}", root / f"steer{alpha}", emit=lambda e: None, seed=0)
        params = steer.params(feature=3, alpha=alpha, prompt="The government said",
                              new_tokens=12)
        results.append(steer.run(ctx, params, inputs))
    assert results[0]["steered"] == results[0]["unsteered"]
    assert results[1]["unsteered"] == results[0]["unsteered"]
    assert results[1]["steered"] != results[1]["unsteered"]
    table = json.loads((root / "steer60.0" / results[1]["steering"]).read_text())
    assert table["rows"][1][2] == results[1]["steered"] and table["layer"] == 1
    with pytest.raises(sae_pc1.SAEInputError, match="feature=999"):
        steer.run(JobContext("e", root / "err", emit=lambda e: None, seed=0),
                  steer.params(feature=999), inputs)
    with pytest.raises(sae_pc1.SAEInputError, match="'sae'"):
        steer.run(JobContext("f", root / "err2", emit=lambda e: None, seed=0),
                  steer.params(), {"decoder": inputs["decoder"]})
