"""The emulated cell renders a camera only for the streams someone reads (issue 17's budget:
an idle graph rendered 640x480 colour + depth at 5 Hz for nobody). The node's frame method runs
here on recording publishers and a counting world: which images it renders, which it sends."""
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from real2sim2real_ros.core import camera_model
from real2sim2real_ros.nodes.emulated_cell_node import EmulatedCellNode

W, H = 8, 6


class _Pub:
    def __init__(self, readers: int):
        self.readers, self.sent = readers, []

    def get_subscription_count(self) -> int:
        return self.readers

    def publish(self, msg) -> None:
        self.sent.append(msg)


class _World:
    """Counts renders; its time is 2.5 s, a render's snapshot 1.25 s."""

    def __init__(self):
        self.lock, self.time, self.renders = threading.Lock(), 2.5, []

    def render_with_time(self, name, noise=True, rgb=True, depth=True):
        self.renders.append((rgb, depth))
        colour = np.zeros((H, W, 3), np.uint8) if rgb else None
        return 1.25, colour, np.full((H, W), 0.8, np.float32) if depth else None

    def intrinsics(self, name):
        return camera_model.Intrinsics(W, H, 5.0, 5.0, W / 2, H / 2)


def _frame(color=0, depth=0, color_info=0, depth_info=0):
    pubs = {'color': _Pub(color), 'depth': _Pub(depth), 'color_info': _Pub(color_info),
            'depth_info': _Pub(depth_info)}
    node = SimpleNamespace(cam_pubs={'cam': pubs}, world=_World(), t0=100.0)
    cam = SimpleNamespace(name='cam', width=W, height=H)
    EmulatedCellNode._publish_frame(node, cam, '32FC1')
    sent = {k: len(p.sent) for k, p in pubs.items()}
    return node.world.renders, sent, pubs


def _secs(msg) -> float:
    return msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec


def test_both_readers_get_both_images_from_one_render():
    renders, sent, _ = _frame(color=1, depth=1)
    assert renders == [(True, True)]
    assert sent == {'color': 1, 'depth': 1, 'color_info': 1, 'depth_info': 1}


def test_no_reader_no_render_no_message():
    renders, sent, _ = _frame()
    assert renders == [] and sum(sent.values()) == 0


def test_depth_reader_gets_depth_only_rendered():
    renders, sent, pubs = _frame(depth=1, depth_info=1)
    assert renders == [(False, True)]
    assert sent == {'color': 0, 'depth': 1, 'color_info': 1, 'depth_info': 1}
    assert _secs(pubs['depth'].sent[0]) == pytest.approx(101.25)
    assert _secs(pubs['depth_info'].sent[0]) == pytest.approx(101.25)


def test_colour_reader_renders_colour_only_and_sends_no_depth():
    renders, sent, _ = _frame(color=1)
    assert renders == [(True, False)]
    assert sent == {'color': 1, 'depth': 0, 'color_info': 1, 'depth_info': 1}


def test_camera_info_reader_alone_renders_nothing():
    renders, sent, pubs = _frame(color_info=1)
    assert renders == []
    assert sent == {'color': 0, 'depth': 0, 'color_info': 1, 'depth_info': 1}
    # Stamped with the world's clock (t0 + time), as a rendered frame would be.
    assert _secs(pubs['color_info'].sent[0]) == pytest.approx(102.5)
    assert pubs['color_info'].sent[0].k[0] == pytest.approx(5.0)


def test_the_world_renders_colour_alone_as_in_a_full_render():
    from real2sim2real_ros.core.cell_spec import default_cell_spec_path, load_cell_spec
    from real2sim2real_ros.core.emulated_world import EmulatedWorld
    world = EmulatedWorld(load_cell_spec(default_cell_spec_path()))
    try:
        _, rgb_full, depth_full = world.render_with_time('camera', noise=False)
        _, rgb_only, no_depth = world.render_with_time('camera', noise=False, depth=False)
        assert no_depth is None and depth_full is not None
        assert np.array_equal(rgb_only, rgb_full)
    finally:
        world.close()
