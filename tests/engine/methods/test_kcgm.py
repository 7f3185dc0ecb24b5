"""kCGM: the estimator's coefficients and gradient, kernels, a tiny calibration that lowers MMD,
the calibration switch, the job's artifacts and the smoke reproduction."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from engine.context import Cancelled, JobContext
from engine.io.molecules import FormatError
from engine.methods import kcgm
from engine.models.smiles_lm import EOS, SmilesLM, SmilesLMConfig, build_vocabulary, tokenize
from engine.threads import limit_threads

SPECS = {spec.id: spec for spec in kcgm.SPECS}
CALIBRATE = SPECS["kcgm.calibrate"]
REPRODUCE = SPECS["kcgm.reproduce"]
ALIPHATIC = ["CCO", "CCCO", "CCCCO", "CC(C)O", "CCN", "CCCN", "CC(C)N", "CCOC", "CCCC", "CC(C)C",
             "OCCO", "NCCN", "CCCCC", "CCOCC", "CC(=O)O", "CCC(=O)O"]
AROMATIC = ["c1ccccc1", "Cc1ccccc1", "Oc1ccccc1", "Nc1ccccc1", "c1ccncc1", "Clc1ccccc1"]


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny GRUs on a shared machine: one thread, as the worker runs the method."""
    with limit_threads(1):
        yield


def job(tmp_path) -> JobContext:
    return JobContext("j", tmp_path, emit=lambda event: None, seed=0)


# -- pieces ------------------------------------------------------------------------------------

def test_tokenizer_keeps_bracket_atoms_and_two_letter_halogens_whole():
    assert tokenize("C[C@@H](Cl)c1ccc(Br)cc1%10") == [
        "C", "[C@@H]", "(", "Cl", ")", "c", "1", "c", "c", "c", "(", "Br", ")", "c", "c", "1",
        "%10"]


def test_model_log_prob_is_the_sum_of_token_log_probs_and_samples_end():
    torch.manual_seed(0)
    model = SmilesLM(SmilesLMConfig(build_vocabulary(ALIPHATIC), d_embed=8, d_hidden=16,
                                    max_len=12))
    tokens = model.encode(["CCO", "CC(C)N"])
    assert model.decode(tokens) == ["CCO", "CC(C)N"]
    logits = torch.log_softmax(model(tokens[:1, :-1]), -1)[0]
    by_hand = sum(logits[t, tokens[0, t + 1]] for t in range(4))  # C C O EOS
    assert model.sequence_log_prob(tokens)[0].item() == pytest.approx(by_hand.item(), abs=1e-5)
    samples = model.sample(20)
    ended = (samples == EOS).any(1)
    assert samples.shape[1] <= 13 and (ended | (samples.shape[1] == 13)).all()


def test_tanimoto_and_unbiased_mmd():
    a = np.array([[1, 1, 0, 0], [0, 0, 0, 0]], dtype=float)
    b = np.array([[1, 0, 1, 0]], dtype=float)
    assert np.allclose(kcgm.tanimoto(a, b), [[1 / 3], [0.0]])  # an invalid molecule: 0
    assert np.allclose(kcgm.tanimoto(a, a), [[1, 0], [0, 1]])  # two invalid ones: identical
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(300, 2)), rng.normal(size=(300, 2))
    featurizer = kcgm.Featurizer("rbf", bandwidths=(1.0,))
    same = kcgm.mmd2(featurizer.k(x, x), featurizer.k(x, y), featurizer.k(y, y))
    shifted = kcgm.mmd2(featurizer.k(x + 1, x + 1), featurizer.k(x + 1, y), featurizer.k(y, y))
    assert abs(same) < 0.01 < shifted


def test_descriptor_features_are_scaled_by_the_reference_std():
    featurizer = kcgm.Featurizer.fit("rbf", AROMATIC)
    features = featurizer(AROMATIC + ["C1CC"])
    assert np.allclose(features[:-1].std(0)[features[:-1].std(0) > 0], 1.0)
    assert not features[-1].any() and len(featurizer.bandwidths) == 5


