"""Listing methods reads cached descriptions, never imports method modules or torch, and is
never stale: a changed method file (or a file it imports) is described afresh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

METHOD_FILE = """
from engine.api import MethodSpec
from listing_demo_params import DemoParams


def run(ctx, params, inputs):
    return {{"steps": params.steps}}


SPECS = [MethodSpec(id="listingdemo.train", title={title!r}, paper="listingdemo",
                    params=DemoParams, run=run)]
"""
PARAMS_FILE = """
from pydantic import Field

from engine.api import MethodParams


class DemoParams(MethodParams):
    steps: int = Field({steps}, ge=1)
"""


def _plugin(site: Path, title: str = "Demo v1", steps: int = 10) -> None:
    """A plug-in package found through PYTHONPATH: its own dist-info with the entry point."""
    dist = site / "listing_demo-0.1.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: listing-demo\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[studio.methods]\nlistingdemo = listing_demo\n")
    (site / "listing_demo.py").write_text(METHOD_FILE.format(title=title))
    (site / "listing_demo_params.py").write_text(PARAMS_FILE.format(steps=steps))


def _env(tmp_path: Path, site: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "STUDIO_CACHE_DIR": str(tmp_path / "cache")}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site),
                                                          env.get("PYTHONPATH", "")]))
    return env


def _list(env: dict[str, str]) -> dict[str, dict]:
    out = subprocess.run([sys.executable, "-m", "engine", "list", "--json"], env=env,
                         capture_output=True, text=True, check=True, timeout=120).stdout
    return {method["id"]: method for method in json.loads(out)}


def _python(code: str, env: dict[str, str]) -> str:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, check=True, timeout=120).stdout


def test_listing_imports_no_method_module_and_no_torch(tmp_path):
    env = _env(tmp_path)
    built = _list(env)  # the first listing builds the cache
    assert "eos.train" in built
    out = _python("""
        import contextlib, io, json, sys
        from engine.cli import main
        with contextlib.redirect_stdout(io.StringIO()) as text:
            code = main(["list", "--json"])
        imported = sorted(m for m in sys.modules
                          if m == "torch" or m.startswith(("torch.", "engine.methods.")))
        print(json.dumps({"code": code, "ids": [m["id"] for m in json.loads(text.getvalue())],
                          "imported": imported}))
        """, env)
    result = json.loads(out)
    assert result["code"] == 0 and result["imported"] == []
    assert result["ids"] == list(built)  # the same methods, in the same order


def test_cached_listing_equals_the_imported_descriptions(tmp_path):
    env = _env(tmp_path)
    _list(env)
    out = _python("""
        import json
        from engine import registry
        cached = registry.describe_all()
        fresh = [spec.describe() for spec in registry.all_methods().values()]
        print(json.dumps(json.loads(json.dumps(cached)) == json.loads(json.dumps(fresh))))
        """, env)
    assert json.loads(out) is True


def test_a_changed_method_file_is_never_listed_stale(tmp_path):
    site = tmp_path / "site"
    _plugin(site, title="Demo v1")
    env = _env(tmp_path, site)
    assert _list(env)["listingdemo.train"]["title"] == "Demo v1"
    assert _list(env)["listingdemo.train"]["title"] == "Demo v1"  # from the cache
    _plugin(site, title="Demo v2")  # the method file changed
    assert _list(env)["listingdemo.train"]["title"] == "Demo v2"
    _plugin(site, title="Demo v2", steps=77)  # only a file it imports changed
    schema = _list(env)["listingdemo.train"]["params_schema"]
    assert schema["properties"]["steps"]["default"] == 77


def test_a_long_running_process_lists_a_file_changed_after_it_imported_it(tmp_path):
    """The engine imported the method (a job ran); the file changes; its listing follows."""
    site = tmp_path / "site"
    _plugin(site, title="Before")
    env = _env(tmp_path, site)
    out = _python(f"""
        import json, pathlib
        from engine import registry
        first = registry.get_method("listingdemo.train").title
        path = pathlib.Path({str(site / "listing_demo.py")!r})
        path.write_text(path.read_text().replace("Before", "After"))
        titles = [m["title"] for m in registry.describe_all() if m["paper"] == "listingdemo"]
        print(json.dumps([first, titles]))
        """, env)
    assert json.loads(out) == ["Before", ["After"]]


def test_get_method_imports_only_the_module_of_that_method(tmp_path):
    env = _env(tmp_path)
    _list(env)
    out = _python("""
        import json, sys
        from engine import registry
        spec = registry.get_method("eos.train")
        print(json.dumps([spec.id, sorted(m for m in sys.modules
                                           if m.startswith("engine.methods."))]))
        """, env)
    method_id, imported = json.loads(out)
    assert method_id == "eos.train" and imported == ["engine.methods.eos"]


def test_a_broken_method_module_is_not_cached(tmp_path):
    """A module that fails to import is retried by the next listing, not remembered."""
    site = tmp_path / "site"
    _plugin(site)
    (site / "listing_demo.py").write_text("raise ImportError('not yet')\n")
    env = _env(tmp_path, site)
    assert "listingdemo.train" not in _list(env)
    _plugin(site, title="Fixed")
    assert _list(env)["listingdemo.train"]["title"] == "Fixed"


@pytest.mark.parametrize("content", ["not json", '{"format": 1}', "[]"])
def test_a_damaged_cache_file_is_rebuilt(tmp_path, content):
    env = _env(tmp_path)
    _list(env)
    (cache_file,) = (tmp_path / "cache" / "methods").glob("*.json")
    cache_file.write_text(content)
    assert "eos.train" in _list(env)
    assert json.loads(cache_file.read_text())["methods"]
