"""SAELens checkpoint folders: ``sae_weights.safetensors`` + ``cfg.json``, read without torch.

SAELens saves an SAE as a folder holding ``W_enc`` (d_in, d_sae), ``b_enc``, ``W_dec``
(d_sae, d_in) and ``b_dec`` in ``sae_weights.safetensors`` and its settings in ``cfg.json``
(``architecture``, ``d_in``, ``d_sae``, ``k`` or ``activation_fn_kwargs.k`` for TopK, the hook
in ``hook_name`` or ``metadata.hook_name``). Studio writes the same files, so SAELens loads ours
and we load theirs. An SAE trained with the PC1 bypass also has ``pc1_bypass.safetensors``
(``mean``, ``pc1``); ``cfg.json``'s ``pc1_bypass`` entry says how to use them, and SAELens,
which does not know the file, still loads the SAE itself (it then expects x - s u1 as input).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.atomic import write_atomic, write_json_atomic
from engine.io import Format, FormatError
from engine.io.arrays import read_safetensors

WEIGHTS_FILE = "sae_weights.safetensors"
CFG_FILE = "cfg.json"
BYPASS_FILE = "pc1_bypass.safetensors"
SAE_TENSORS = ("W_enc", "b_enc", "W_dec", "b_dec")
SUPPORTED = ("topk", "standard", "relu")  # "relu": an older SAELens name of "standard"

BYPASS_DOC = ("PC1 bypass: s = pc1 . (x - mean); the SAE encodes x - s * pc1 and the "
              "reconstruction is SAE(x - s * pc1) + s * pc1. mean and pc1 (unit norm) are in "
              f"{BYPASS_FILE}.")


@dataclass
class SAEFolder:
    """A loaded SAE: numpy tensors, its cfg, and the bypass tensors when it has them."""

    path: Path
    cfg: dict
    weights: dict[str, np.ndarray]
    bypass: dict[str, np.ndarray] | None

    @property
    def architecture(self) -> str:
        arch = str(self.cfg.get("architecture", "standard"))
        return "standard" if arch == "relu" else arch

    @property
    def k(self) -> int | None:
        kwargs = self.cfg.get("activation_fn_kwargs") or {}
        k = self.cfg.get("k", kwargs.get("k"))
        return None if k is None else int(k)

    @property
    def hook_name(self) -> str:
        return str(self.cfg.get("hook_name") or (self.cfg.get("metadata") or {}).get(
            "hook_name", ""))

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Codes of activations ``x`` (n, d_in) with numpy, the bypass applied when present."""
        w = self.weights
        x_sae = np.asarray(x, dtype=np.float32)
        if self.bypass is not None:
            pc1 = self.bypass["pc1"]
            x_sae = x_sae - np.outer((x_sae - self.bypass["mean"]) @ pc1, pc1)
        pre = (x_sae - w["b_dec"]) @ w["W_enc"] + w["b_enc"]
        if self.architecture == "topk":
            k = self.k or 1
            keep = np.argpartition(-pre, k - 1, axis=1)[:, :k]
            codes = np.zeros_like(pre)
            np.put_along_axis(codes, keep, np.take_along_axis(pre, keep, axis=1), axis=1)
            pre = codes
        return np.maximum(pre, 0.0)


def _is_sae_folder(path: Path) -> bool:
    return path.is_dir() and (path / WEIGHTS_FILE).is_file() and (path / CFG_FILE).is_file()


