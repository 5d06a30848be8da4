"""nodes/system_identification/grip_probe.py without a graph: which identify goals run the
slip probe, the live probe's clock and repeats, and the identify folder amended with its
estimates (parameters.yaml and the manifest's hash agree)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from real2sim2real_ros.core.artifacts import RunDirectory, sha256_file
from real2sim2real_ros.core.parameters import ParameterEstimate, ParameterSet
from real2sim2real_ros.nodes.system_identification.grip_probe import (
    PARAMETER,
    ExecutorGripWorld,
    amend_identify,
    grip_plan,
)


@pytest.mark.parametrize('names,bags,task,gripper,want', [
    ([PARAMETER], [], '', True, (True, False)),             # named alone: the probe only
    ([PARAMETER, 'geom/box_0/friction'], [], '', True, (True, True)),
    ([], [], 'gentle_pick_and_place', True, (True, True)),  # grip_task: every live goal
    ([], [], 'gentle_pick_and_place', False, (False, True)),  # ... of a robot with a gripper
    ([], ['a_bag'], 'gentle_pick_and_place', True, (False, True)),  # not offline
    (['geom/box_0/friction'], [], 'gentle_pick_and_place', True, (False, True)),
    ([], [], '', True, (False, True)),
])
def test_which_goals_run_the_slip_probe(names, bags, task, gripper, want):
    assert grip_plan(names, bags, task, gripper) == want


def test_the_probe_times_its_steps_on_the_cells_clock_and_repeats_from_home():
    """The live world's clock is the cell's (joint_states stamps); a repeat's start is read
    after the arm went back home (out of the camera's view of the dropped box)."""
    calls = []
    node = SimpleNamespace(_cell_time=lambda: 12.5,
                           _tracked_poses=lambda ids: {'box_0': ((0.5, 0.1, 0.03), 0.2)})
    world = ExecutorGripWorld(node, SimpleNamespace(is_cancel_requested=False), None,
                              'box_0', home=[0.0, -1.0])
    world.reset = lambda q: calls.append(list(q))
    assert world.time == 12.5
    xyz, yaw = world.observe_start(None, None)
    assert calls == [] and yaw == pytest.approx(0.2) and xyz == pytest.approx([0.5, 0.1, 0.03])
    world.observe_start(None, None)
    assert calls == [[0.0, -1.0]]


def test_the_identify_folder_takes_the_slip_probes_estimates(tmp_path):
    stage = RunDirectory(tmp_path).new_stage('identify')
    ps = ParameterSet()
    ps.add(ParameterEstimate('body/box_0/mass', 0.41, 0.35, 0.47, 0.14, 'kg', True))
    ps.add(ParameterEstimate('geom/box_0/friction', 0.5, 0.4, 0.6, 0.5, '1', True))
    stage.add_output('parameters', ps.save(stage.folder / 'parameters.yaml'))
    stage.results = {'estimates': ps.to_dict()['parameters']}
    manifest = stage.finish()
    out = SimpleNamespace(estimates=ps, folder=stage.folder, manifest_path=manifest)
    grip = [ParameterEstimate(PARAMETER, 0.6, 0.54, 0.67, 1.0, '1', True),
            ParameterEstimate('body/box_0/mass', 0.86, 0.77, 0.95, 0.14, 'kg', True)]
    amend_identify(out, (grip, tmp_path / 'identify_grip_000', {}))
    saved = ParameterSet.load(stage.folder / 'parameters.yaml')
    assert saved['body/box_0/mass'].value == 0.86 and saved[PARAMETER].value == 0.6
    assert saved['geom/box_0/friction'].value == 0.5
    m = json.loads(manifest.read_text())
    assert m['outputs']['parameters']['sha256'] == sha256_file(stage.folder / 'parameters.yaml')
    assert len(m['results']['estimates']) == 3
    assert m['results']['grip']['replaced_or_added'] == [PARAMETER, 'body/box_0/mass']
