"""Choosing where jobs run: local pool, or Ray with a clear message when it cannot be used."""

from __future__ import annotations

import subprocess
import sys

import pytest

from engine.executors import ClusterUnavailable, LocalExecutor, make_executor


def test_local_is_the_worker_pool():
    assert isinstance(make_executor("local", workers=1), LocalExecutor)
    assert make_executor("").cluster == "local"


def test_without_ray_the_message_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ClusterUnavailable, match=r"pip install 'neurips-studio\[cluster\]'"):
        make_executor("ray://head:10001")


@pytest.mark.parametrize("address, message", [
    ("127.0.0.1:1", "nothing answers at 127.0.0.1:1"),
    ("not-an-address", "is not a Ray address"),
])
def test_cli_refuses_a_cluster_it_cannot_reach(tmp_path, address, message):
    pytest.importorskip("ray", reason="the cluster extra is not installed")
    out = subprocess.run(
        [sys.executable, "-m", "engine", "run", "diag.echo", "--cluster", address,
         "--workspace", str(tmp_path / "ws")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and message in out.stderr
    assert not (tmp_path / "ws" / "runs").exists() or not any((tmp_path / "ws" / "runs").iterdir())
