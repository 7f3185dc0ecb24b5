"""A secret that a method repeats (a chat endpoint echoing the key in its error body) is
masked in everything stored or sent: reason, traceback, log, events, artifacts, the runs
table and result.json."""

from __future__ import annotations

import json
import subprocess
import sys

from pydantic import SecretStr

from engine.api import MethodParams
from engine.scrub import MASK, scrub, secret_values
from engine.workspace import Workspace

KEY = "sk-test-7f3a9c2e11d04b8f"


def test_echoed_key_is_nowhere_on_disk_or_in_the_output(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "engine", "run", "diag.secret", "--set", f"api_key={KEY}",
         "--set", "echo=true", "--json", "--workspace", str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    assert KEY not in out.stdout and KEY not in out.stderr
    (run,) = Workspace(tmp_path).runs()
    assert run["state"] == "failed" and MASK in run["reason"] and KEY not in json.dumps(run)
    for file in (tmp_path / "runs").rglob("*"):
        if file.is_file():
            assert KEY.encode() not in file.read_bytes(), file
    result = json.loads((tmp_path / "runs" / run["id"] / "result.json").read_text())
    assert MASK in result["traceback"] and MASK in result["reason"]
    log = (tmp_path / "runs" / run["id"] / "log.txt").read_text()
    assert f"bad key {MASK}" in log


def test_secret_values_are_found_in_nested_params_and_masked_in_any_structure():
    class Inner(MethodParams):
        token: SecretStr

    class Outer(MethodParams):
        inner: Inner
        other: SecretStr | None = None
        short: SecretStr = SecretStr("ab")

    secrets = secret_values(Outer(inner=Inner(token=SecretStr("inner-secret")),
                                  other=SecretStr("outer-secret-longer")))
    assert {"inner-secret", "outer-secret-longer"} <= set(secrets) and "ab" not in secrets
    masked = scrub({"a": ["x inner-secret y", {"outer-secret-longer": 1}], "n": 3}, secrets)
    assert masked == {"a": [f"x {MASK} y", {MASK: 1}], "n": 3}