def test_coefficients_follow_the_spec_formula():
    rng = np.random.default_rng(1)
    n, m = 5, 4
    k_ff = rng.random((n, n))
    k_ff = (k_ff + k_ff.T) / 2
    k_fy = rng.random((n, m))
    log_p, log_base = rng.normal(size=n), rng.normal(size=n)
    lam = 0.5
    g = np.array([2 * (sum(k_ff[i, j] for j in range(n) if j != i) / (n - 1) - k_fy[i].mean())
                  for i in range(n)])
    kl = log_p - log_base
    expected = [lam / (1 + lam) * (kl[i] - np.delete(kl, i).mean()) / n
                + 1 / (1 + lam) * (g[i] - np.delete(g, i).mean()) / n for i in range(n)]
    got = kcgm.kcgm_coefficients(k_ff, k_fy, log_p, log_base, lam)
    assert np.allclose(got, expected)
    # The switch: without calibration only the KL term is left (zero at the base itself).
    kl_only = kcgm.kcgm_coefficients(k_ff, k_fy, log_p, log_base, lam, calibrate=False)
    assert not np.allclose(kl_only, got)
    assert np.allclose(kl_only, [lam / (1 + lam) * (kl[i] - np.delete(kl, i).mean()) / n
                                 for i in range(n)])
    assert not kcgm.kcgm_coefficients(k_ff, k_fy, log_base, log_base, lam, False).any()


def test_estimator_mean_gradient_matches_finite_differences():
    pool = kcgm.fingerprints([*ALIPHATIC[:6], *AROMATIC[:5], "C1CC"])
    reference = kcgm.fingerprints(AROMATIC)
    estimate, finite = kcgm.gradient_check(pool, reference, kcgm.tanimoto, batches=4000,
                                           batch_size=64, seed=0)
    assert np.linalg.norm(estimate - finite) / np.linalg.norm(finite) < 0.05


# -- a tiny calibration ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_base(one_torch_thread) -> SmilesLM:
    """A GRU that has memorised a few short molecules (a third aromatic), in about a second."""
    torch.manual_seed(0)
    model = SmilesLM(SmilesLMConfig(build_vocabulary(ALIPHATIC + AROMATIC), d_embed=16,
                                    d_hidden=64, max_len=16))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    training = ALIPHATIC + AROMATIC * 2
    for _ in range(50):
        loss = model.loss(model.encode(training))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.requires_grad_(False)


def held_out_mmd(model, featurizer, reference_features, seed=0, n=256) -> tuple[float, float]:
    generator = torch.Generator().manual_seed(seed)
    smiles = model.decode(model.sample(n, generator=generator))
    features = featurizer(smiles)
    validity = float(np.mean([f.any() for f in features]))
    return kcgm.mmd2(featurizer.k(features, features),
                     featurizer.k(features, reference_features),
                     featurizer.k(reference_features, reference_features)), validity


@pytest.mark.parametrize("switch", [True, False])
def test_calibration_lowers_mmd_and_the_switch_turns_it_off(tiny_base, switch):
    import copy

    featurizer = kcgm.Featurizer.fit("tanimoto", AROMATIC)
    reference_features = featurizer(AROMATIC)
    before, validity_before = held_out_mmd(tiny_base, featurizer, reference_features)
    assert validity_before > 0.8
    model = copy.deepcopy(tiny_base).requires_grad_(True)
    params = kcgm.Params(steps=30, batch_size=32, lr=1e-2, lam=0.0, calibrate=switch,
                         eval_every=10)
    torch.manual_seed(1)
    logged = []
    history = kcgm.calibrate(model, tiny_base, featurizer, reference_features, params,
                             lambda: None, lambda step, m: logged.append(step))
    after, _ = held_out_mmd(model, featurizer, reference_features)
    moved = any(not torch.equal(a, b) for a, b in zip(model.parameters(),
                                                      tiny_base.parameters(), strict=True))
    assert logged == [10, 20, 30] and len(history) == 30
    if switch:
        assert moved and after < 0.5 * before  # the aromatic reference: 0.07 -> -0.09
    else:  # lambda 0 and no MMD term: every coefficient is zero, nothing moves
        assert not moved and after == pytest.approx(before)


# -- the job -----------------------------------------------------------------------------------

TINY = dict(train_molecules=300, pretrain_steps=6, pretrain_batch=16, d_hidden=16, max_len=40,
            steps=3, batch_size=8, eval_samples=16, eval_every=2)


