"""RealSense D435-like depth noise on a clean rendered depth image.

Model (active stereo): depth z = f * b / disparity, so a disparity error of ``subpixel_std``
pixels gives sigma_z(z) = z^2 * subpixel_std / (f * b): the error grows with z squared.
Stereo matching fails at depth discontinuities (holes along edges) and at random pixels
(dropout); the device reports depth in 1 mm steps (16UC1). Holes are NaN in 32FC1 metres and
0 in 16UC1 millimetres, as realsense-ros / depth_image_proc treat them.
Deterministic for a given generator/seed.
"""
from __future__ import annotations

import numpy as np

from .cell_spec import DepthNoiseSpec


def depth_sigma(z, spec: DepthNoiseSpec):
    """Standard deviation (m) of the depth error at depth ``z`` (m)."""
    z = np.asarray(z, dtype=float)
    return z * z * spec.subpixel_std / (spec.focal_px * spec.baseline)


def edge_mask(depth: np.ndarray, threshold: float, width: int = 1) -> np.ndarray:
    """Pixels whose depth differs from a 4-neighbour by more than ``threshold`` (dilated)."""
    d = np.nan_to_num(depth, nan=0.0)
    mask = np.zeros(d.shape, dtype=bool)
    dv = np.abs(np.diff(d, axis=0)) > threshold
    dh = np.abs(np.diff(d, axis=1)) > threshold
    mask[1:, :] |= dv
    mask[:-1, :] |= dv
    mask[:, 1:] |= dh
    mask[:, :-1] |= dh
    for _ in range(max(0, width - 1)):
        grown = mask.copy()
        grown[1:, :] |= mask[:-1, :]
        grown[:-1, :] |= mask[1:, :]
        grown[:, 1:] |= mask[:, :-1]
        grown[:, :-1] |= mask[:, 1:]
        mask = grown
    return mask


def apply_depth_noise(depth: np.ndarray, spec: DepthNoiseSpec,
                      rng: np.random.Generator | int | None = 0) -> np.ndarray:
    """Noisy float32 depth in metres (NaN = hole) from a clean depth image in metres."""
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    clean = np.asarray(depth, dtype=np.float64)
    out = clean.copy()
    if spec.enabled:
        out = out + rng.standard_normal(out.shape) * depth_sigma(clean, spec)
        holes = edge_mask(clean, spec.edge_threshold, spec.edge_hole_width)
        if spec.dropout > 0:
            holes |= rng.random(out.shape) < spec.dropout
        out[holes] = np.nan
    out[~np.isfinite(clean) | (clean < spec.min_depth) | (clean > spec.max_depth)] = np.nan
    if spec.quantization > 0:
        out = np.round(out / spec.quantization) * spec.quantization
    return out.astype(np.float32)


def to_16uc1(depth_m: np.ndarray) -> np.ndarray:
    """Metres (NaN / <= 0 = hole) -> uint16 millimetres (0 = hole), saturating at 65.535 m."""
    d = np.asarray(depth_m, dtype=np.float64)
    mm = np.where(np.isfinite(d) & (d > 0), np.round(d * 1000.0), 0.0)
    return np.clip(mm, 0, 65535).astype(np.uint16)


def to_32fc1(depth: np.ndarray) -> np.ndarray:
    """uint16 millimetres (0 = hole) or float metres -> float32 metres (NaN = hole)."""
    arr = np.asarray(depth)
    if arr.dtype == np.uint16:
        out = arr.astype(np.float32) / 1000.0
        out[arr == 0] = np.nan
        return out
    out = arr.astype(np.float32, copy=True)
    out[~(out > 0)] = np.nan
    return out


def encode_depth(depth_m: np.ndarray, depth_format: str) -> np.ndarray:
    """Depth in metres -> the array a ROS Image of ``depth_format`` carries."""
    if depth_format == '16UC1':
        return to_16uc1(depth_m)
    if depth_format == '32FC1':
        return to_32fc1(depth_m)
    raise ValueError(f'unknown depth format {depth_format!r}; use 32FC1 or 16UC1')
