"""concept_frustration: the generator, the closed form against Monte Carlo, the geometry, jobs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from engine.context import Cancelled, JobContext
from engine.io import FormatError
from engine.methods import concept_frustration as cf
from engine.models import concept_models as cm

SPECS = {spec.id: spec for spec in cf.SPECS}
SYNTHETIC = SPECS["concept_frustration.synthetic"]
TEXT = SPECS["concept_frustration.text"]
REPRODUCE = SPECS["concept_frustration.reproduce"]


def world(alpha: float, seed: int = 0, omega: float = 0.5) -> cf.ConceptWorld:
    return cf.make_world(r=12, k=10, k_known=5, alpha=alpha, omega=omega, sigma_x=0.3,
                         sigma_y=1.5, seed=seed)


# -- the generator ------------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [-1.0, -0.5, 0.0, 0.5, 1.0])
def test_couplings_frustrate_exactly_when_alpha_is_positive(alpha):
    w = world(alpha)
    for u, (i, j) in enumerate(w.pairs):
        product = w.coupling[i, u] * w.coupling[j, u]
        if alpha == 0:
            assert product == 0
        else:
            assert np.sign(product) == -np.sign(alpha) * np.sign(w.b_known[i, j])
    assert np.count_nonzero(w.coupling) == (0 if alpha == 0 else 2 * len(w.pairs))
    # the Schur completion keeps Cov(unknown | known) = B_temp and B positive definite
    kk = w.k_known
    b = w.covariance
    conditional = b[kk:, kk:] - b[kk:, :kk] @ np.linalg.solve(b[:kk, :kk], b[:kk, kk:])
    assert np.allclose(conditional, w.b_temp, atol=1e-8)
    assert np.linalg.eigvalsh(b).min() > 0


def test_alpha_only_changes_the_couplings():
    minus, plus = world(-1.0, seed=3), world(1.0, seed=3)
    for name in ("b_known", "b_temp", "pairs", "mixing", "task_weights"):
        assert np.array_equal(getattr(minus, name), getattr(plus, name)), name
    assert not np.array_equal(minus.coupling, plus.coupling)


def test_alpha_zero_gives_no_frustration_while_alpha_positive_does():
    assert cf.population_frustration(world(0.0)) == 0.0
    assert cf.population_frustration(world(-1.0)) == 0.0  # consistent couplings
    assert cf.population_frustration(world(1.0)) > 0.0
    assert cf.population_frustration(world(0.5)) > 0.0


def test_adding_the_missing_concepts_lowers_frustration():
    w = cf.make_world(r=12, k=14, k_known=6, alpha=1.0, omega=0.5, sigma_x=0.3, sigma_y=1.5,
                      seed=2)
    before = cf.population_frustration(w)
    known = np.arange(w.k) < w.k_known
    known[w.k_known:w.k_known + 4] = True  # four of the eight unknowns join the ontology
    partly = cf.population_frustration(w, known)
    after = cf.population_frustration(w, np.ones(w.k, bool))
    assert before > partly > after == 0.0
    with pytest.raises(ValueError, match="originally known"):
        cf.population_frustration(w, np.arange(w.k) >= 1)


def test_samples_follow_the_covariance_and_the_task_rule():
    w = world(1.0)
    x, concepts, y = w.sample(40_000, np.random.default_rng(0))
    assert x.shape == (40_000, 12) and concepts.shape == (40_000, 10)
    assert np.allclose(np.cov(concepts.T), w.covariance, atol=0.06 * np.abs(w.covariance).max())
    assert set(np.unique(y)) == {0, 1}


# -- the closed form ----------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [-1.0, 0.0, 1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_closed_form_bayes_accuracy_matches_monte_carlo(alpha, seed):
    w = world(alpha, seed)
    terms = cf.world_terms(w)
    monte_carlo = cf.monte_carlo_bayes_accuracy(w, 100_000, np.random.default_rng(seed + 10))
    tolerance = 4 * math.sqrt(0.25 / 100_000)  # four standard errors
    assert abs(terms.accuracy - monte_carlo) < tolerance
    # the test would catch a closed form that forgot the cross term or the bridge term
    if alpha != 0:
        signal, noise = terms.t1 + terms.t3, terms.t4 + terms.sigma_y ** 2
        wrong = 0.5 + math.asin(math.sqrt(signal / (signal + noise))) / math.pi
        no_bridge = 0.5 + math.asin(math.sqrt(
            (terms.t1 + 2 * terms.t2) / (terms.t1 + 2 * terms.t2 + noise))) / math.pi
        assert abs(wrong - monte_carlo) > tolerance or abs(no_bridge - monte_carlo) > tolerance


def test_decomposition_of_the_signal():
    independent, frustrated = cf.world_terms(world(0.0)), cf.world_terms(world(1.0))
    assert independent.t2 == 0 and independent.t3 == 0
    assert independent.known_only_accuracy == pytest.approx(independent.accuracy)
    # T1 and T4 do not depend on alpha (B_kk and B_temp are shared)
    assert frustrated.t1 == pytest.approx(independent.t1)
    assert frustrated.t4 == pytest.approx(independent.t4)
    for t in (independent, frustrated):
        assert 0.5 <= t.known_only_accuracy <= t.accuracy <= t.oracle_accuracy <= 1
    # every concept known: nothing is lost, T4 = 0 and the accuracy is the oracle's
    w = world(1.0)
    everything = cf.bayes_terms(w.covariance, w.task_weights, np.ones(w.k, bool), w.sigma_y)
    assert everything.t4 == 0 and everything.accuracy == pytest.approx(frustrated.oracle_accuracy)
    # no unknown weight (omega = 0): the known concepts carry all the signal
    blind = cf.world_terms(world(1.0, omega=0.0))
    assert blind.t2 == blind.t3 == blind.t4 == 0


# -- geometry -----------------------------------------------------------------------------------

def test_fisher_differs_from_euclidean_when_the_metric_is_anisotropic():
    concepts = np.array([[1.0, 1.0], [1.0, -1.0]])
    features = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert np.allclose(cf.similarity(concepts, features, np.eye(2)),
                       cf.similarity(concepts, features))
    euclid = cf.similarity(concepts, concepts)
    assert euclid[0, 1] == pytest.approx(0.0)
    fisher = cf.similarity(concepts, concepts, np.diag([4.0, 1.0]))
    assert fisher[0, 1] == pytest.approx(3 / 5)  # (4 - 1) / (sqrt 5 sqrt 5)
    assert np.allclose(np.diag(fisher), 1.0)


def test_frustration_index_by_hand():
    z = np.array([[1.0, 0.5, -0.2], [0.5, 1.0, 0.3], [-0.2, 0.3, 1.0]])
    s = np.array([[0.9, 0.4], [-0.5, 0.2], [0.1, 0.0]])
    gamma = cf.frustration_index(s, z)
    # pair (0,1): Z > 0, products (-0.45, 0.08) -> 0.45 from feature 0
    # pair (0,2): Z < 0, products (0.09, 0)    -> 0.09 from feature 0
    # pair (1,2): Z > 0, products (-0.05, 0)   -> 0.05 from feature 0
    assert gamma.pairs == [(0, 1), (0, 2), (1, 2)]
    assert np.allclose(gamma.scores, [0.45, 0.09, 0.05])
    assert gamma.index == pytest.approx((0.45 + 0.09 + 0.05) / 3)
    assert gamma.marks(top=1) == [[0, 0], [1, 0]]
    assert cf.frustration_index(s, z, n_concepts=2).scores.tolist() == pytest.approx([0.45])
    consistent = cf.frustration_index(np.abs(s), np.ones((3, 3)))
    assert consistent.index == 0 and consistent.marks() == []


def test_fisher_metric_is_the_weighted_gradient_outer_product():
    torch.manual_seed(0)
    model = cm.BlackBoxMLP(3, 5)
    x = np.random.default_rng(0).standard_normal((7, 3)).astype(np.float32)
    expected = np.zeros((3, 3))
    for row in x:
        point = torch.tensor(row, requires_grad=True)
        logit = model(point[None])[0]
        (g,) = torch.autograd.grad(logit, point)
        p = torch.sigmoid(logit).item()
        expected += p * (1 - p) * np.outer(g.numpy(), g.numpy()) / len(x)
    assert np.allclose(cm.fisher_metric(model, x, ridge=0.0), expected, atol=1e-6)


def test_training_lowers_every_models_loss():
    w = world(1.0)
    x, concepts, y = w.sample(400, np.random.default_rng(0))
    cfg = cm.ConceptModelsConfig(input_dim=12, n_concepts=5, hidden=16, sae_features=8,
                                 epochs=8, sae_epochs=8, batch_size=100, lr=1e-2, sae_lr=1e-2)
    _, bb = cm.train_black_box(x, y, cfg, 0)
    _, sae = cm.train_sae(x, cfg, 0)
    _, joint = cm.train_bottleneck(x, concepts[:, :5], y, cfg, 0)
    sequential_cfg = cm.ConceptModelsConfig(**{**cfg.to_dict(), "cbm_training": "sequential"})
    _, sequential = cm.train_bottleneck(x, concepts[:, :5], y, sequential_cfg, 0)
    for history in (bb, sae, joint):
        assert history[-1] < 0.7 * history[0]
    assert len(sequential) == 2 * cfg.epochs


# -- jobs ---------------------------------------------------------------------------------------

def tiny_synthetic(**overrides) -> cf.SyntheticParams:
    settings = dict(r=12, k=8, k_known=4, n=300, epochs=2, sae_epochs=2, hidden=8,
                    sae_features=6, batch_size=64, min_keep=20, monte_carlo=2000)
    return SYNTHETIC.params(**{**settings, **overrides})


def test_synthetic_saves_maps_bars_checkpoints_and_streams_progress(tmp_path):
    ctx = JobContext("j", tmp_path, emit=lambda event: None, seed=0)
    outputs = SYNTHETIC.run(ctx, tiny_synthetic(), {})
    for name in ("similarity_fisher", "similarity_euclidean", "similarity_fisher_after"):
        spec = json.loads((tmp_path / outputs[name]).read_text())
        assert spec["kind"] == "heatmap" and spec["symmetric"]
        assert spec["xlabels"] == [f"f{j}" for j in range(6)]
        assert all(0 <= r < len(spec["ylabels"]) and 0 <= c < 6 for r, c in spec["marks"])
    assert json.loads((tmp_path / outputs["similarity_fisher"]).read_text())["ylabels"] == \
        ["c0", "c1", "c2", "c3"]
    accuracy = json.loads((tmp_path / outputs["accuracy"]).read_text())
    assert accuracy["series"][0]["style"] == "bar" and len(accuracy["xticks"]) == 7
    terms = json.loads((tmp_path / outputs["signal_terms"]).read_text())
    assert [t[1] for t in terms["xticks"]][0] == "T1 known"
    bars = json.loads((tmp_path / outputs["missing_concept"]).read_text())
    assert [s["name"] for s in bars["series"]] == ["before", "after"]
    for name in ("black_box", "sae", "bottleneck_before", "bottleneck_after"):
        assert (tmp_path / outputs[f"checkpoint_{name}"] / "model.safetensors").exists()
    final = outputs["final"]
    assert final["after"]["concepts"][4:] == ["u0", "u1", "u2", "u3"]
    assert abs(final["bayes_accuracy_closed_form"] - final["bayes_accuracy_monte_carlo"]) < 0.05
    assert final["population_frustration"] > 0 == final["population_frustration_all_known"]
    table = json.loads((tmp_path / outputs["frustrated_pairs"]).read_text())
    assert all(len(row) == len(table["columns"]) for row in table["rows"])
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, 2 + 2 + 2 * 2 + 1))
    assert {"loss_black_box", "loss_sae", "loss_bottleneck"} <= {k for m in metrics for k in m}
    json.dumps(outputs)


def test_cancel_stops_the_job(tmp_path):
    ctx = JobContext("j", tmp_path, emit=lambda event: None, seed=0)
    ctx.request_cancel()
    with pytest.raises(Cancelled):
        SYNTHETIC.run(ctx, tiny_synthetic(epochs=1000), {})


@pytest.mark.parametrize("bad", [
    {"k_known": 8}, {"k": 20, "k_known": 4},  # 16 unknowns, only 6 known pairs
    {"alpha": 1.5}, {"omega": -0.1}, {"p_lo": 0.6}, {"epochs": 0}, {"cbm_training": "soft"},
    {"frustration": 1},
])
def test_invalid_synthetic_params_are_rejected(bad):
    with pytest.raises(ValidationError):
        tiny_synthetic(**bad)


def write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


def test_labelled_file_errors_name_the_file_and_the_column(tmp_path):
    p = TEXT.params(source="file")
    missing = write(tmp_path / "a.csv", "text,label,funny\nhi,1,0\nho,0,1\n")
    with pytest.raises(FormatError, match=r"a\.csv: .*at least two concept columns"):
        cf.load_labelled_file(missing, p)
    with pytest.raises(FormatError, match=r"a\.csv: no column 'sarcastic'"):
        cf.load_labelled_file(missing, TEXT.params(source="file", concepts=["funny",
                                                                           "sarcastic"]))
    no_task = write(tmp_path / "b.jsonl", '{"text": "hi", "y": 1, "a": 0, "b": 1}\n')
    with pytest.raises(FormatError, match=r"b\.jsonl: no column 'label'"):
        cf.load_labelled_file(no_task, p)
    bad_label = write(tmp_path / "c.csv", "text,label,a,b\nhi,1,0,maybe\nho,0,1,yes\n")
    with pytest.raises(FormatError, match=r"c\.csv: column 'b', row 1: 'maybe'"):
        cf.load_labelled_file(bad_label, p)
    three = write(tmp_path / "d.csv", "text,label,a,b\nhi,x,0,1\nho,y,1,0\nha,z,1,1\n")
    with pytest.raises(FormatError, match="exactly two values"):
        cf.load_labelled_file(three, p)
    good = write(tmp_path / "e.jsonl", '{"text": "hi", "label": "pos", "a": true, "b": 0}\n'
                                       '{"text": "ho", "label": "neg", "a": false, "b": 1}\n')
    texts, concepts, names, y = cf.load_labelled_file(good, p)
    assert texts == ["hi", "ho"] and names == ["a", "b"] and y.tolist() == [1, 0]
    assert concepts.tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_text_job_errors(tmp_path):
    ctx = JobContext("j", tmp_path, emit=lambda event: None, seed=0)
    with pytest.raises(ValueError, match="needs the `data` input"):
        TEXT.run(ctx, TEXT.params(source="file"), {})
    with pytest.raises(ValueError, match=r"missing: \['sarcasm'\] are not concepts"):
        TEXT.run(ctx, TEXT.params(n=20, missing=["sarcasm"]), {})
    with pytest.raises(ValidationError):
        TEXT.params(source="web")


def test_review_sentences_carry_their_labels():
    texts, concepts, liked = cf.review_sentences(200, np.random.default_rng(0))
    positive, negated = concepts[:, 0] == 1, concepts[:, 4] == 1
    assert np.array_equal(liked == 1, positive != negated)
    for text, row in zip(texts, concepts, strict=True):
        assert (("not" in text or "never" in text or "n't" in text) == bool(row[4]))
        assert text.endswith("!") == bool(row[3])
    assert len(set(texts)) > 150


def test_text_job_on_minilm_embeddings(tmp_path):
    ctx = JobContext("j", tmp_path, emit=lambda event: None, seed=0)
    outputs = TEXT.run(ctx, TEXT.params(n=60, epochs=3, sae_epochs=3, sae_features=8, hidden=8,
                                        min_keep=10), {})
    spec = json.loads((tmp_path / outputs["similarity_fisher"]).read_text())
    assert spec["ylabels"] == ["positive_word", "food", "intensified", "exclamation"]
    after = json.loads((tmp_path / outputs["similarity_fisher_after"]).read_text())
    assert after["ylabels"][-1] == "negated"
    assert np.load(tmp_path / outputs["fisher_metric"]).shape == (384, 384)
    final = outputs["final"]
    for label in ("before", "after"):
        assert math.isfinite(final[label]["gamma_fisher"])


def test_reproduce_smoke_returns_a_claim(tmp_path):
    ctx = JobContext("j", tmp_path, emit=lambda event: None, seed=0)
    outputs = REPRODUCE.run(ctx, REPRODUCE.params(smoke=True), {})
    claim = outputs["claim"]
    assert claim["smoke"] is True and claim["paper"] == "concept_frustration"
    assert [c["name"][:3] for c in claim["criteria"]] == ["(1)", "(2)", "(3)"]
    assert [c["target"] for c in claim["criteria"]] == [0.5, 0.8, 0.8]
    for criterion in claim["criteria"]:
        assert math.isfinite(criterion["measured"]) and criterion["paper"]
    assert claim["criteria"][0]["passed"]  # the closed form is exact at any size
    assert claim["passed"] == all(c["passed"] for c in claim["criteria"])
    gamma = json.loads((tmp_path / outputs["gamma"]).read_text())
    assert [s["name"] for s in gamma["series"]] == ["Fisher", "Euclidean"]
    json.dumps(claim)
    with pytest.raises(ValidationError):
        REPRODUCE.params(smoke=True, seeds=3)
