"""Per-frame metrics of a generated clip, in numpy (no Qt, no torch), so they can run on a
worker thread: silhouette IoU with the control and frame-to-frame difference.

Silhouettes are coarse on purpose: a pixel is foreground when it differs from the clip's
background (the per-pixel temporal median) by more than ``FOREGROUND_THRESHOLD`` in any
channel. The control's silhouettes come from the renderer when a c2r run saved them, else the
same background subtraction on the coarse clip. Temporal consistency is the mean absolute
difference between a frame and the previous one, in [0, 1] (0 for the first frame).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FOREGROUND_THRESHOLD = 40  # of 255, any channel


@dataclass
class FrameMetrics:
    silhouette_iou: np.ndarray  # (T,) in [0, 1]
    frame_difference: np.ndarray  # (T,) in [0, 1]


def foreground(clip: np.ndarray, threshold: int = FOREGROUND_THRESHOLD) -> np.ndarray:
    """(T, H, W) bool: pixels far from the clip's per-pixel temporal median."""
    clip = np.asarray(clip, dtype=np.int16)
    background = np.median(clip, axis=0)
    return (np.abs(clip - background) > threshold).any(axis=-1)


def silhouette_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(T,) intersection over union of two (T, H, W) masks; 1 where both are empty."""
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    inter = (a & b).sum(axis=(1, 2))
    union = (a | b).sum(axis=(1, 2))
    return np.where(union > 0, inter / np.maximum(union, 1), 1.0)


def frame_difference(clip: np.ndarray) -> np.ndarray:
    """(T,) mean |frame_t - frame_{t-1}| / 255, 0 for the first frame."""
    clip = np.asarray(clip, dtype=np.float32)
    diffs = np.abs(np.diff(clip, axis=0)).mean(axis=tuple(range(1, clip.ndim))) / 255.0
    return np.concatenate([[0.0], diffs])


def match_size(mask: np.ndarray, height: int, width: int) -> np.ndarray:
    """A (T, h, w) mask resampled (nearest) to (T, height, width)."""
    rows = (np.arange(height) * mask.shape[1] / height).astype(int)
    cols = (np.arange(width) * mask.shape[2] / width).astype(int)
    return mask[:, rows][:, :, cols]


def clip_metrics(generated: np.ndarray, control: np.ndarray) -> FrameMetrics:
    """Metrics of ``generated`` (T, H, W, 3) against ``control``: silhouettes (T', h, w) bool
    or a coarse clip (T', h, w, 3). Frames past the shorter clip's end compare with its last."""
    control_masks = np.asarray(control, bool) if control.ndim == 3 else foreground(control)
    control_masks = match_size(control_masks, generated.shape[1], generated.shape[2])
    count = len(generated)
    held = control_masks[np.minimum(np.arange(count), len(control_masks) - 1)]
    return FrameMetrics(silhouette_iou(foreground(generated), held), frame_difference(generated))
