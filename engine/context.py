"""JobContext: everything a method may do while it runs, whichever executor runs it.

The context writes files only under its ``output_dir`` and reports through ``emit``; it never
sees the workspace, so the same method runs in a local worker or on a Ray node.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from engine.atomic import append_jsonl, to_jsonable, write_atomic, write_json_atomic
from engine.plots import PLOT_KINDS
from engine.scrub import scrub

PROGRESS_INTERVAL_S = 1 / 30  # at most ~30 progress updates a second reach clients
LOG_FLUSH_INTERVAL_S = 1 / 30


class Cancelled(Exception):
    """Raised by ``check_cancelled`` when the user cancelled the job."""


class JobContext:
    """Handed to ``run(ctx, params, inputs)``; see CONTRACT.md, "The method interface"."""

    def __init__(
        self,
        job_id: str,
        output_dir: str | os.PathLike,
        emit: Callable[[dict], None],
        seed: int = 0,
        device: str = "cpu",
        cache_root: str | os.PathLike | None = None,
        secrets: list[str] | None = None,
    ) -> None:
        """``secrets``: values masked in what this context writes (metrics, JSON artifacts);
        the worker scrubs the events ``emit`` sends."""
        self.job_id = job_id
        self._secrets = list(secrets or [])
        self._checkpoint_provenance: dict | None = None
        self.output_dir = Path(output_dir)
        self.seed = seed
        self.device = device
        self._emit = emit
        self._cache_root = Path(cache_root) if cache_root else self.output_dir / "cache"
        self._cancel = threading.Event()
        self._last_progress_s = 0.0
        self._pending_progress: dict | None = None
        self._log_lines: list[str] = []
        self._last_log_s = 0.0
        self._metrics_path = self.output_dir / "metrics.jsonl"
        # Set by an executor that can spread work (Ray): ``fan_out(function, items)`` returns
        # the results in order and ``where`` names each unit's host; None runs them here.
        self.fan_out: Callable[[Callable[[dict], dict], list[dict]], list[dict]] | None = None
        self.unit_hosts: list[str] = []
        (self.output_dir / "artifacts").mkdir(parents=True, exist_ok=True)

    # -- cancellation --------------------------------------------------------------------
    def request_cancel(self) -> None:
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def check_cancelled(self) -> None:
        """Call often in loops: raises ``Cancelled`` once the user asked to stop."""
        if self._cancel.is_set():
            raise Cancelled("cancelled by the user")

    # -- progress, metrics, logs ---------------------------------------------------------
    def progress(self, step: int, total: int | None = None, **metrics: float) -> None:
        """Record one step. Every call lands in metrics.jsonl; clients get ~30 a second."""
        metrics = {k: _plain_number(v) for k, v in metrics.items()}
        if metrics:
            append_jsonl(self._metrics_path, scrub({"step": step, "t": time.time(), **metrics},
                                                   self._secrets))
        event = {"type": "job_progress", "step": step, "total": total, "metrics": metrics}
        now = time.monotonic()
        if now - self._last_progress_s >= PROGRESS_INTERVAL_S or (total and step >= total):
            self._pending_progress = None
            self._last_progress_s = now
            self._emit(event)
        else:
            self._pending_progress = event

    def log(self, message: str) -> None:
        """A line in the run's log; batched so a chatty method cannot flood the client."""
        self._log_lines.append(str(message))
        now = time.monotonic()
        if now - self._last_log_s >= LOG_FLUSH_INTERVAL_S:
            self._flush_log(now)

    def flush(self) -> None:
        """Send what coalescing held back; the worker calls it when the method returns."""
        if self._pending_progress is not None:
            self._emit(self._pending_progress)
            self._pending_progress = None
        self._flush_log(time.monotonic())

    def _flush_log(self, now: float) -> None:
        if self._log_lines:
            lines, self._log_lines = self._log_lines, []
            self._last_log_s = now
            self._emit({"type": "job_log", "lines": lines})

    # -- independent units of work ------------------------------------------------------
    def map(self, function: Callable[[dict], dict], items: list[dict]) -> list[dict]:
        """``[function(item) for item in items]``, each item an independent unit (one seed of
        one configuration). ``function`` is a module-level function taking and returning
        JSON-able dicts and seeding itself from its item, so the results are the same whether
        the units run here in order or as tasks on a cluster (``--cluster``)."""
        items = [dict(item) for item in items]
        if self.fan_out is not None and len(items) > 1:
            return self.fan_out(function, items)
        results = []
        for index, item in enumerate(items):
            self.check_cancelled()
            results.append(function(item))
            self.unit_hosts.append("local")
            self.progress(index + 1, len(items), units_done=index + 1)
        return results

    # -- artifacts -----------------------------------------------------------------------
    def save_artifact(self, name: str, value: Any, kind: str | None = None, **meta: Any) -> str:
        """Save an array (.npy), a plot spec, a table or JSON under ``artifacts/``.

        ``kind`` is inferred: numpy arrays -> "array"; dicts made by ``engine.plots`` -> "plot";
        ``{"columns": [...], "rows": [...]}`` -> "table"; anything else JSON -> "json".
        Returns the path relative to the run folder, which is how outputs refer to it.
        """
        kind = kind or _infer_kind(value)
        self.flush()
        if kind == "array":
            relative = f"artifacts/{name}.npy"
            if hasattr(value, "detach"):
                value = value.detach().cpu().numpy()
            array = np.asarray(value)
            write_atomic(self.output_dir / relative, lambda handle: np.save(handle, array))
            meta = {"shape": list(array.shape), "dtype": str(array.dtype), **meta}
        else:
            relative = f"artifacts/{name}.json"
            write_json_atomic(self.output_dir / relative, scrub(to_jsonable(value),
                                                                self._secrets))
        self._emit({"type": "job_artifact", "name": name, "kind": kind, "path": relative,
                    "meta": to_jsonable(meta)})
        return relative

    def save_file(self, filename: str, content: bytes | str | os.PathLike, **meta: Any) -> str:
        """Announce a data file (a transcript, a CSV, a NIfTI volume) as a ``file`` artifact.

        ``content`` is the bytes to write to ``artifacts/<filename>``, or the path of a file
        the method already wrote inside the run folder. The GUI opens it through the format
        registry, like a file the user dropped in."""
        self.flush()
        if isinstance(content, bytes):
            relative = f"artifacts/{filename}"
            write_atomic(self.output_dir / relative, lambda handle: handle.write(content))
        else:
            path = Path(content)
            path = path if path.is_absolute() else self.output_dir / path
            try:
                relative = str(path.resolve().relative_to(self.output_dir.resolve()))
            except ValueError:
                raise ValueError(f"{path}: save_file takes files inside the run folder "
                                 f"({self.output_dir}) or bytes") from None
            if not path.is_file():
                raise FileNotFoundError(f"{path}: no such file to announce")
        self._emit({"type": "job_artifact", "name": filename, "kind": "file", "path": relative,
                    "meta": to_jsonable(meta)})
        return relative

    def checkpoint_provenance(self) -> dict:
        """What a checkpoint's cfg.json says made it: this run (id, method, parameters, seed)
        and the inputs it was trained on (paths and content hashes). Computed once a run:
        every checkpoint of it names the same inputs, and hashing them reads them whole."""
        if self._checkpoint_provenance is not None:
            return self._checkpoint_provenance
        from engine import provenance

        try:
            inputs = json.loads((self.output_dir / "params.json").read_text(
                encoding="utf-8")).get("inputs") or {}
        except (OSError, ValueError):
            inputs = {}
        files = [value for value in inputs.values() if isinstance(value, str)
                 and not value.startswith("run:") and Path(value).exists()]
        run = {**provenance.run_entry(self.output_dir), "run_id": self.job_id, "seed": self.seed}
        self._checkpoint_provenance = scrub(provenance.record(files, runs=[run], inputs=inputs),
                                            self._secrets)
        return self._checkpoint_provenance

    def save_checkpoint(self, name: str, tensors: Any, cfg: dict) -> str:
        """safetensors + cfg.json under ``checkpoints/<name>/``; ``tensors`` is a module or dict.
        The cfg gains ``provenance`` (``checkpoint_provenance``)."""
        from safetensors.torch import save as save_tensors

        state = tensors.state_dict() if hasattr(tensors, "state_dict") else dict(tensors)
        state = {k: v.detach().cpu().contiguous() for k, v in state.items()}
        relative = f"checkpoints/{name}"
        folder = self.output_dir / relative
        payload = save_tensors(state)
        write_atomic(folder / "model.safetensors", lambda handle: handle.write(payload))
        write_json_atomic(folder / "cfg.json", scrub(to_jsonable(
            {**cfg, "provenance": self.checkpoint_provenance()}), self._secrets))
        self._emit({"type": "job_artifact", "name": name, "kind": "checkpoint", "path": relative,
                    "meta": {"tensors": len(state)}})
        return relative

    # -- cache for pretrained bases ------------------------------------------------------
    def cache_dir(self, config: dict) -> Path:
        """A folder shared by all runs with the same config (pretrained bases, datasets)."""
        digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
        path = self._cache_root / digest.hexdigest()[:16]
        path.mkdir(parents=True, exist_ok=True)
        return path


def _plain_number(value: Any) -> float:
    return float(value.item() if hasattr(value, "item") else value)


def _infer_kind(value: Any) -> str:
    if isinstance(value, np.ndarray) or type(value).__name__ == "Tensor":
        return "array"
    if isinstance(value, dict):
        if value.get("kind") in PLOT_KINDS:
            return "plot"
        if "columns" in value and "rows" in value:
            return "table"
    return "json"
