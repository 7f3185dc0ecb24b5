import math

import pytest

from engine.api import Claim, Criterion
from engine.plots import bar_layout, export_figure, heatmap, heatmap_extent, plot, series


def test_criteria_compare_and_nan_never_passes():
    assert Criterion("a", 0.995, 0.99, ">=").passed
    assert not Criterion("b", 0.5, 0.99, ">=").passed
    assert not Criterion("c", math.nan, 0.0, "<=").passed
    with pytest.raises(ValueError):
        Criterion("d", 1, 1, "~")
    claim = Claim("eos", "s", [Criterion("a", 1, 0, ">")], seeds=[0], wall_s=1.0)
    assert claim.to_dict()["passed"] is True
    claim.criteria.append(Criterion("b", 0, 1, ">"))
    assert claim.passed is False


def test_plot_specs_thin_long_series_and_export(tmp_path):
    curve = series("loss", range(100_000), [float(i) for i in range(100_000)])
    assert len(curve["x"]) <= 4000 and curve["x"][-1] == 99_999
    gap = series("g", [0, 1, 2], [1.0, math.nan, 2.0])
    assert gap["y"] == [1.0, None, 2.0]
    with pytest.raises(ValueError):
        series("bad", [1, 2], [1])
    spec = plot("t", [curve, gap], "step", "loss", logy=True)
    out = export_figure(spec, tmp_path / "f.svg", {"run_id": "r1"})
    assert b"r1" in out.read_bytes()
    with pytest.raises(ValueError, match="cannot export"):
        export_figure(spec, tmp_path / "f.bmp")


def test_intervals_bars_and_heatmaps_export(tmp_path):
    bars = plot("gaps", [series("a", [0, 1], [1.0, 2.0], "bar", ([0.5, 1.5], [1.5, 2.5])),
                         series("b", [0, 1], [0.5, 1.0], "bar")], xticks=[(0, "x"), (1, "y")])
    assert bars["series"][0]["lo"] == [0.5, 1.5] and bars["xticks"] == [[0.0, "x"], [1.0, "y"]]
    assert bar_layout(bars) == {0: (-0.2, 0.4), 1: (0.2, 0.4)}
    grid = heatmap("m", [[1.0, float("nan")], [2.0, 3.0]], x=[0.0, 1.0], y=[10.0, 20.0],
                   marks=[(1, 0)])
    assert grid["z"][0] == [1.0, None] and heatmap_extent(grid) == (-0.5, 1.5, 5.0, 25.0)
    for spec, name in ((bars, "bars"), (grid, "grid")):
        for suffix in ("png", "svg", "pdf"):
            assert export_figure(spec, tmp_path / f"{name}.{suffix}").stat().st_size > 1000
    with pytest.raises(ValueError, match="lengths differ"):
        series("bad", [0, 1], [1, 2], "bar", ([0], [1]))
    with pytest.raises(ValueError, match="xlabels has 1 entries for 2"):
        heatmap("bad", [[1, 2]], xlabels=["a"])
    with pytest.raises(ValueError, match="unknown style"):
        series("bad", [0], [1], "pie")
