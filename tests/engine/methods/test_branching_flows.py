"""branching_flows: the forest process, the switch, training, sampling and the playback files."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from engine.context import Cancelled, JobContext
from engine.methods import branching_flows as bf
from engine.models.branching_flows import (
    BranchingFlowConfig,
    BranchingTransformer,
    build_forest,
    generate,
    split_time,
    start_sizes,
    state_at,
    training_batch,
)

SPECS = {spec.id: spec for spec in bf.SPECS}
MOLECULES = SPECS["branching_flows.molecules"]
ANTIBODIES = SPECS["branching_flows.antibodies"]
REPRODUCE = SPECS["branching_flows.reproduce"]
needs_antibodies = pytest.mark.skipif(
    not bf.ANTIBODIES.is_file() and os.environ.get("CI") != "true",
    reason=f"{bf.ANTIBODIES} is absent (../shared/data)")


def context(path: Path) -> JobContext:
    return JobContext("j", path, emit=lambda event: None, seed=0)


def circle_forest_sizes(cfg: BranchingFlowConfig, t: float, count: int = 400
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(data lengths, live elements at t, roots) over ``count`` circle samples."""
    rng = np.random.default_rng(1)
    data = bf.circle_sets(count, rng)
    rows = []
    for coords, tokens in data.samples:
        forest = build_forest(coords, tokens, rng, cfg)
        rows.append((len(tokens), len(state_at(forest, t, rng, cfg)), len(forest.roots)))
    return tuple(np.array(column) for column in zip(*rows, strict=True))


# -- the forward process -----------------------------------------------------------------------

def test_sizes_at_t1_are_the_data_and_at_t0_the_roots():
    cfg = BranchingFlowConfig(merge_prob=0.8, deletion_rate=0.5)
    lengths, at_end, roots = circle_forest_sizes(cfg, 1.0 - 1e-9)
    assert np.array_equal(at_end, lengths)  # deleted duplicates are gone, every split happened
    lengths, at_start, roots = circle_forest_sizes(cfg, 0.0)
    assert np.array_equal(at_start, roots) and roots.mean() < 0.6 * lengths.mean()
    # the start distribution the sampler draws from is the roots' distribution
    start = start_sizes(lengths, np.random.default_rng(2), cfg, draws=20_000)
    empirical = np.bincount(roots, minlength=len(start)) / len(roots)
    assert 0.5 * np.abs(empirical[:len(start)] - start[:len(empirical)]).sum() < 0.08


def test_elements_reach_their_anchors_and_split_targets_count_the_leaves():
    cfg = BranchingFlowConfig(merge_prob=0.7, deletion_rate=0.3, sigma=0.5)
    rng = np.random.default_rng(0)
    coords = rng.normal(size=(9, 2)).astype(np.float32)
    forest = build_forest(coords, np.zeros(9, dtype=np.int64), rng, cfg)
    end = state_at(forest, 1.0 - 1e-12, rng, cfg)
    assert np.allclose(end.x, coords, atol=1e-4) and not end.splits.any()
    start = state_at(forest, 0.0, rng, cfg)
    duplicates = sum(forest.deleted)
    assert start.splits.sum() == 9 + duplicates - len(forest.roots)
    # a merged anchor is the weighted mean of its leaves: the roots' mean is the data's mean
    weights = start.splits + 1
    assert np.allclose((weights[:, None] * start.target_x).sum(0) / weights.sum(),
                       np.mean([forest.anchor_x[i] for i in range(len(forest.weight))
                                if forest.left[i] < 0], axis=0), atol=1e-5)


def test_split_times_follow_beta_1_2_truncated_to_the_parent_time():
    rng = np.random.default_rng(0)
    t0, weight = 0.3, 3  # the first of two pending splits
    times = np.array([split_time(t0, weight, rng) for _ in range(20_000)])
    for u in (0.4, 0.6, 0.8):
        survival = ((1 - u) / (1 - t0)) ** (2 * (weight - 1))
        assert abs((times > u).mean() - survival) < 0.015
    assert times.min() >= t0


