"""The Claim in the criterion schema (issue 23): v1 criteria converted, verdicts, sanity
checks apart, and the profile, settings and exploratory mark that ``reproduce_spec`` records."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import Field, ValidationError

from engine import verdicts
from engine.api import Claim, Criterion, ReproduceParams, profile_settings, reproduce_spec
from engine.context import JobContext


def claim_of(*criteria, **extra) -> Claim:
    return Claim("paper", "statement", list(criteria), seeds=[0], wall_s=1.0, **extra)


def test_v1_criteria_become_schema_rows_that_keep_their_v1_keys():
    data = claim_of(Criterion("a", 2.0, 1.0, ">=", paper="the paper's words", note="why"),
                    Criterion("b", 1.0, 1.0, ">=")).to_dict()
    assert data["spec"] == "v1" and data["verdict"] == "PASS" and data["passed"] is True
    first = data["criteria"][0]
    assert first["quote"] == "the paper's words" and first["method"] == "single run (v1)"
    assert first["interval"] == [2.0, 2.0] and first["rule"]["kind"] == "inside_band"
    assert (first["measured"], first["target"], first["op"], first["passed"]) == (
        2.0, 1.0, ">=", True)
    assert data["criteria"][1]["verdict"] == "PASS"  # equality still passes ">="
    assert data["notes"] == "a: why"  # v1 notes join the claim's notes
    for row in data["criteria"]:
        assert verdicts.Criterion.from_dict(row).verdict == row["verdict"]


def test_a_nan_measurement_is_inconclusive_and_json_safe():
    data = claim_of(Criterion("ok", 1.0, 0.0, ">"),
                    Criterion("nan", math.nan, 0.0, ">")).to_dict()
    assert data["verdict"] == "INCONCLUSIVE" and data["passed"] is False
    nan = data["criteria"][1]
    assert nan["measured"] is None and nan["passed"] is False and nan["decides_with"]
    json.loads(json.dumps(data, allow_nan=False))


def test_a_failing_v1_criterion_fails_the_paper():
    data = claim_of(Criterion("ok", 1.0, 0.0, ">"), Criterion("bad", -1.0, 0.0, ">")).to_dict()
    assert data["verdict"] == "FAIL" and [c["verdict"] for c in data["criteria"]] == [
        "PASS", "FAIL"]


def test_v1_criteria_with_seeds_are_decided_from_their_interval():
    interval = verdicts.t_interval([0.9, 1.1, 1.0])  # mean 1.0, touching nothing below 0.5
    wide = verdicts.t_interval([0.0, 2.0])
    data = claim_of(Criterion("narrow", 1.0, 0.5, ">", interval=interval),
                    Criterion("wide", 1.0, 0.5, ">", interval=wide)).to_dict()
    narrow, open_ = data["criteria"]
    assert narrow["method"] == "t-interval over 3 seeds" and narrow["verdict"] == "PASS"
    assert narrow["interval"][0] < 1.0 < narrow["interval"][1]
    assert open_["verdict"] == "INCONCLUSIVE" and data["verdict"] == "INCONCLUSIVE"


def test_v2_criteria_and_sanity_checks_sit_beside_v1_ones():
    v2 = verdicts.combine("both", "the abstract", [
        verdicts.criterion("p1", "x", verdicts.Interval(1.0, 0.8, 1.2, 0.95, "bootstrap"),
                           verdicts.Rule.above(0.5)),
        verdicts.criterion("p2", "y", verdicts.Interval(0.1, -0.1, 0.3, 0.95, "bootstrap"),
                           verdicts.Rule.inside((-0.5, 0.5)))])
    failing_sanity = verdicts.SanityCheck("identity holds", False, "off by 1e-3")
    claim = claim_of(v2, Criterion("v1", 3.0, 1.0, ">"), spec="v2", sanity=[failing_sanity])
    data = claim.to_dict()
    assert claim.verdict == "PASS" and data["passed"] is True  # sanity never counts
    assert data["spec"] == "v2" and data["sanity"] == [failing_sanity.to_dict()]
    assert [p["name"] for p in data["criteria"][0]["parts"]] == ["p1", "p2"]
    assert "measured" not in data["criteria"][0]


def test_claim_refuses_an_unknown_spec_or_profile():
    with pytest.raises(ValueError, match="spec"):
        claim_of(spec="v3")
    with pytest.raises(ValueError, match="profile"):
        claim_of(profile="tpu")
    assert claim_of(smoke=True).profile == "smoke" and claim_of().profile == "cpu"


def test_smoke_is_the_smoke_profile():
    assert ReproduceParams(smoke=True).profile == "smoke"
    assert ReproduceParams(profile="smoke").smoke is True
    assert ReproduceParams(profile="gpu").smoke is False
    resolved = ReproduceParams(smoke=True).model_dump(mode="json")
    assert ReproduceParams.model_validate(resolved).profile == "smoke"  # the worker's round trip
    with pytest.raises(ValidationError, match="contradicts profile 'gpu'"):
        ReproduceParams(smoke=True, profile="gpu")


class SizedParams(ReproduceParams):
    PROFILE_SETTINGS = {"smoke": {"draws": 5, "seeds": 1}, "gpu": {"draws": 1000}}

    draws: int = Field(100, ge=1)
    seeds: int = Field(3, ge=1)


def fake_run(ctx: JobContext, params: SizedParams, inputs: dict) -> dict:
    claim = Claim("fake", "draws help", [Criterion("draws", params.draws, 1, ">")],
                  seeds=list(range(params.seeds)), wall_s=0.0, smoke=params.smoke)
    ctx.save_artifact("claim", claim.to_dict(), kind="claim")  # saved before it is returned
    return {"claim": claim.to_dict()}


FAKE = reproduce_spec("fake", "Fake", fake_run, SizedParams)


def run_fake(tmp_path, **params) -> dict:
    ctx = JobContext("job1", tmp_path, emit=lambda _event: None, seed=0)
    return FAKE.run(ctx, FAKE.params(**params), {})["claim"]


def test_profile_settings_are_data_over_the_defaults():
    assert profile_settings(SizedParams, "cpu") == {"draws": 100, "seeds": 3}
    assert profile_settings(SizedParams, "smoke") == {"draws": 5, "seeds": 1}
    assert profile_settings(SizedParams, "gpu") == {"draws": 1000, "seeds": 3}
    assert FAKE.describe()["profiles"] == {"smoke": {"draws": 5, "seeds": 1},
                                           "cpu": {"draws": 100, "seeds": 3},
                                           "gpu": {"draws": 1000, "seeds": 3}}
    params = SizedParams(smoke=True)  # a parameter not given takes its profile's value
    assert (params.draws, params.seeds) == (5, 1)
    assert SizedParams(profile="gpu", seeds=2).draws == 1000

    class Unknown(SizedParams):
        PROFILE_SETTINGS = {"tpu": {}}

    class Invalid(SizedParams):
        PROFILE_SETTINGS = {"gpu": {"draws": 0}}

    with pytest.raises(ValueError, match="unknown profiles"):
        reproduce_spec("fake", "Fake", fake_run, Unknown)
    with pytest.raises(ValidationError):
        reproduce_spec("fake", "Fake", fake_run, Invalid)


def test_the_claim_records_its_profile_and_marks_other_settings_exploratory(tmp_path):
    claim = run_fake(tmp_path, profile="gpu", draws=1000)  # the profile's own value
    assert (claim["profile"], claim["exploratory"], claim["overrides"]) == ("gpu", False, {})
    assert claim["settings"] == {"draws": 1000, "seeds": 3}
    claim = run_fake(tmp_path, smoke=True)
    assert claim["profile"] == "smoke" and claim["smoke"] is True
    assert claim["settings"] == {"draws": 5, "seeds": 1} and not claim["exploratory"]
    claim = run_fake(tmp_path, seeds=5)  # cpu with one setting changed
    assert claim["exploratory"] is True and claim["overrides"] == {"seeds": 5}
    assert claim["settings"] == {"draws": 100, "seeds": 3} and claim["seeds"] == list(range(5))
    claim = run_fake(tmp_path, profile="smoke", draws=100)  # the cpu value is not smoke's
    assert claim["exploratory"] is True and claim["overrides"] == {"draws": 100}
    saved = json.loads((tmp_path / "artifacts" / "claim.json").read_text())
    assert saved["exploratory"] is True and saved["overrides"] == {"draws": 100}
    assert saved["profile"] == "smoke" and saved["settings"] == {"draws": 5, "seeds": 1}
    outside = Claim("fake", "s", [], [0], 0.0).to_dict()  # no reproduction running
    assert outside["profile"] == "cpu" and "overrides" not in outside


@pytest.mark.parametrize("slug", ["scicl", "causal_fairness"])  # papers not yet on their v2 spec
def test_real_smoke_reproductions_return_the_schema_marked_v1(tmp_path, slug):
    import importlib

    module = importlib.import_module(f"engine.methods.{slug}")
    spec = next(s for s in module.SPECS if s.id == f"{slug}.reproduce")
    ctx = JobContext("job1", tmp_path, emit=lambda _event: None, seed=0)
    claim = spec.run(ctx, spec.params(profile="smoke"), {})["claim"]
    json.loads(json.dumps(claim, allow_nan=False))
    assert claim["spec"] == "v1" and claim["profile"] == "smoke" and claim["smoke"] is True
    assert claim["exploratory"] is False and claim["settings"] == profile_settings(
        spec.params, "smoke")
    assert claim["verdict"] in verdicts.VERDICTS and claim["passed"] == (
        claim["verdict"] == "PASS")
    assert claim["sanity"] == []
    for row in claim["criteria"]:
        parsed = verdicts.Criterion.from_dict(row)
        assert parsed.verdict == row["verdict"] and parsed.rule is not None
        assert row["quote"] == row["paper"] and row["passed"] == (row["verdict"] == "PASS")
    assert claim["verdict"] == verdicts.paper_verdict(
        [verdicts.Criterion.from_dict(row) for row in claim["criteria"]])
