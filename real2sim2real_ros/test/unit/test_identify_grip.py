"""nodes/system_identification/grip_probe.py without a graph: which identify goals run the
slip probe, how long each live step is replayed, and the identify folder amended with its
estimates (parameters.yaml and the manifest's hash agree)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from real2sim2real_ros.core.artifacts import RunDirectory, sha256_file
from real2sim2real_ros.core.grasping.slip import SlipRun
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


def test_each_live_step_is_replayed_for_as_long_as_it_took():
    world = ExecutorGripWorld(None, None, None, 'box_0')
    # open, close at 30 N, three steps (the last one lets the box out), open again
    world.grips = [(0.04, 30, 10.0, 0.4), (0.0, 30, 11.0, 1.2), (0.0, 24, 13.0, 1.1),
                   (0.0, 19.2, 14.5, 5.9), (0.0, 15.4, 21.0, 0.3), (0.04, 30, 21.8, 0.4)]
    run = SlipRun([24, 19.2, 15.4], [0.03, 0.03, 0.0], 0.03, 2)
    assert world.step_dwells(run) == pytest.approx((1.5, 6.5, 0.8))


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