def test_tokens_merge_to_the_mask_unless_equal_and_unmask_by_the_end():
    cfg = BranchingFlowConfig(coord_dim=0, n_tokens=4, merge_prob=1.0, deletion_rate=0.0)
    rng = np.random.default_rng(0)
    tokens = np.array([2, 2, 3])
    forest = build_forest(np.zeros((3, 0), dtype=np.float32), tokens, rng, cfg)
    root = forest.roots[0]
    assert len(forest.roots) == 1 and forest.anchor_tok[root] == cfg.mask_token
    start = state_at(forest, 0.0, rng, cfg)
    assert start.tok.tolist() == [cfg.mask_token]
    assert state_at(forest, 1.0 - 1e-12, rng, cfg).tok.tolist() == [2, 2, 3]


# -- the switch --------------------------------------------------------------------------------

def test_branching_off_keeps_the_length_and_drops_the_split_and_deletion_losses():
    on = BranchingFlowConfig(sigma=0.2)
    off = BranchingFlowConfig(sigma=0.2, branching=False)
    lengths, mid_off, roots = circle_forest_sizes(off, 0.5, count=100)
    assert np.array_equal(mid_off, lengths) and np.array_equal(roots, lengths)
    assert not np.array_equal(circle_forest_sizes(on, 0.5, count=100)[1], lengths)
    data = bf.circle_sets(16, np.random.default_rng(0))
    torch.manual_seed(0)
    model = BranchingTransformer(off)
    parts = model.loss(training_batch(data.samples, np.random.default_rng(0), off))
    assert set(parts) == {"coords", "loss"}
    made = generate(model, 30, start_sizes(data.lengths, np.random.default_rng(0), off), 5,
                    np.random.default_rng(0), record=2)
    assert all(len({len(f.x) for f in frames}) == 1 for frames in made.trajectories)
    assert set(len(x) for x, _ in made.sets) <= set(data.lengths.tolist())


# -- training and sampling ---------------------------------------------------------------------

def test_training_lowers_the_loss_and_moves_lengths_toward_the_data(tmp_path):
    data = bf.circle_sets(500, np.random.default_rng(0))
    p = bf.Params(steps=150, batch_size=32, d_model=32, n_layers=2, lr=3e-3, sigma=0.2,
                  samples=150, sampling_steps=20, trajectories=6)
    cfg = bf.model_config(p, data)
    start = start_sizes(data.lengths, np.random.default_rng(0), cfg)
    torch.manual_seed(0)
    untrained = generate(BranchingTransformer(cfg), p.samples, start, p.sampling_steps,
                         np.random.default_rng(3))
    trained = bf.train(data, p, 0, context(tmp_path))
    assert np.mean(trained.losses[-20:]) < 0.8 * np.mean(trained.losses[:20])
    made = generate(trained.model, p.samples, start, p.sampling_steps, np.random.default_rng(3),
                    record=p.trajectories)
    before = bf.total_variation(np.array([len(t) for _, t in untrained.sets]), data.lengths)
    after = bf.total_variation(np.array([len(t) for _, t in made.sets]), data.lengths)
    assert after < before
    lengths = [len(t) for _, t in made.sets]
    assert len(set(lengths)) > 3
    assert any(len({len(f.x) for f in frames}) > 1 for frames in made.trajectories)


def test_cancel_saves_a_checkpoint_and_stops(tmp_path):
    ctx = context(tmp_path)
    ctx.request_cancel()
    with pytest.raises(Cancelled):
        bf.train(bf.circle_sets(8, np.random.default_rng(0)), bf.Params(steps=100), 0, ctx)
    assert (tmp_path / "checkpoints" / "model" / "model.safetensors").is_file()


def read_xyz_frames(path: Path) -> list[tuple[str, list[str]]]:
    lines, frames, at = path.read_text().splitlines(), [], 0
    while at < len(lines):
        count = int(lines[at])
        atoms = lines[at + 2:at + 2 + count]
        assert all(len(atom.split()) == 4 for atom in atoms)
        frames.append((lines[at + 1], [atom.split()[0] for atom in atoms]))
        at += 2 + count
    return frames


