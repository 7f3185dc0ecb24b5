"""``make gpu-wheels`` and ``scripts/gpu_profile.sh``, offline: what the folder would carry
(never torch, nothing a CUDA image has), how a folder is checked, and the script's syntax and
its refusal without a folder. (Building the folder downloads wheels: `make gpu-wheels`.)"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gpu_wheels():
    spec = importlib.util.spec_from_file_location("gpu_wheels", ROOT / "scripts" / "gpu_wheels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_plan_carries_no_torch_and_nothing_the_image_has(gpu_wheels):
    optional = {gpu_wheels.normalise(n) for names in gpu_wheels.PAPER_PACKAGES.values()
                for n in names}
    base = gpu_wheels.closure([r for r in gpu_wheels.engine_requirements()
                               if gpu_wheels.normalise(r.name) not in optional], skip=optional)
    assert "torch" not in base and not set(base) & gpu_wheels.ON_CUDA_IMAGE
    assert {"pydantic", "pydantic-core", "platformdirs"} <= set(base)  # every run needs them
    assert "pennylane-lightning" not in base  # only iqp_qcbm: its own group
    pennylane = gpu_wheels.closure([Requirement("pennylane")], skip=set(base))
    assert "pennylane" in pennylane and "torch" not in pennylane


def test_a_folder_with_torch_or_over_budget_is_refused(gpu_wheels, tmp_path):
    (tmp_path / "pydantic-2.0-py3-none-any.whl").write_bytes(b"x" * 1024)
    (tmp_path / "requirements.txt").write_text("# comment\npydantic==2.0\n")
    assert gpu_wheels.check_folder(tmp_path) < 0.01
    (tmp_path / "requirements.txt").write_text("pydantic==2.0\nnibabel==5.0\n")
    with pytest.raises(ValueError, match="names nibabel but no wheel"):
        gpu_wheels.check_folder(tmp_path)
    (tmp_path / "requirements.txt").write_text("pydantic==2.0\n")
    big = tmp_path / "nilearn-1.0-py3-none-any.whl"
    with big.open("wb") as handle:
        handle.truncate((gpu_wheels.LIMIT_MIB + 1) * 2**20)  # sparse: no disk used
    with pytest.raises(ValueError, match="over the 60 MiB budget"):
        gpu_wheels.check_folder(tmp_path)
    big.unlink()
    (tmp_path / "torch-2.0-cp312-cp312-manylinux_2_28_x86_64.whl").write_bytes(b"x")
    with pytest.raises(ValueError, match="torch must never be carried"):
        gpu_wheels.check_folder(tmp_path)


def test_gpu_profile_script_parses_and_needs_the_folder(tmp_path):
    script = ROOT / "scripts" / "gpu_profile.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    done = subprocess.run([str(script), "eos"], capture_output=True, text=True,
                          env={**os.environ, "GPU_WHEELS": str(tmp_path / "none"),
                               "OUT": str(tmp_path / "out")})
    assert done.returncode == 2 and "requirements.txt is missing" in done.stderr
