"""The hostile corpus (zip and gzip bombs, a 1080p clip, deep JSON, lying safetensors,
non-UTF-8 names, 1000-atom SMILES, an echoed API key, ...) made at test time and fed to
every reader and to method inputs, each in a process limited to 2 GiB of address space and
killed after 60 s: every case ends in a clean refusal naming the file, or is read within the
budgets (the clip, the large molecules), and the echoed key is stored nowhere."""

from __future__ import annotations

import pytest

from engine.jobs import printable
from tests.engine.hostile_corpus import SPECS, build_corpus, run_probe


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    cases = build_corpus(root / "files")
    workspace = root / "workspace"
    workspace.mkdir()
    return cases, workspace


@pytest.mark.parametrize("name, probe", [
    pytest.param(spec.name, probe, id=f"{spec.name} / {' '.join(filter(None, probe))}")
    for spec in SPECS for probe in spec.probes])
def test_hostile_case_ends_cleanly(corpus, name, probe):
    cases, workspace = corpus
    case = cases[name]
    outcome = run_probe(case, probe, workspace)
    assert outcome.status == case.expect, f"{outcome.status}: {outcome.message}"
    if case.expect == "refused":
        named = case.names or printable(str(case.path))
        assert named in outcome.message, outcome.message
        assert "raise it" in outcome.message or "budget" not in outcome.message
