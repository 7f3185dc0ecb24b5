"""fMRI viewer: scrubbing a 91x109x91x400 float32 run (1.4 GB) in .nii and .nii.gz.

Each step renders the three orthogonal views the panel draws (``ViewerModel.render``: the
slices in display orientation plus the value under the cursor) at a new time point, on one
thread. For .nii.gz the first view is timed from a cold open, then later frames once the
background pass is done: a seek index (indexed_gzip), or a one-off decompression into the
workspace cache (memory-mapped), the viewer's choice for files of 256 MB and more. The files
are generated into a temporary folder, smooth enough to compress like real data.
``BENCH_FMRI_FRAMES`` shortens the run for a quick check.

BrainWorld rows: seconds per autoencoder step, diffusion step and generated chunk (100
sampling steps) at model grids of 16^3 and 32^3 on one torch thread, timed in CPU seconds
(``time.process_time``) so other load on the machine does not inflate them; 300 + 1500 steps
are what ``brainworld.train`` does by default. Patch-wise rows (``volumes="patches"``): a
training step on grid^3 patches costs what a resampled grid^3 step costs (the same model on
the same tensor sizes; each frame is encoded whole once, and a patch's latents cropped from
it), so they time what differs: encoding a full-resolution frame, and generating a whole
91x109x91 chunk: every patch (overlap grid/4) sampled in batches of 16, estimated from one
batch; with the peak resident memory the process reached. ``BENCH_FMRI_BRAINWORLD=0``
skips them.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

SHAPE = (91, 109, 91)
FRAMES = int(os.environ.get("BENCH_FMRI_FRAMES", "400"))
SCRUB_STEPS = 120
ANCHOR_REPEATS = 5


def _write_run(folder: Path) -> tuple[Path, Path]:
    """The same run as .nii and .nii.gz, streamed a frame at a time (never 1.4 GB in RAM)."""
    import nibabel as nib

    header = nib.Nifti1Header()
    header.set_data_shape((*SHAPE, FRAMES))
    header.set_data_dtype(np.float32)
    header.set_qform(np.diag([2.0, 2.0, 2.0, 1.0]) + np.array(
        [[0, 0, 0, -90], [0, 0, 0, -126], [0, 0, 0, -72], [0, 0, 0, 0]]), code=1)
    header.set_xyzt_units("mm", "sec")
    header["pixdim"][4] = 2.0
    header.set_data_offset(352)
    prefix = header.binaryblock + b"\0" * 4
    rng = np.random.default_rng(0)
    axes = np.meshgrid(*(np.linspace(-1, 1, n, dtype=np.float32) for n in SHAPE),
                       indexing="ij")
    brain = np.maximum(0, 1 - sum(a * a for a in axes)) * 1000
    plain, packed = folder / "run.nii", folder / "run.nii.gz"
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)  # gzip container, fast level
    with open(plain, "wb") as raw, open(packed, "wb") as gz:
        raw.write(prefix)
        gz.write(compressor.compress(prefix))
        for t in range(FRAMES):
            frame = brain * (1 + 0.02 * np.sin(t / 7 + axes[0] * 3))
            frame += rng.normal(0, 4, size=SHAPE).astype(np.float32).round()
            block = np.asarray(frame, dtype=np.float32).tobytes(order="F")
            raw.write(block)
            gz.write(compressor.compress(block))
        gz.write(compressor.flush())
    return plain, packed


def _model(path: Path, convert_dir: Path | None = None, convert_min_bytes: int = 0):
    from engine.io.nifti import open_volume
    from panels.fmri.model import ViewerModel

    model = ViewerModel()
    model.set_base(open_volume(path, convert_dir=convert_dir,
                               convert_min_bytes=convert_min_bytes))
    return model


def _scrub_ms(model, times: list[int], clock=time.perf_counter) -> list[float]:
    """Milliseconds per 3-view render; ``clock=time.process_time``: CPU of all threads (what
    a loaded machine does not inflate)."""
    from panels.fmri.model import ViewState

    spent = []
    for t in times:
        start = clock()
        model.render(ViewState(cursor=model.cursor, t=t))
        spent.append((clock() - start) * 1e3)
    return spent


# The anchors, in a fresh process each: nibabel reads one frame of the .nii.gz, with its
# optional indexed_gzip (as a user with it installed gets: keep_file_open=True) or without it
# (indexed_gzip blocked before nibabel is imported). argv: path, frame, "indexed"|"alone".
NIBABEL_FRAME_SCRIPT = """
import json, sys, time
if sys.argv[3] == "alone":
    sys.modules["indexed_gzip"] = None
