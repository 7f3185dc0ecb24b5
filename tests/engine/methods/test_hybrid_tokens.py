"""hybrid_tokens: the matched LMs, per-token scoring, alignment, categories and statistics."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from engine.context import JobContext
from engine.methods import hybrid_tokens as ht
from engine.models.hybrid_lm import GatedLinearRecurrence, HybridLM, HybridLMConfig, hybrid_mixers

SPECS = {spec.id: spec for spec in ht.SPECS}
TRAIN, COMPARE, REPRODUCE = (SPECS[f"hybrid_tokens.{verb}"]
                             for verb in ("train", "compare", "reproduce"))


# -- the model ------------------------------------------------------------------------------

def test_recurrence_is_causal():
    torch.manual_seed(0)
    layer = GatedLinearRecurrence(HybridLMConfig(vocab_size=10, d_model=16, n_heads=2))
    x = torch.randn(2, 12, 16)
    changed = x.clone()
    changed[:, 7] += 1.0
    before, after = layer(x), layer(changed)
    assert torch.allclose(before[:, :7], after[:, :7], atol=1e-6)
    assert not torch.allclose(before[:, 7:], after[:, 7:], atol=1e-4)


def test_recurrence_parallel_form_matches_the_step_by_step_recurrence():
    torch.manual_seed(1)
    cfg = HybridLMConfig(vocab_size=10, d_model=8, n_heads=2)
    layer = GatedLinearRecurrence(cfg)
    x = torch.randn(1, 9, 8)
    h = cfg.d_model // cfg.n_heads
    u = layer.short_conv(x)
    q, k, v = (t.view(1, 9, 2, h).transpose(1, 2) for t in layer.qkv(u).split(8, dim=2))
    k = k * h ** -0.5
    a = torch.sigmoid(layer.decay(x) + cfg.decay_bias).transpose(1, 2)  # (1, H, T)
    state = torch.zeros(1, 2, h, h)
    outputs = []
    for t in range(9):
        state = a[..., t, None, None] * state + k[:, :, t, :, None] * v[:, :, t, None, :]
        outputs.append((q[:, :, t, :, None] * state).sum(-2))
    stepwise = torch.stack(outputs, dim=2)
    expected = layer.proj(layer.norm(stepwise).transpose(1, 2).reshape(1, 9, 8))
    assert torch.allclose(layer(x), expected, atol=1e-5)


def test_mixer_switch_changes_the_computation_at_a_matched_budget():
    ids = torch.randint(0, 50, (1, 16))
    models = {}
    for mixers in ("aaaa", "rrra"):
        torch.manual_seed(0)
        models[mixers] = HybridLM(HybridLMConfig(vocab_size=50, mixers=mixers, d_model=32))
    assert not torch.allclose(models["aaaa"](ids), models["rrra"](ids), atol=1e-4)
    sizes = [HybridLM(HybridLMConfig(vocab_size=1024, mixers=mixers)).n_params()
             for mixers in ("aaaa", "rrra")]  # the reproduction's size
    assert abs(sizes[0] - sizes[1]) / sizes[0] < 0.005
    assert hybrid_mixers(8, 4) == "rrrarrra" and hybrid_mixers(3, 1) == "aaa"
    with pytest.raises(ValueError, match="one letter per layer"):
        HybridLMConfig(vocab_size=50, mixers="amx")


def test_training_lowers_the_held_out_loss_on_real_text():
    p = ht.TrainParams(corpus="news", max_chars=60_000, vocab_size=300, d_model=32, n_layers=2,
                       attention_every=2, n_heads=2, context=32, batch_size=8, steps=30,
                       eval_every=30, lr=1e-2)
    data = ht.prepare_data(p)
    seen = []
    model, losses = ht.train_lm(p, data, 0, lambda: None, lambda step, m: seen.append(m))
    start = math.log(data.tokenizer.vocab_size)  # the loss of an untrained (uniform) model
    assert seen[-1]["held_out_loss"] < start - 0.8
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.8
    assert [len(m) for m in seen].count(2) == 1  # held-out loss only at eval steps


# -- scoring and alignment ------------------------------------------------------------------

def tiny_scorer(mixers: str = "ra", max_len: int = 24) -> ht.Scorer:
    torch.manual_seed(0)
    model = HybridLM(HybridLMConfig(vocab_size=256, mixers=mixers, d_model=16, n_heads=2,
                                    max_len=max_len)).eval()
    return ht.Scorer("tiny", ht.ByteTokenizer().encode, model, max_len)


def test_per_token_losses_sum_to_the_sequence_nll():
    scorer = tiny_scorer()
    ids, _ = scorer.encode("a short text")
    losses = ht.token_losses(scorer, ids, window=24)
    assert math.isnan(losses[0]) and np.isfinite(losses[1:]).all()
    batch = torch.tensor([ids])
    with torch.no_grad():
        nll = torch.nn.functional.cross_entropy(scorer.logits(batch)[0, :-1], batch[0, 1:],
                                                reduction="sum").item()
    assert losses[1:].sum() == pytest.approx(nll, rel=1e-5)


def test_windowed_scoring_gives_each_token_its_window_context():
    scorer = tiny_scorer(max_len=8)
    ids, _ = scorer.encode("0123456789abcdefghij")  # 20 tokens, windows of 8, stride 4
    losses = ht.token_losses(scorer, ids, window=8)
    assert np.isfinite(losses[1:]).all()
    batch = torch.tensor([ids[8:16]])  # token 13 is scored in the window starting at 8
    with torch.no_grad():
        logp = torch.log_softmax(scorer.logits(batch)[0], -1)
    assert losses[13] == pytest.approx(-logp[4, ids[13]].item(), rel=1e-5)


def test_word_alignment_conserves_each_models_total_loss():
    text = "The cat (sat) on it."
    spans_a = [(0, 3), (3, 7), (7, 9), (9, 12), (12, 13), (13, 16), (16, 20)]  # " (" merged
    spans_b = [(i, i + 1) for i in range(len(text))]
    losses_a = np.array([0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    losses_b = np.ones(len(text))
    aligned = ht.align(text, spans_a, losses_a, spans_b, losses_b)
    assert aligned.kind == "word"
    words = [text[s:e].strip() for s, e in aligned.spans]
    assert "".join(text[s:e] for s, e in aligned.spans) == text  # the units cover the text
    assert words == ["The", "cat", "(", "sat", ")", "on", "it", "."]
    assert np.nansum(aligned.losses[0]) == pytest.approx(losses_a.sum())
    assert np.nansum(aligned.losses[1]) == pytest.approx(losses_b.sum())
    assert aligned.losses[1, words.index("sat")] == 3.0  # "sat" and no space
    assert aligned.losses[1, words.index("(")] == 2.0  # " (": the space goes to the next unit
    assert math.isnan(aligned.losses[0, words.index("it")])  # " it." went to "." in model a
    losses_a[0] = losses_b[0] = np.nan  # the first token has no prediction ...
    unscored = ht.align(text, spans_a, losses_a, spans_b, losses_b)
    assert np.isnan(unscored.losses[:, 0]).all()  # ... so neither model scores "The"
    same = ht.align(text, spans_b, losses_b, spans_b, losses_b + 1)
    assert same.kind == "token" and np.nanmean(same.gap) == pytest.approx(-1.0)


# -- categories -------------------------------------------------------------------------------

@pytest.mark.parametrize(("token", "kind"), [
    ("(", "opening"), (" [", "opening"), ("({", "opening"), (")", "closing"), ("):", "closing"),
    ("]]", "closing"), ("()", None), ("f(", None), ("a", None), (" ", None), (",", None),
])
def test_delimiter_classification(token, kind):
    assert ht.delimiter_kind(token) == kind


def test_word_classes_and_repeated_ngrams_on_examples():
    assert [ht.word_class(w) for w in ("The", "of", "would", "don't", "river", "Parliament")] \
        == ["function"] * 4 + ["content"] * 2
    prose = "the river bank. the river bank"
    code = "f(x)[0]"
    text = ht.EvalText(prose + "\n\n" + code, [0, len(prose) + 2], ["prose", "code"])
    spans = [m.span() for m in ht.UNIT.finditer(text.text)]
    cats = ht.categorise(text, spans, ngram=2, context=100)
    by_text = list(zip(cats.texts, cats.word_class, cats.delimiter, cats.repeated, strict=True))
    assert by_text[:4] == [("the", "function", None, None), ("river", "content", None, False),
                           ("bank", "content", None, False), (".", None, None, False)]
    assert [r for *_, r in by_text[4:7]] == [False, True, True]  # "the river", "river bank"
    code_units = by_text[7:]
    assert [(t, c, d) for t, c, d, _ in code_units] == [
        ("f", None, None), ("(", None, "opening"), ("x", None, None), (")", None, "closing"),
        ("[", None, "opening"), ("0", None, None), ("]", None, "closing")]
    assert code_units[0][3] is None  # a new document starts its n-gram history afresh
    masks = ht.category_masks(cats)
    assert masks["opening (code)"].sum() == 2 and masks["closing (prose)"].sum() == 0
    assert cats.log_frequency[0] == pytest.approx(math.log(2))  # "the" occurs twice


# -- statistics -------------------------------------------------------------------------------

def test_bootstrap_interval_covers_the_mean_and_shrinks_with_n():
    rng = np.random.default_rng(0)
    widths = []
    for n in (100, 10_000):
        values = rng.normal(0.3, 1.0, n)
        mean, lo, hi = ht.bootstrap_mean(values, 400, rng)
        assert lo < mean < hi and mean == pytest.approx(values.mean())
        assert hi - lo == pytest.approx(2 * 1.96 / math.sqrt(n), rel=0.25)
        widths.append(hi - lo)
    assert widths[1] < widths[0] / 5
    diff, lo, hi = ht.bootstrap_difference(rng.normal(1, 1, 2000), rng.normal(0, 1, 2000), 400,
                                           rng)
    assert 0.8 < lo < diff < hi < 1.2
    assert all(math.isnan(v) for v in ht.bootstrap_mean(np.array([]), 10, rng))


def test_regression_recovers_category_effects_controlling_for_frequency():
    rng = np.random.default_rng(1)
    n = 4000
    cls = rng.choice(["content", "function", None], n)
    freq = rng.normal(0, 1, n)
    gap = 0.05 * (cls == "content") + 0.01 * (cls == "function") - 0.02 * freq \
        + rng.normal(0, 0.01, n)
    cats = ht.Categories([str(i) for i in range(n)], ["prose"] * n, list(cls), [None] * n,
                         [None] * n, freq)
    rows = {row[0]: row for row in ht.gap_regression(gap, cats)}
    assert rows["content"][1] == pytest.approx(0.05, abs=0.003)
    assert rows["function"][1] == pytest.approx(0.01, abs=0.003)
    assert rows["log frequency"][1] == pytest.approx(-0.02, abs=0.002)
    assert rows["content"][3] < 0.05 < rows["content"][4]
    assert math.isnan(rows["opening"][1])  # no delimiters: the term is left out, not made up


# -- jobs, files and parameters ----------------------------------------------------------------

@pytest.mark.parametrize("bad", [
    {"steps": 0}, {"corpus": "books"}, {"d_model": 30, "n_heads": 4}, {"vocab_size": 100},
    {"architecture": "mamba"}, {"lr": 0}, {"depth": 3},
])
def test_invalid_train_params_are_rejected(bad):
    with pytest.raises(ValidationError):
        TRAIN.params(**bad)


def test_invalid_compare_and_reproduce_params_are_rejected():
    with pytest.raises(ValidationError):
        COMPARE.params(n_boot=1)
    with pytest.raises(ValidationError):
        REPRODUCE.params(smoke=True, seeds=3)


def test_bad_model_folders_and_text_files_give_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="not a folder"):
        ht.load_scorer(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="neither cfg.json"):
        ht.load_scorer(str(tmp_path))
    (tmp_path / "cfg.json").write_text("{broken")
    with pytest.raises(ValueError, match="cfg.json: not valid JSON"):
        ht.load_scorer(str(tmp_path))
    (tmp_path / "cfg.json").write_text(json.dumps({"model": "sae"}))
    with pytest.raises(ValueError, match="not a hybrid_tokens checkpoint"):
        ht.load_scorer(str(tmp_path))
    binary = tmp_path / "blob.txt"
    binary.write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(ValueError, match="blob.txt: not UTF-8"):
        ht.read_text_file(str(binary))
    ctx = JobContext("j", tmp_path / "run", emit=lambda event: None, seed=0)
    with pytest.raises(ValueError, match="input model_b is missing"):
        COMPARE.run(ctx, COMPARE.params(), {"model_a": str(tmp_path)})


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    folder = tmp_path_factory.mktemp("smoke")
    outputs = REPRODUCE.run(JobContext("j", folder, emit=lambda event: None, seed=0),
                            REPRODUCE.params(smoke=True), {})
    return folder, outputs


def test_reproduce_smoke_is_well_formed(smoke):
    folder, outputs = smoke
    claim = outputs["claim"]
    assert claim["smoke"] and claim["paper"] == "hybrid_tokens" and claim["seeds"] == [0]
    assert len(claim["criteria"]) == 3
    assert [c["op"] for c in claim["criteria"]] == [">", ">", "<"]
    for criterion in claim["criteria"]:
        assert criterion["target"] == 0.0 and criterion["paper"]
    assert claim["passed"] == all(c["passed"] for c in claim["criteria"])
    heat = json.loads((folder / outputs["gap_text"]).read_text())
    assert heat["view"] == "token_heat"
    assert len(heat["tokens"]) == len(heat["values"]) == len(heat["details"]) > 100
    assert "code text follows" in heat["details"]  # prose first, then a stretch of code
    bars = json.loads((folder / outputs["category_plot"]).read_text())
    bar = bars["series"][0]
    assert bar["style"] == "bar" and len(bar["lo"]) == len(bars["xticks"]) == 10
    table = json.loads((folder / outputs["categories"]).read_text())
    assert table["rows"][0][0] == "all" and table["rows"][1][-1] == "~0.04"
    losses = np.load(folder / outputs["losses"])
    assert losses.shape == (2, outputs["summary"]["units"])
    json.dumps(claim)


def test_compare_job_on_saved_checkpoints_and_a_text_file(smoke, tmp_path):
    folder, outputs = smoke
    text = tmp_path / "sample.py"
    text.write_text("x = f(a + b)\n" * 8)
    ctx = JobContext("c", tmp_path / "run", emit=lambda event: None, seed=0)
    inputs = {"model_a": str(folder / outputs["checkpoint_transformer"]),
              "model_b": str(folder / outputs["checkpoint_hybrid"]), "text": str(text)}
    result = COMPARE.run(ctx, COMPARE.params(n_boot=100), inputs)
    summary = result["summary"]
    assert summary["unit"] == "token" and summary["model_a"].startswith("transformer")
    unit_losses = np.load(tmp_path / "run" / result["losses"])
    assert summary["gaps"]["all"] == pytest.approx(float(np.mean(unit_losses[0] -
                                                                 unit_losses[1])), rel=1e-4)
    table = json.loads((tmp_path / "run" / result["categories"]).read_text())
    counts = {row[0]: row[1] for row in table["rows"]}
    assert counts["opening (code)"] > 0 and counts["content (prose)"] == 0  # a .py file is code
    assert counts["repeated n-gram"] > 0  # the snippet repeats


def test_train_job_saves_a_checkpoint_that_compare_can_load(tmp_path):
    ctx = JobContext("t", tmp_path, emit=lambda event: None, seed=0)
    params = TRAIN.params(architecture="transformer", corpus="news", max_chars=20_000,
                          tokenizer="byte", d_model=16, n_layers=1, n_heads=2, context=16,
                          batch_size=2, steps=12, eval_every=6)
    outputs = TRAIN.run(ctx, params, {})
    folder = tmp_path / outputs["checkpoint"]
    cfg = json.loads((folder / "cfg.json").read_text())
    assert cfg["model"] == "hybrid_lm" and cfg["config"]["mixers"] == "a"
    scorer = ht.load_scorer(str(folder))
    assert scorer.encode("é")[0] == [195, 169]
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [6, 10, 12] and "loss" in metrics[1]


@pytest.mark.slow  # importing transformers' GPT-2 takes several seconds
def test_a_local_hugging_face_model_is_scored_and_aligned_on_words(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    text = "The cat sat on the mat (twice), then [again] on the mat."
    bpe = ht.BPETokenizer.train([text] * 20, 280)
    PreTrainedTokenizerFast(tokenizer_object=bpe.tokenizer).save_pretrained(tmp_path)
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=bpe.vocab_size, n_positions=32, n_embd=16, n_layer=1,
                               n_head=2, eos_token_id=0, bos_token_id=0)).save_pretrained(tmp_path)
    hf = ht.load_scorer(str(tmp_path))
    assert hf.max_window == 32
    ids, spans = hf.encode(text)
    assert spans == bpe.encode(text)[1]
    losses = ht.token_losses(hf, ids, window=32)
    batch = torch.tensor([ids])
    with torch.no_grad():
        nll = torch.nn.functional.cross_entropy(hf.logits(batch)[0, :-1], batch[0, 1:],
                                                reduction="sum").item()
    assert losses[1:].sum() == pytest.approx(nll, rel=1e-5)
    result = ht.compare_models((hf, tiny_scorer()), ht.EvalText(text, [0], ["prose"]),
                               ht.CompareParams(n_boot=50, window=32))
    assert result.aligned.kind == "word" and np.isfinite(result.aligned.losses).all()
    assert result.groups["opening delimiter"][0] == 2 and result.groups["function (prose)"][0] > 0
