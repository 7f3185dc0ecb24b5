"""discriminative_factorization: the generator, the estimator, budgets, and black-box clients."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from pydantic import ValidationError

from engine.context import Cancelled, JobContext
from engine.methods import discriminative_factorization as df
from engine.models.black_box_generators import CharNGramLM, EndpointError, EndpointGenerator
from engine.models.llm_mechanisms import ChatClient

SPECS = {spec.id: spec for spec in df.SPECS}
SYNTHETIC = SPECS["discriminative_factorization.synthetic"]
BLACK_BOX = SPECS["discriminative_factorization.black_box"]
REPRODUCE = SPECS["discriminative_factorization.reproduce"]
KEY = "sk-test-do-not-store-7f3a9c"


def context(tmp_path) -> JobContext:
    return JobContext("j", tmp_path, emit=lambda event: None, seed=0)


# -- the generator and the estimator ---------------------------------------------------------------

def test_synthetic_responses_realise_the_factorization_exactly():
    rng = np.random.default_rng(0)
    problem = df.make_problem(rng, n_queries=50, rank=3, signal_prob=0.4, noise_scale=2.0,
                              embed_dim=6)
    theta = problem.panel(7, rng)
    distances = df.pair_distance_matrix(problem.responses(theta, np.arange(50), rng))
    first, second = np.triu_indices(7, k=1)
    differ = (theta[first] != theta[second]).astype(float)  # (pairs, r)
    expected = problem.alpha @ (differ * problem.scales).T
    np.testing.assert_allclose(distances, expected, atol=1e-10)
    assert list(theta[:, 0]) == [0, 1, 0, 1, 0, 1, 0]
    assert problem.rho == pytest.approx((problem.alpha == 0).mean(axis=0).max())


@pytest.mark.parametrize("signal_prob", [0.1, 0.3])
def test_estimator_recovers_planted_rank_rho_and_budget(signal_prob):
    rng = np.random.default_rng(1)
    problem = df.make_problem(rng, n_queries=500, rank=5, signal_prob=signal_prob)
    theta = problem.panel(20, rng)
    est = df.estimate(df.pair_distance_matrix(problem.responses(theta, np.arange(500), rng)))
    assert est.rank == 5
    assert est.rho_hat == pytest.approx(problem.rho, abs=0.04)
    assert est.m_star == df.predicted_budget(5, est.rho_hat, 0.05)
    with pytest.raises(ValueError, match="rank 600"):
        df.estimate(np.ones((500, 4)), rank=600)
    assert est.field.shape == (500, 5) and (est.field >= 0).all()
    assert sorted(est.ranking) == list(range(500))


def test_elbow_and_budget_formulas():
    spectrum = np.array([100.0, 30, 29, 28, 0.5, 0.4, 0.3, 0.2])
    assert df.profile_likelihood_elbow(spectrum) == 1
    assert df.elbow_rank(spectrum, n_elbows=1) == 1
    assert df.elbow_rank(spectrum, n_elbows=2) == 4
    assert df.elbow_rank(np.array([5.0, 4, 3, 1e-14, 1e-15]), n_elbows=3) == 3
    assert df.predicted_budget(5, 0.7, 0.05) == math.ceil(math.log(200) / -math.log(0.7)) == 15
    assert df.predicted_budget(2, 1.0, 0.05) == math.inf
    assert df.predicted_budget(2, 0.0, 0.05) == 1


def test_slope_fit_and_empirical_budget_on_known_curves():
    budgets = [1, 2, 3, 4, 6, 8]
    failure = 0.6 * 0.7 ** np.array(budgets, dtype=float)
    slope, intercept = df.fit_log_failure(budgets, failure, reps=10_000)
    assert slope == pytest.approx(math.log(0.7)) and intercept == pytest.approx(math.log(0.6))
    assert df.empirical_budget(budgets, failure, 0.1) == pytest.approx(
        math.log(0.1 / 0.6) / math.log(0.7), abs=1e-9)
    assert math.isnan(df.empirical_budget(budgets, failure, 1e-6))
    assert math.isnan(df.fit_log_failure([1, 2], np.array([0.9, 0.8]), reps=100)[0])


def test_field_ranking_covers_every_direction_first():
    field = np.array([[5.0, 0, 0], [4, 0, 0], [3, 0, 0], [0, 1, 0], [0, 0, 0.5], [0, 0, 0.1]])
    assert list(df.field_ranking(field)[:3]) == [0, 3, 4]


def test_mds_and_classifiers_on_separable_points():
    rng = np.random.default_rng(2)
    points = np.concatenate([rng.normal(0, 1, (20, 3)), rng.normal(6, 1, (20, 3))])
    labels = np.repeat([0, 1], 20)
    distances = np.linalg.norm(points[:, None] - points[None], axis=-1)
    coords = df.classical_mds(distances, 3)
    np.testing.assert_allclose(np.linalg.norm(coords[:, None] - coords[None], axis=-1),
                               distances, atol=1e-8)
    for classifier in df.CLASSIFIERS:
        assert df.classification_error(coords, labels, classifier, rng) == 0.0
    shuffled = rng.permutation(labels)
    errors = [df.classification_error(coords, shuffled, "lda", rng) for _ in range(30)]
    assert 0.3 < np.mean(errors) < 0.7


def sweep(signal_prob: float, rank: int, budgets: list[int], reps: int, seed: int = 0
          ) -> tuple[df.SyntheticProblem, df.BudgetSweep]:
    p = df.SyntheticParams(n_queries=300, rank=rank, signal_probs=[signal_prob], n_models=12,
                           embed_dim=max(rank, 2), budgets=budgets, reps=reps)
    result = df.run_synthetic_setting(p, signal_prob, seed, None, 0, len(budgets))
    return result, result.sweep


def test_failure_decays_at_the_planted_rate():
    result, s = sweep(signal_prob=0.5, rank=1, budgets=[1, 2, 3, 4, 5], reps=300)
    failure = s.failure(s.random_errors)
    assert (np.diff(failure) < 0.02).all() and failure[0] > 0.2
    slope, _ = df.fit_log_failure(s.budgets, failure, 300, fit_max=0.6)
    assert slope == pytest.approx(math.log(result.planted[1]), rel=0.3)
    assert result.estimate.rank == 1
    assert slope == pytest.approx(math.log(result.estimate.rho_hat), rel=0.3)


def test_field_ranked_queries_beat_random_ones():
    _, s = sweep(signal_prob=0.2, rank=3, budgets=[1, 2, 3, 4, 6], reps=60, seed=3)
    random_error, field_error = s.random_errors.mean(axis=1), s.field_errors.mean(axis=1)
    assert (random_error - field_error).mean() > 0
    # From m = r on, the round robin has a query in every direction, the class one included.
    assert (field_error[2:] < 0.05).all()
    assert (random_error[2:] - field_error[2:]).mean() > 0.1


# -- the jobs ------------------------------------------------------------------------------------

def test_synthetic_job_saves_figures_table_and_streams_progress(tmp_path):
    params = SYNTHETIC.params(n_queries=80, rank=2, signal_probs=[0.3, 0.5], n_models=10,
                              budgets=[1, 2, 4], reps=5, embed_dim=4)
    outputs = SYNTHETIC.run(context(tmp_path), params, {})
    failure = json.loads((tmp_path / outputs["failure_plot"]).read_text())
    assert failure["logy"] and len(failure["series"]) == 6
    slope_line = failure["series"][1]
    ratio = slope_line["y"][1] / slope_line["y"][0]
    assert ratio == pytest.approx(outputs["summary"][0]["rho_hat"])
    spectrum = json.loads((tmp_path / outputs["spectrum_plot"]).read_text())
    assert "elbow" in spectrum["series"][1]["name"]
    table = json.loads((tmp_path / outputs["estimates"]).read_text())
    assert table["columns"] == df.ESTIMATE_COLUMNS and len(table["rows"]) == 2
    assert np.load(tmp_path / outputs["failure"]).shape == (2, 3)
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5, 6]
    assert {"error_random", "error_field"} <= set(metrics[0])


def test_cancel_stops_the_sweep(tmp_path):
    ctx = context(tmp_path)
    ctx.request_cancel()
    with pytest.raises(Cancelled):
        SYNTHETIC.run(ctx, SYNTHETIC.params(reps=1000), {})


@pytest.mark.parametrize("bad", [
    {"budgets": [3, 2]}, {"budgets": []}, {"budgets": [0, 1]}, {"signal_probs": [1.0]},
    {"rank": 30, "embed_dim": 20}, {"n_queries": 50}, {"classifier": "svm"}, {"reps": 1},
    {"steps": 3},
])
def test_invalid_synthetic_params_are_rejected(bad):
    with pytest.raises(ValidationError):
        SYNTHETIC.params(**bad)


@pytest.mark.parametrize("bad", [
    {"source": "endpoint"}, {"source": "endpoint", "base_url": "ftp://x", "model": "m"},
    {"source": "endpoint", "base_url": "http://127.0.0.1:1/v1"},
    {"source": "endpoint", "base_url": "http://h/v1", "model": "m", "personas": ["no colon"]},
    {"source": "endpoint", "base_url": "http://h/v1", "model": "m",
     "personas": ["a: x", "a: y", "a: z", "b: w"]},
    {"source": "endpoint", "base_url": "http://h/v1", "model": "m", "max_requests": 10},
    {"corpora": ["news"]}, {"corpora": ["news", "news"]}, {"corpora": ["news", "poems"]},
    {"n_queries": 10, "budgets": [1, 20]}, {"budgets": [4, 2]}, {"api_key_env": 3},
    {"n_queries": 8, "budgets": [1, 2], "rank": 9},
])
def test_invalid_black_box_params_are_rejected(bad):
    with pytest.raises(ValidationError):
        BLACK_BOX.params(**bad)


def test_reproduce_smoke_returns_a_claim(tmp_path):
    outputs = REPRODUCE.run(context(tmp_path), REPRODUCE.params(smoke=True), {})
    claim = outputs["claim"]
    assert claim["smoke"] is True and claim["paper"] == df.PAPER and claim["seeds"] == [0]
    assert len(claim["criteria"]) == 9
    assert {c["target"] for c in claim["criteria"]} == {0.2, 0.3, 0.0}
    assert all(c["paper"] for c in claim["criteria"])
    assert claim["passed"] == all(c["passed"] for c in claim["criteria"])
    with pytest.raises(ValidationError):
        REPRODUCE.params(smoke=True, budgets=[1])
    json.dumps(claim)


# -- black-box generators ------------------------------------------------------------------------

def test_char_ngram_learns_its_corpus_and_backs_off():
    model = CharNGramLM(order=3).fit("abcabcabcabc" * 5)
    rng = np.random.default_rng(0)
    assert model.generate("ab", 6, rng, temperature=0) == "cabcab"
    assert model.generate("ab", 6, rng) == "cabcab"  # every context has one continuation
    assert set(model.generate("zz", 9, rng)) <= set("abc")  # unseen context: back off
    with pytest.raises(ValueError, match="too short"):
        CharNGramLM(order=5).fit("abc")


class ChatServer:
    """A tiny OpenAI-compatible chat server: answers by system prompt, fails on demand."""

    def __init__(self, failures: int = 0, delay_s: float = 0.0) -> None:
        self.failures, self.delay_s = failures, delay_s
        self.calls: list[dict] = []
        self.authorization: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.calls.append(body)
                server.authorization.append(self.headers.get("Authorization", ""))
                if server.delay_s:
                    time.sleep(server.delay_s)
                if server.failures > 0:
                    server.failures -= 1
                    self.send_response(500)
                    self.end_headers()
                    self.wfile.write(b"overloaded")
                    return
                system, user = body["messages"][0]["content"], body["messages"][1]["content"]
                if "formal" in system:
                    text = f"Indeed, the matter concerns {user.split()[-1]}, as documented."
                else:
                    text = f"lol yeah {user.split()[-1]} is kinda wild tbh"
                payload = json.dumps({"choices": [{"message": {"content": text}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    server = ChatServer()
    yield server
    server.close()


def test_endpoint_retries_a_500_then_succeeds(chat_server):
    chat_server.failures = 2
    waits: list[float] = []
    generator = EndpointGenerator(ChatClient(chat_server.url, "m", KEY), "be formal",
                                  retries=2, backoff_s=0.5, sleep=waits.append)
    assert generator.generate("hello world").startswith("Indeed")
    assert len(chat_server.calls) == 3 and waits == [0.5, 1.0]
    assert chat_server.authorization == [f"Bearer {KEY}"] * 3


def test_endpoint_gives_up_cleanly_without_leaking_the_key(chat_server):
    chat_server.failures = 10
    generator = EndpointGenerator(ChatClient(chat_server.url, "m", KEY), "x", retries=1,
                                  sleep=lambda s: None)
    with pytest.raises(EndpointError, match="HTTP 500") as error:
        generator.generate("hi")
    assert KEY not in str(error.value) and "2 attempts" in str(error.value)
    assert len(chat_server.calls) == 2


def test_endpoint_timeout_is_an_endpoint_error():
    server = ChatServer(delay_s=1.0)
    try:
        generator = EndpointGenerator(ChatClient(server.url, "m", KEY, timeout_s=0.2), "x",
                                      retries=0)
        with pytest.raises(EndpointError, match=r"0\.2 s|cannot connect|timed out"):
            generator.generate("hi")
    finally:
        server.close()


def test_black_box_endpoint_job_classifies_personas_and_never_writes_the_key(
        tmp_path, chat_server, monkeypatch):
    monkeypatch.setenv("DF_TEST_KEY", KEY)
    personas = [f"{kind}: {kind} persona {i}" for kind in ("formal", "casual") for i in range(3)]
    params = BLACK_BOX.params(source="endpoint", base_url=chat_server.url, model="tiny",
                              api_key_env="DF_TEST_KEY", personas=personas, n_queries=6,
                              query_corpora=["news"], budgets=[1, 2, 4, 6], reps=6, rank=2)
    outputs = BLACK_BOX.run(context(tmp_path), params, {})
    assert len(chat_server.calls) == 6 * 6
    assert set(chat_server.authorization) == {f"Bearer {KEY}"}
    assert outputs["summary"]["r_hat"] == 2
    selection = json.loads((tmp_path / outputs["selection_plot"]).read_text())
    assert max(selection["series"][0]["y"]) == 0.0  # the two styles are trivially apart
    assert np.load(tmp_path / outputs["responses"]).shape == (6, 6, 384)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_black_box_ngram_job_trains_one_model_per_slice(tmp_path):
    params = BLACK_BOX.params(corpora=["news", "code"], models_per_class=3, n_queries=5,
                              query_corpora=["news"], response_chars=40, train_chars=3000,
                              budgets=[1, 3, 5], reps=4)
    outputs = BLACK_BOX.run(context(tmp_path), params, {})
    models = json.loads((tmp_path / outputs["models"]).read_text())
    assert [row[1] for row in models["rows"]] == ["news"] * 3 + ["code"] * 3
    assert len({row[2] for row in models["rows"]}) == 6  # every model its own slice
    top = json.loads((tmp_path / outputs["top_queries"]).read_text())
    assert len(top["rows"]) == 5 and math.isfinite(outputs["summary"]["rho_hat"])