import nibabel as nib
start = time.perf_counter()
image = nib.load(sys.argv[1], keep_file_open=sys.argv[3] == "indexed")
frame = image.dataobj[..., int(sys.argv[2])]
print(json.dumps({"seconds": time.perf_counter() - start, "mean": float(frame.mean())}))
"""


def nibabel_anchor_rows(packed: Path) -> list[dict]:
    """nibabel's time to a first and a last frame of the same .nii.gz, alone and with
    indexed_gzip, measured here in this run (the viewer's rows above are compared with it)."""
    rows = []
    for how in ("alone", "indexed"):
        for label, frame in (("first frame", 0), ("last frame", FRAMES - 1)):
            times = []
            for _ in range(ANCHOR_REPEATS):
                out = subprocess.run([sys.executable, "-c", NIBABEL_FRAME_SCRIPT, str(packed),
                                      str(frame), how], capture_output=True, text=True,
                                     timeout=1800, check=True)
                times.append(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])
            who = "nibabel + indexed_gzip" if how == "indexed" else "nibabel alone"
            rows.append({"name": f"anchor: {who}, .nii.gz open + {label}",
                         "value": statistics.median(times), "unit": "s",
                         "reference": f"median of {ANCHOR_REPEATS}, this run, same file"})
    return rows


def _cpu_s_per_call(call, repeats: int) -> float:
    call()  # warm-up (first-call allocations)
    start = time.process_time()
    for _ in range(repeats):
        call()
    return (time.process_time() - start) / repeats


def brainworld_rows() -> list[dict]:
    """What resolution trains in what time (the numbers the method's docs quote)."""
    import torch

    torch.set_num_threads(1)
    return (_brainworld_timings(16, 4) + _brainworld_timings(32, 4)
            + _patchwise_timings(16, 4) + _patchwise_timings(32, 4))


def _patchwise_timings(grid: int, patch: int) -> list[dict]:
    """One full-resolution chunk generated patch by patch, from one timed batch."""
    import resource

    import torch

    from engine.methods import brainworld as bw
    from engine.models.brainworld import BrainWorld, fc_features

    model = BrainWorld(bw.TrainParams(grid=grid, patch=patch).brainworld_config()).eval()
    overlap = grid // 4
    frames = bw.padded(np.zeros((model.cfg.chunk, *SHAPE), dtype=np.float32), grid)
    corners = bw.patch_corners(frames.shape[1:], grid, overlap, bw.LATENT_STEP)
    chunk = model.cfg.chunk
    encode_s = _cpu_s_per_call(lambda: bw.encode_run(model, frames), 1)
    past = torch.randn(bw.PATCH_BATCH, chunk, grid, grid, grid)
    t1 = torch.rand(bw.PATCH_BATCH, grid, grid, grid)

    def batch() -> None:
        with torch.no_grad():
            model.decode(model.sample_next(model.encode(past), fc_features(past, 4), t1,
                                           sampling_steps=100))

    per_batch = _cpu_s_per_call(batch, 1)
    batches = -(-len(corners) // bw.PATCH_BATCH)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return [{"name": f"brainworld patches {grid}^3: one {SHAPE} chunk ({chunk} frames, "
                     f"{len(corners)} patches, 100 steps)",
             "value": (per_batch * batches + encode_s) / 60, "unit": "min",
             "reference": f"{per_batch:.1f} s per batch of {bw.PATCH_BATCH}, "
                          f"{encode_s:.1f} s encoding the frames whole"},
            {"name": f"brainworld patches {grid}^3: encoding a {SHAPE} frame (once per frame "
                     "before training)",
             "value": encode_s / chunk, "unit": "s"},
            {"name": f"brainworld patches {grid}^3: peak memory of the process so far",
             "value": peak_mb, "unit": "MB"}]