def read_sae(path: str | Path) -> SAEFolder:
    """Load and check an SAE folder (or its ``sae_weights.safetensors`` / ``cfg.json``)."""
    folder = Path(path)
    if folder.is_file():
        folder = folder.parent
    for name in (WEIGHTS_FILE, CFG_FILE):
        if not (folder / name).is_file():
            raise FormatError(folder, f"not an SAELens SAE folder: {name} is missing")
    try:
        cfg = json.loads((folder / CFG_FILE).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FormatError(folder / CFG_FILE, f"not valid JSON ({exc})") from None
    if not isinstance(cfg, dict):
        raise FormatError(folder / CFG_FILE, "cfg.json must hold a JSON object")
    weights = read_safetensors(folder / WEIGHTS_FILE)
    missing = [name for name in SAE_TENSORS if name not in weights]
    if missing:
        raise FormatError(folder / WEIGHTS_FILE, f"missing SAE tensors {', '.join(missing)}")
    d_in, d_sae = weights["W_enc"].shape if weights["W_enc"].ndim == 2 else (None, None)
    expected = {"W_enc": (d_in, d_sae), "b_enc": (d_sae,), "W_dec": (d_sae, d_in),
                "b_dec": (d_in,)}
    for name, shape in expected.items():
        if d_in is None or tuple(weights[name].shape) != shape:
            raise FormatError(folder / WEIGHTS_FILE, f"{name} has shape "
                              f"{list(weights[name].shape)}, expected {list(shape)} from W_enc")
    for key, value in (("d_in", d_in), ("d_sae", d_sae)):
        if key in cfg and int(cfg[key]) != value:
            raise FormatError(folder / CFG_FILE, f"{key}={cfg[key]} but the weights have {value}")
    sae = SAEFolder(folder, cfg, {k: weights[k].astype(np.float32) for k in SAE_TENSORS}, None)
    if sae.architecture not in ("topk", "standard"):
        raise FormatError(folder / CFG_FILE, f"architecture {cfg.get('architecture')!r} is not "
                          f"supported; Studio reads {', '.join(SUPPORTED)}")
    if sae.architecture == "topk" and not (sae.k and 1 <= sae.k <= d_sae):
        raise FormatError(folder / CFG_FILE, "a topk SAE needs k (1..d_sae) in cfg.json")
    if (folder / BYPASS_FILE).is_file():
        bypass = read_safetensors(folder / BYPASS_FILE)
        if set(bypass) < {"mean", "pc1"} or any(bypass[n].shape != (d_in,)
                                                 for n in ("mean", "pc1")):
            raise FormatError(folder / BYPASS_FILE, f"needs tensors mean and pc1 of shape "
                                                    f"[{d_in}]")
        sae.bypass = {n: bypass[n].astype(np.float32) for n in ("mean", "pc1")}
    elif cfg.get("pc1_bypass"):
        raise FormatError(folder, f"cfg.json asks for the PC1 bypass but {BYPASS_FILE} is "
                                  "missing")
    return sae


def write_sae(folder: str | Path, weights: dict[str, np.ndarray], cfg: dict,
              bypass: dict[str, np.ndarray] | None = None) -> Path:
    """Write an SAELens folder; ``bypass`` (mean, pc1) goes to its own file, noted in cfg."""
    from safetensors.numpy import save

    folder = Path(folder)
    tensors = {name: np.ascontiguousarray(weights[name], dtype=np.float32)
               for name in SAE_TENSORS}
    cfg = {**cfg, "d_in": int(tensors["W_enc"].shape[0]),
           "d_sae": int(tensors["W_enc"].shape[1])}
    if bypass is not None:
        payload = save({n: np.ascontiguousarray(bypass[n], dtype=np.float32)
                        for n in ("mean", "pc1")})
        write_atomic(folder / BYPASS_FILE, lambda handle: handle.write(payload))
        cfg["pc1_bypass"] = {"file": BYPASS_FILE, "tensors": ["mean", "pc1"], "doc": BYPASS_DOC}
    else:
        (folder / BYPASS_FILE).unlink(missing_ok=True)
        cfg.pop("pc1_bypass", None)
    payload = save(tensors)
    write_atomic(folder / WEIGHTS_FILE, lambda handle: handle.write(payload))
    write_json_atomic(folder / CFG_FILE, cfg)
    return folder


def _sniff(path: Path, head: bytes) -> int:
    if _is_sae_folder(path):
        return 2
    if path.name in (WEIGHTS_FILE, CFG_FILE) and _is_sae_folder(path.parent):
        return 1
    return 0


def _inspect(path: Path) -> dict:
    sae = read_sae(path)
    summary = {"architecture": sae.architecture, "d_in": int(sae.weights["W_enc"].shape[0]),
               "d_sae": int(sae.weights["W_enc"].shape[1]), "k": sae.k,
               "hook_name": sae.hook_name, "pc1_bypass": sae.bypass is not None}
    return {"summary": summary, "metadata": {"cfg": sae.cfg}}


FORMATS = [
    Format("sae", "SAELens sparse autoencoder folder", (), _sniff, _inspect, panel="sae",
           kinds=("checkpoint",)),
]
