"""RealSense-like depth noise: std follows z^2 * std_px / (f * b), holes, quantisation, formats."""
import numpy as np
import pytest

from real2sim2real_ros.core.cell_spec import DepthNoiseSpec
from real2sim2real_ros.core.depth_noise import (
    apply_depth_noise,
    depth_sigma,
    edge_mask,
    encode_depth,
    to_16uc1,
    to_32fc1,
)

SPEC = DepthNoiseSpec(baseline=0.05, focal_px=383.0, subpixel_std=0.08, dropout=0.002)


def test_sigma_model_numbers():
    # 0.08 px / (383 px * 0.05 m) = 4.18 mm at 1 m, four times that at 2 m.
    assert depth_sigma(1.0, SPEC) == pytest.approx(0.08 / (383 * 0.05))
    assert depth_sigma(2.0, SPEC) == pytest.approx(4 * depth_sigma(1.0, SPEC))


@pytest.mark.parametrize('z', [1.0, 2.0])
def test_noise_std_within_20_percent_of_model(z):
    clean = np.full((240, 320), z, dtype=np.float32)
    noisy = apply_depth_noise(clean, SPEC, rng=3)
    err = (noisy - clean)[np.isfinite(noisy)]
    assert err.size > 0.99 * clean.size * (1 - 2 * SPEC.dropout)
    assert abs(err.mean()) < 0.1 * depth_sigma(z, SPEC)
    assert err.std() == pytest.approx(depth_sigma(z, SPEC), rel=0.2)


def test_deterministic_given_seed():
    clean = np.linspace(0.5, 2.0, 100 * 100, dtype=np.float32).reshape(100, 100)
    a = apply_depth_noise(clean, SPEC, rng=11)
    b = apply_depth_noise(clean, SPEC, rng=11)
    c = apply_depth_noise(clean, SPEC, rng=12)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(np.nan_to_num(a), np.nan_to_num(c))


def test_holes_at_depth_edges_and_dropout():
    clean = np.full((100, 100), 1.0, dtype=np.float32)
    clean[:, 50:] = 0.8                    # a 20 cm step between columns 49 and 50
    spec = DepthNoiseSpec(dropout=0.0, edge_hole_width=1)
    noisy = apply_depth_noise(clean, spec, rng=0)
    assert np.isnan(noisy[:, 49:51]).all()
    assert np.isfinite(noisy[:, :48]).all() and np.isfinite(noisy[:, 52:]).all()
    assert edge_mask(clean, 0.03, width=2)[:, 48:52].all()
    flat = np.full((200, 200), 1.0, dtype=np.float32)
    dropped = np.isnan(apply_depth_noise(flat, DepthNoiseSpec(dropout=0.05), rng=1)).mean()
    assert dropped == pytest.approx(0.05, abs=0.01)


def test_range_limits_and_quantisation():
    clean = np.array([[0.1, 0.5, 5.0, np.inf]], dtype=np.float32)
    noisy = apply_depth_noise(clean, DepthNoiseSpec(enabled=False), rng=0)
    assert np.isnan(noisy[0, 0]) and np.isnan(noisy[0, 2]) and np.isnan(noisy[0, 3])
    assert noisy[0, 1] == pytest.approx(0.5)
    q = apply_depth_noise(np.full((50, 50), 1.2345, np.float32), SPEC, rng=0)
    mm = q[np.isfinite(q)] * 1000.0
    np.testing.assert_allclose(mm, np.round(mm), atol=1e-3)   # 1 mm steps


def test_format_conversions():
    m = np.array([[1.2344, np.nan, 0.0, 70.0]], dtype=np.float32)
    u16 = to_16uc1(m)
    assert u16.dtype == np.uint16
    assert u16.tolist() == [[1234, 0, 0, 65535]]
    back = to_32fc1(u16)
    assert back.dtype == np.float32 and back[0, 0] == pytest.approx(1.234)
    assert np.isnan(back[0, 1]) and np.isnan(back[0, 2])
    f32 = encode_depth(m, '32FC1')
    assert np.isnan(f32[0, 1]) and np.isnan(f32[0, 2]) and f32[0, 0] == pytest.approx(1.2344)
    with pytest.raises(ValueError, match='unknown depth format'):
        encode_depth(m, '8UC1')