def _brainworld_timings(grid: int, patch: int) -> list[dict]:
    import torch

    from engine.methods import brainworld as bw
    from engine.models.brainworld import BrainWorld, fc_features

    params = bw.TrainParams(grid=grid, patch=patch)
    model = BrainWorld(params.brainworld_config())
    chunk, batch = params.chunk, params.batch_size
    frames = torch.randn(2 * batch, 1, grid, grid, grid)
    latents = model.encode(torch.randn(batch, 2 * chunk, grid, grid, grid)).detach()
    past = torch.randn(batch, chunk, grid, grid, grid)
    t1 = torch.rand(batch, grid, grid, grid)

    def ae_step() -> None:
        torch.nn.functional.mse_loss(model.autoencoder(frames), frames).backward()

    def diffusion_step() -> None:
        model.diffusion_loss(latents[:, :chunk], latents[:, chunk:], fc_features(past, 4),
                             t1).backward()

    def chunk_step() -> None:
        with torch.no_grad():
            model.decode(model.sample_next(latents[:1, :chunk], fc_features(past[:1], 4),
                                           t1[:1], sampling_steps=100))

    ae_s, dit_s = _cpu_s_per_call(ae_step, 3), _cpu_s_per_call(diffusion_step, 5)
    return [{"name": f"brainworld {grid}^3: autoencoder step ({2 * batch} frames)",
             "value": ae_s, "unit": "s"},
            {"name": f"brainworld {grid}^3: diffusion step (batch {batch})",
             "value": dit_s, "unit": "s"},
            {"name": f"brainworld {grid}^3: default training (300 + 1500 steps)",
             "value": (300 * ae_s + 1500 * dit_s) / 60, "unit": "min"},
            {"name": f"brainworld {grid}^3: one generated chunk ({chunk} frames, 100 steps)",
             "value": _cpu_s_per_call(chunk_step, 1), "unit": "s"}]


def run() -> list[dict]:
    rows = brainworld_rows() if os.environ.get("BENCH_FMRI_BRAINWORLD", "1") != "0" else []
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory(prefix="bench-fmri-") as tmp:
        start = time.perf_counter()
        plain, packed = _write_run(Path(tmp))
        size_gb = (plain.stat().st_size / 1e9, packed.stat().st_size / 1e9)
        rows.append({"name": f"generate {SHAPE}x{FRAMES} float32 (.nii {size_gb[0]:.2f} GB, "
                             f".nii.gz {size_gb[1]:.2f} GB)",
                     "value": time.perf_counter() - start, "unit": "s"})

        model = _model(plain)
        times = [int(t) for t in rng.integers(0, FRAMES, SCRUB_STEPS)]
        spent = _scrub_ms(model, times)
        rows.append({"name": ".nii scrub, 3 orthogonal views per frame (random t)",
                     "value": 1e3 / statistics.mean(spent), "unit": "frames/s",
                     "target": ">= 60", "reference": "raw memmap 2-D slice ~40 us"})
        model.close()

        late = [int(t) for t in rng.integers(FRAMES // 2, FRAMES, SCRUB_STEPS // 2)]
        for mode, cache in (("indexed", None), ("converted", Path(tmp) / "cache")):
            start = time.perf_counter()
            model = _model(packed, cache)
            _scrub_ms(model, [0])
            rows.append({"name": f".nii.gz first view ({mode} mode: open + 3 views)",
                         "value": time.perf_counter() - start, "unit": "s", "target": "< 1",
                         "reference": "anchors: nibabel rows below"})
            model.base.wait_for_index()
            rows.append({"name": f".nii.gz {mode} in the background (after open)",
                         "value": time.perf_counter() - start, "unit": "s",
                         "reference": "anchor: nibabel + indexed_gzip last frame below"})
            spent = _scrub_ms(model, late)
            rows.append({"name": f".nii.gz later frames once {mode}, 3 views (median)",
                         "value": statistics.median(spent), "unit": "ms", "target": "< 25"})
            cpu = _scrub_ms(model, late[::-1], time.process_time)
            rows.append({"name": f".nii.gz later frames once {mode}, CPU of all threads",
                         "value": statistics.median(cpu), "unit": "ms",
                         "reference": "indexed: split over 2 handles, so ~half of it on "
                                      "2 idle cores"})
            model.close()
        index_cache = Path(tmp) / "index-cache"
        for opening in ("first", "second"):  # below the conversion size: index kept in cache
            start = time.perf_counter()
            model = _model(packed, index_cache, convert_min_bytes=1 << 62)
            model.base.wait_for_index()
            rows.append({"name": f".nii.gz index with a cache folder, {opening} opening: "
                                 "ready after",
                         "value": time.perf_counter() - start, "unit": "s"})
            model.close()
        rows += nibabel_anchor_rows(packed)
    return rows


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:<72} {row['value']:>10.4g} {row['unit']}")