def test_calibrate_job_saves_histograms_table_checkpoint_and_reuses_the_base(tmp_path):
    reference = tmp_path / "ref.smi"
    reference.write_text("\n".join([*AROMATIC, "C1CC", "[Na+].[O-]C(=O)c1ccccc1"]) + "\n")
    ctx = job(tmp_path / "run1")
    outputs = CALIBRATE.run(ctx, CALIBRATE.params(**TINY), {"reference": str(reference)})
    root = tmp_path / "run1"
    metrics = json.loads((root / outputs["metrics"]).read_text())
    assert set(metrics) == {"base", "kcgm"}
    assert set(metrics["kcgm"]) == {"mmd2", "mmd2_valid", "validity", "uniqueness", "novelty",
                                    "reference_copied"}
    histogram = json.loads((root / outputs["hist_MolWt"]).read_text())
    assert [c["name"] for c in histogram["series"]][0] == "reference"
    table = json.loads((root / outputs["generated"]).read_text())
    assert table["columns"] == kcgm.TABLE_COLUMNS and len(table["rows"]) == 32
    assert (root / outputs["checkpoint"] / "model.safetensors").exists()
    assert json.loads((root / outputs["checkpoint"] / "cfg.json").read_text())["tokens"]
    lines = [json.loads(x) for x in (root / "metrics.jsonl").read_text().splitlines()]
    assert "pretrain_loss" in lines[0] and "mmd2" in lines[-1] and lines[-1]["step"] == 9
    with open(root / outputs["generated_csv"]) as handle:  # untrained base: mostly invalid
        written = list(csv.DictReader(handle))
    assert len(written) == 32 and {"smiles", "QED", "valid"} <= set(written[0])
    # A second run with the same base settings loads the cached base (same pretraining curve).
    again = CALIBRATE.run(JobContext("k", tmp_path / "run2", emit=lambda e: None, seed=0,
                                     cache_root=root / "cache"),
                          CALIBRATE.params(**{**TINY, "objective": "none"}),
                          {"reference": str(reference)})
    assert set(json.loads((tmp_path / "run2" / again["metrics"]).read_text())) == {"base"}
    assert json.loads((tmp_path / "run2" / again["pretrain_loss"]).read_text())["series"][0][
        "y"] == json.loads((root / outputs["pretrain_loss"]).read_text())["series"][0]["y"]


def test_sweep_calibrates_one_base_per_lambda(tmp_path):
    reference = tmp_path / "ref.smi"
    reference.write_text("\n".join(AROMATIC) + "\n")
    sweep = SPECS["kcgm.sweep"]
    outputs = sweep.run(job(tmp_path), sweep.params(**TINY, lambdas=[0.0, 5.0]),
                        {"reference": str(reference)})
    table = json.loads((tmp_path / outputs["sweep"]).read_text())
    assert [row[0] for row in table["rows"]] == [0.0, 5.0] and table["columns"][1] == "mmd2"
    plot = json.loads((tmp_path / outputs["mmd_vs_lambda"]).read_text())
    assert plot["xticks"] == [[0.0, "0"], [1.0, "5"]] and plot["hlines"][0]["name"] == "base"
    with pytest.raises(ValidationError):
        sweep.params(lambdas=[-1.0])


def test_reference_is_cleaned_and_a_missing_reference_names_the_file(tmp_path):
    path = tmp_path / "ref.smi"
    path.write_text("C[C@H](N)C(=O)[O-].[Na+]\nCC(N)C(=O)O\nnonsense\n")
    assert kcgm.load_reference(path) == ["CC(N)C(=O)O"]
    with pytest.raises(FormatError, match="missing.smi"):
        kcgm.load_reference(tmp_path / "missing.smi")


def test_cancel_stops_pretraining(tmp_path):
    ctx = job(tmp_path)
    ctx.request_cancel()
    with pytest.raises(Cancelled):
        CALIBRATE.run(ctx, CALIBRATE.params(**TINY), {})


@pytest.mark.parametrize("bad", [{"steps": 0}, {"kernel": "cosine"}, {"lam": -1},
                                 {"objective": "rl"}, {"lr": 0}, {"batch_size": 2},
                                 {"lambda": 1}])
def test_invalid_params_are_rejected(bad):
    with pytest.raises(ValidationError):
        CALIBRATE.params(**bad)


def test_reproduce_smoke_returns_a_claim(tmp_path):
    outputs = REPRODUCE.run(job(tmp_path), REPRODUCE.params(smoke=True), {})
    claim = outputs["claim"]
    assert claim["smoke"] is True and claim["paper"] == "kcgm" and len(claim["criteria"]) == 4
    for criterion in claim["criteria"]:
        assert math.isfinite(criterion["measured"]) and criterion["paper"]
    assert [c["target"] for c in claim["criteria"]] == [0.5, -0.01, 1.0, 0.05]
    assert claim["passed"] == all(c["passed"] for c in claim["criteria"])
    assert "hist_QED" in outputs
    json.dumps(claim)
