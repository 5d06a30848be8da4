"""The slip probe live (issue "Grasp and place", build item 5): the emulated bringup on the
gripper cell (config/cells/gripper.yaml), its scene as reconstruction gives it on the latched
``scene`` topic, the bringup's object_tracker following the box. An identify goal naming
``global/finger_friction`` makes system_identification grasp the box at its tracked pose
through the armed executor's ``grip`` and ``execute_trajectory``, lift it, lower the closing
effort until it slips, then fit the twin's finger friction; the held mass comes from the
arm's efforts in ``joint_states``. The test is the evaluator: it reads the cell spec's hidden
truth to score them."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

from helpers.graph import start_graph  # noqa: E402
from helpers.latched_scene import publish_scene  # noqa: E402

from real2sim2real_msgs.action import Identify  # noqa: E402


@pytest.fixture(scope='module')
def gripper_bringup(share_dir, tmp_path_factory):
    from real2sim2real_ros.ros.commander import Commander
    tmp = tmp_path_factory.mktemp('grip_ident')
    graph = start_graph('bringup.launch.xml', {
        'cell': 'emulated', 'cell_real_time': 'true',
        'cell_spec': str(share_dir / 'config' / 'cells' / 'gripper.yaml'),
        'run_dir': str(tmp / 'runs')}, tmp)
    cmd = Commander(node_name='grip_ident_commander')
    try:
        cmd.wait_until_up(timeout=60)
        yield cmd, tmp, share_dir / 'config' / 'cells' / 'gripper.yaml'
    finally:
        cmd.close()
        graph.stop(timeout=30)


def test_live_slip_probe_identifies_the_finger_friction_and_the_held_mass(gripper_bringup):
    from real2sim2real_ros.core.cell_spec import load_cell_spec
    cmd, tmp, spec_path = gripper_bringup
    spec = load_cell_spec(spec_path)
    publisher = publish_scene(spec, tmp)
    try:
        assert cmd.arm(wait=30).success
        feedback = []
        t0 = time.monotonic()
        result = cmd.identify(parameter_names=['global/finger_friction'],
                              run_dir=str(tmp / 'live'), feedback=feedback.append,
                              timeout=400)
        live_s = time.monotonic() - t0
    finally:
        publisher.close()
    assert result.error_code == Identify.Result.NONE, result.error_msg
    est = {p.name: p for p in result.parameters.parameters}
    truth = spec.hidden_truth()
    f, m = est['global/finger_friction'], est['body/box_0/mass']
    mu, mass = truth['geom/box_0/friction'], truth['body/box_0/mass']
    record = json.loads(Path(result.report_path).read_text())
    print(f'live slip probe {live_s:.0f} s: finger friction {f.value:.3f} [{f.lower_95:.3f}, '
          f'{f.upper_95:.3f}] (box {mu}); held mass {m.value:.3f} [{m.lower_95:.3f}, '
          f'{m.upper_95:.3f}] (truth {mass}); slipped at step {record["cell"]["slipped_at"]}, '
          f'steps {[round(d, 2) for d in record["step_dwells_s"]]} s, held at '
          f'{record["cell"]["held_width"]:.4f} m, widths '
          f'{[round(w, 4) for w in record["cell"]["widths"]]} m, every probe out at step '
          f'{record["cell"]["repeat_steps"]}')
    assert set(est) == {'global/finger_friction', 'body/box_0/mass'}
    # Held mass: -9 .. +7% over 30 in-process cases, +6.6% in-process at this box's pose (dry
    # joint friction keeps part of the load change: its sign and size follow the pose and the
    # motion before), +7.9 .. +10.4% live here (docs/grasping.md): within 15%.
    assert m.identified and abs(m.value - mass) <= 0.15 * mass, (m.value, mass)
    # The fit is the friction at which the twin, holding the held mass, lets the box out at
    # the cell's step: what the twin needs is the cell's friction per kilogram, mu / m (the
    # pads' grip against the weight), so the held mass's error carries into the friction
    # (first run: 0.226 kg for 0.21, friction 0.621 [0.560, 0.689] for 0.55; per kg
    # [2.48, 3.05] for 2.62). The interval is one x0.8 step wide.
    assert f.identified and f.upper_95 / f.lower_95 < 1.25 * 1.03, record['fit']
    assert f.lower_95 / m.value <= mu / mass <= f.upper_95 / m.value, record['fit']
    assert abs(f.value / m.value - mu / mass) <= 0.15 * mu / mass
    assert {'slip probe', 'fit finger friction', 'done'} <= {fb.stage for fb in feedback}
    folder = Path(result.parameters.artifact_dir)
    assert folder.name.startswith('identify_grip_') and Path(result.report_path).parent == folder
    manifest = json.loads((folder / 'manifest.json').read_text())
    assert manifest['outputs']['grip_probe']['sha256']
    # Every arm motion and jaw goal of the probe was recorded by the executor.
    assert len(manifest['inputs']['bags']) >= 10
    assert all(Path(b).exists() for b in manifest['inputs']['bags'])
    assert record['cell']['slip_effort'] is not None and len(record['grips']) >= 4