def test_molecules_write_playable_trajectories_and_resume_from_the_checkpoint(tmp_path):
    params = MOLECULES.params(molecules=8, max_atoms=16, steps=3, batch_size=4, d_model=16,
                              n_heads=2, samples=6, sampling_steps=8, trajectories=2)
    outputs = MOLECULES.run(context(tmp_path / "a"), params, {})
    frames = read_xyz_frames(tmp_path / "a" / outputs["trajectory_0"])
    assert len(frames) == 9 and frames[0][0] == "t=0.000" and frames[-1][0] == "t=1.000"
    assert len({len(symbols) for _, symbols in frames}) > 1  # the atom count changes
    assert set(frames[-1][1]) <= set(bf.ELEMENTS)  # nothing masked at the end
    samples = read_xyz_frames(tmp_path / "a" / outputs["samples_xyz"])
    assert 1 <= len(samples) <= 6
    table = json.loads((tmp_path / "a" / outputs["metrics"]).read_text())
    values = dict(table["rows"])
    assert {"length_tv", "validity", "uniqueness", "composition_tv"} <= set(values)
    assert values["data_validity"] == 1.0
    spec = json.loads((tmp_path / "a" / outputs["length_plot"]).read_text())
    assert [s["name"] for s in spec["series"]] == ["data", "generated"]
    metrics = (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()
    assert {"loss", "splits", "deletion", "tokens", "coords"} <= set(json.loads(metrics[-1]))
    folder = str(tmp_path / "a" / outputs["checkpoint"])
    again = MOLECULES.run(context(tmp_path / "b"), MOLECULES.params(
        steps=0, checkpoint=folder, samples=3, sampling_steps=4, trajectories=1), {})
    assert again["final"]["steps_done"] == 3
    with pytest.raises(ValueError, match="molecules"):
        ANTIBODIES.run(context(tmp_path / "c"), ANTIBODIES.params(
            steps=0, checkpoint=folder, samples=2, trajectories=1), {})


@needs_antibodies
def test_antibodies_write_sequence_trajectories_of_changing_length(tmp_path):
    params = ANTIBODIES.params(chains="VL", steps=2, batch_size=4, d_model=16, n_heads=2,
                               samples=3, sampling_steps=6, trajectories=1)
    outputs = ANTIBODIES.run(context(tmp_path), params, {})
    lines = (tmp_path / outputs["sequence_trajectory_0"]).read_text().splitlines()
    headers, sequences = lines[0::2], lines[1::2]
    assert headers[0] == ">t=0.000" and headers[-1] == ">t=1.000" and len(headers) == 7
    assert len({len(s) for s in sequences}) > 1
    assert set(sequences[-1]) <= set(bf.AMINO_ACIDS)
    fasta = (tmp_path / outputs["samples_fasta"]).read_text()
    assert fasta.startswith(">sample_0")
    assert "composition_tv" in outputs["final"]


def test_missing_antibody_file_names_the_path(tmp_path):
    missing = tmp_path / "jain2017_sd02.csv"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        bf.antibody_dataset("VH", missing)


@pytest.mark.parametrize("bad", [
    {"steps": 0}, {"d_model": 30, "n_heads": 4}, {"merge_prob": 1.5}, {"sigma": -1},
    {"samples": 2, "trajectories": 3}, {"lr": 0}, {"molecule": 3}, {"max_atoms": 2},
])
def test_invalid_params_are_rejected(bad):
    with pytest.raises(ValidationError):
        MOLECULES.params(**bad)


def test_a_folder_that_is_not_a_checkpoint_is_named(tmp_path):
    with pytest.raises(ValueError, match=str(tmp_path)):
        bf.load_checkpoint(tmp_path, "molecules")


def test_reproduce_smoke_returns_a_claim(tmp_path):
    outputs = REPRODUCE.run(context(tmp_path), REPRODUCE.params(smoke=True), {})
    claim = outputs["claim"]
    assert claim["smoke"] is True and claim["paper"] == "branching_flows"
    assert [c["target"] for c in claim["criteria"]] == [0.1, 0.1]
    for criterion in claim["criteria"]:
        assert math.isfinite(criterion["measured"]) and criterion["paper"]
    assert claim["passed"] == all(c["passed"] for c in claim["criteria"])
    assert {"validity", "length_tv"} <= set(outputs["molecules"])
    json.dumps(outputs["claim"])
