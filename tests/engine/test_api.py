import math

import pytest

from engine.api import Claim, Criterion
from engine.plots import export_figure, plot, series


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
