"""The identification and training stages (core/sysid/stage.py, core/policies/stage.py) the
nodes and the evaluation harness share: the lab's controller file as the servo gains, one
identification config, the stage folders with their per-sub-stage profile, and no truth read
by the stages on a strict truth door."""
import json
import tempfile
from glob import glob
from pathlib import Path

import numpy as np
import pytest

from real2sim2real_ros.core.cell_spec import default_cell_spec_path, load_cell_spec
from real2sim2real_ros.core.controller_config import cell_controller_config, load_servo_gains
from real2sim2real_ros.core.emulated_world import EmulatedWorld
from real2sim2real_ros.core.evaluation.identification import (
    identification_config_path,
    record_probe,
)
from real2sim2real_ros.core.parameters import ParameterError
from real2sim2real_ros.core.robot_description import default_cell_urdf, load_robot
from real2sim2real_ros.core.sysid import stage as ident
from real2sim2real_ros.core.sysid.config import load_identification_config
from real2sim2real_ros.core.truth import TruthDoor, TruthLeak

CONFIG = Path(__file__).resolve().parents[2] / 'config'


@pytest.fixture(scope='module')
def robot():
    return load_robot(default_cell_urdf())


def test_every_shipped_cell_has_the_controller_file_of_its_servo():
    """The lab's ros2_control file holds the gains the emulated servo runs (the evaluator
    checks the file against the cell's truth; the stages read only the file)."""
    for path in sorted(glob(str(CONFIG / 'cells' / '*.yaml'))):
        spec = load_cell_spec(path)
        joints = list(load_robot(spec.urdf_path() or default_cell_urdf()).joint_names)  # ARM
        gains = load_servo_gains(cell_controller_config(spec), joints)
        kp, kv = (spec.robot.per_joint(k, len(joints)) for k in ('kp', 'kv'))
        assert [gains[f'actuator/{j}/kp'] for j in joints] == list(kp), path
        assert [gains[f'actuator/{j}/kv'] for j in joints] == list(kv), path


def test_a_robot_swapped_in_gets_the_controller_file_of_its_own_servo(tmp_path):
    """The harness with --robot: the cell runs the new robot's default servo gains, so the
    lab's controller file is written from them (the spec's shipped file is the old robot's:
    with it the twin's servo was 20% softer and 2.7x less damped than the cell's)."""
    from real2sim2real_ros.core.controller_config import write_controller_config
    from real2sim2real_ros.core.robot_description import gripper_cell_urdf
    from real2sim2real_ros.core.tools import cell_spec_with_robot
    spec = cell_spec_with_robot(load_cell_spec(default_cell_spec_path()), gripper_cell_urdf())
    joints = list(load_robot(spec.urdf_path()).joint_names)
    path = write_controller_config(tmp_path / 'c.yaml', joints, spec.robot.kp, spec.robot.kv)
    gains = load_servo_gains(path, joints)
    assert [gains[f'actuator/{j}/kp'] for j in joints] == list(spec.robot.kp)
    assert [gains[f'actuator/{j}/kv'] for j in joints] == list(spec.robot.kv)
    shipped = load_servo_gains(CONFIG / 'controllers' / 'default_arm.yaml', joints)
    assert shipped != gains                 # what the harness used to give the twin
    one = load_servo_gains(write_controller_config(tmp_path / 'd.yaml', joints, 800.0, 20.0))
    assert set(one.values()) == {800.0, 20.0}


def test_controller_file_errors_name_the_problem(tmp_path):
    bad = tmp_path / 'c.yaml'
    bad.write_text('jtc:\n  ros__parameters:\n    gains:\n      elbow_joint: {p: 10.0}\n')
    assert load_servo_gains(bad) == {'actuator/elbow_joint/kp': 10.0,
                                     'actuator/elbow_joint/kv': 0.0}
    with pytest.raises(ParameterError, match=r"no servo gains for joint\(s\) \['wrist_1_joint'\]"):
        load_servo_gains(bad, ['elbow_joint', 'wrist_1_joint'])
    bad.write_text('jtc:\n  ros__parameters:\n    gains:\n      elbow_joint: {p: -1}\n')
    with pytest.raises(ParameterError, match='elbow_joint.p = -1.0 must be finite and >= 0'):
        load_servo_gains(bad)
    bad.write_text('jtc: {ros__parameters: {joints: [a]}}\n')
    with pytest.raises(ParameterError, match='no controller with ros__parameters.gains'):
        load_servo_gains(bad)
    with pytest.raises(ParameterError, match='cannot read the controller configuration'):
        load_servo_gains(tmp_path / 'missing.yaml')


def test_one_identification_config_with_the_controller_file_as_known_values(tmp_path):
    conf = load_identification_config(identification_config_path())
    assert conf.controller_config.endswith('controllers/default_arm.yaml')
    assert conf.known['actuator/elbow_joint/kp'] == 2000.0 and len(conf.known) == 12
    # A lab's (or the harness's per cell) controller file instead of the shipped one.
    ur5 = load_identification_config(identification_config_path(),
                                     controller_config=CONFIG / 'controllers' / 'ur5.yaml')
    assert ur5.known['actuator/shoulder_lift_joint/kv'] == 120.0
    # The objects' mass bounds hold the drawn cells' prior (0.03-1.5 kg) with a margin.
    mass = next(t for t in conf.object_templates if t['name'].endswith('/mass'))
    assert mass['lower'] < 0.03 and mass['upper'] > 1.5


def test_arm_stage_writes_its_folder_and_profile_and_reads_no_truth(robot, tmp_path):
    """The arm half of the stage on the emulated cell behind a strict truth door: probes
    recorded from joint states only, the fit, the folder; no truth read. A stage reading the
    spec's servo gains (the old harness's known_gains) is a leak."""
    spec = load_cell_spec(default_cell_spec_path())
    door = TruthDoor(strict=True)
    world = EmulatedWorld(spec, truth=door)
    try:
        conf = load_identification_config(identification_config_path())
        timer = ident.StageTimer()
        world.reset()
        center = world.joint_positions()
        with timer('arm_probes'):
            probes = ident.arm_probes(robot, center, 2, duration=2.0, amplitude=0.2,
                                      velocity_fraction=0.4)
            recs = [record_probe(world, p) for p in probes]
        out = ident.fit_and_write(
            robot, conf, tmp_path, arm_specs=conf.specs, object_specs=[], arm_recs=recs,
            settings=ident.FitSettings(nthread=1, method='regression', restarts=0),
            timer=timer)
        assert door.report()['leaks'] == [] and door.report()['allowed'] == {}
        assert out.heldout_arm and out.fit.method == 'regression'
        manifest = json.loads(out.manifest_path.read_text())
        prof = manifest['results']['profile']
        assert {'arm_probes', 'arm_fit', 'twin_builds', 'report'} <= set(prof['seconds'])
        assert prof['counts']['twin_builds'] == 1
        assert manifest['parameters']['controller_config'] == conf.controller_config
        assert (out.folder / 'parameters.yaml').is_file() and out.report_path
        assert len(list(out.estimates)) == len(conf.specs)

        def leaking_gains(world):           # what evaluation/identification.known_gains was
            return list(world.spec.robot.kp)
        with pytest.raises(TruthLeak, match='leaking_gains.*hidden truth'):
            leaking_gains(world)
    finally:
        world.close()


def test_arm_fit_beside_the_strikes_is_the_fit_the_stage_would_run(robot):
    """ArmFit on its thread gives the estimates of the same fit run in the caller's thread,
    bit for bit; the profile gets the fit's time and the wait for it; an error in the thread
    comes out of result(); a cancelled fit stops at its next checkpoint."""
    from real2sim2real_ros.core.parameters import ParameterSpec, UnknownParameterError
    spec = load_cell_spec(default_cell_spec_path())
    world = EmulatedWorld(spec)
    try:
        world.reset()
        probes = ident.arm_probes(robot, world.joint_positions(), 2, duration=2.0,
                                  amplitude=0.2, velocity_fraction=0.4)
        recs = [record_probe(world, p) for p in probes]
    finally:
        world.close()
    conf = load_identification_config(identification_config_path())
    settings = ident.FitSettings(nthread=1, method='regression', restarts=0)

    def job(specs=conf.specs, **kw):
        return ident.ArmFit(ident.arm_twin(robot, conf, [], settings), specs, recs,
                            settings=settings, **kw)
    here = job(strikes_follow=False, background=False)
    assert [r.name for r in here.fit_recs] == ['probe_0'] and len(here.heldout) == 1
    expected = here.result().parameters.values()
    assert here.result().parameters.values() == expected     # asked again: the same fit
    timer = ident.StageTimer()
    beside = job(strikes_follow=False, timer=timer)
    assert beside.result().parameters.values() == expected
    assert {'arm_fit', 'arm_fit_wait'} <= set(timer.seconds)
    assert len(job(strikes_follow=True, background=False).fit_recs) == 2   # strikes score it
    bad = job([ParameterSpec('joint/no_such_joint/damping', 0.5, 0.0, 2.0)],
              strikes_follow=False)
    with pytest.raises(UnknownParameterError, match='no_such_joint'):
        bad.result()
    cancelled = job(strikes_follow=False, background=False)
    cancelled.cancel()
    with pytest.raises(ident.ArmFitCancelled):
        cancelled.result()
    from real2sim2real_ros.core.sysid.bags import MissingTopicsError
    with pytest.raises(MissingTopicsError, match='arm probe recordings'):
        ident.ArmFit(None, conf.specs, [], strikes_follow=False)


def test_strike_loop_stops_on_a_lost_object_and_names_it(robot):
    """run_strikes on a fake StrikeCell: the object seen before strike 1 but not after is
    reported as lost (ProbeExecutionError), no tracked object at all as MissingTopicsError."""
    from real2sim2real_ros.bench.object_id_bench import scene_xml
    from real2sim2real_ros.core.sysid.bags import MissingTopicsError
    spec = load_cell_spec(default_cell_spec_path())
    conf = load_identification_config(identification_config_path())
    with tempfile.TemporaryDirectory() as d:
        scene = Path(d) / 'scene.xml'
        scene.write_text(scene_xml(spec))
        twin, specs, note = ident.object_setup(robot, conf, str(scene), object_ids=['box_0'])
        assert note == '' and [s.name for s in specs] == [
            'geom/box_0/friction', 'body/box_0/mass', 'body/box_0/com_offset_x',
            'body/box_0/com_offset_y']
        assert (specs[1].lower, specs[1].upper) == (0.02, 2.0)
        box = spec.object('box_0')

        class Nothing:
            def tracked_poses(self, ids):
                return {}

            def current_positions(self):
                return np.asarray(spec.robot.initial_positions)

        with pytest.raises(MissingTopicsError, match=r"tracker does not see \['box_0'\] before "
                                                     r"strike 0"):
            ident.run_strikes(Nothing(), robot, twin, specs, conf, 2,
                              settings=ident.FitSettings(nthread=1), values=conf.known)

        class Lost(Nothing):
            def __init__(self):
                self.n = 0

            def tracked_poses(self, ids):
                self.n += 1
                return {'box_0': (np.array([*box.xyz[:2], box.size[2] / 2]), box.yaw)} \
                    if self.n == 1 else {}

            def strike(self, plan, index, info):    # no tracks: the intermediate fit skips it
                return _empty_strike(plan, index)

        cell = Lost()
        with pytest.raises(ident.ProbeExecutionError, match="'box_0' is lost"):
            ident.run_strikes(cell, robot, twin, specs, conf, 2,
                              settings=ident.FitSettings(nthread=1), values=conf.known)
        twin.close()


def test_strikes_that_stop_early_cancel_the_validation_fit(robot):
    """n = 3 strikes, but the third finds no safe strike (the box rests 0.12 m from the
    table's edge): the strikes stop after two, and the validation fit started for a third
    (on both) is cancelled, not waited for: fit_and_write makes the one on the first."""
    from real2sim2real_ros.bench.object_id_bench import scene_xml
    spec = load_cell_spec(default_cell_spec_path())
    conf = load_identification_config(identification_config_path())
    box = spec.object('box_0')
    logged = []

    class Edge:
        def __init__(self):
            self.n = 0

        def tracked_poses(self, ids):
            self.n += 1
            xy = box.xyz[:2] if self.n < 3 else (0.783, 0.173)
            return {'box_0': (np.array([*xy, box.size[2] / 2]), box.yaw if self.n < 3
                              else np.radians(2.0))}

        def current_positions(self):
            return np.asarray(spec.robot.initial_positions)

        def strike(self, plan, index, info):
            return _empty_strike(plan, index)

    with tempfile.TemporaryDirectory() as d:
        scene = Path(d) / 'scene.xml'
        scene.write_text(scene_xml(spec))
        twin, specs, _ = ident.object_setup(robot, conf, str(scene), object_ids=['box_0'])
        timer = ident.StageTimer()
        done = ident.run_strikes(Edge(), robot, twin, specs, conf, 3,
                                 settings=ident.FitSettings(nthread=1), values=conf.known,
                                 timer=timer, log=logged.append,
                                 final_values=lambda: dict(conf.known))
        twin.close()
    assert len(done.recordings) == 2 and done.validation is None
    assert any('strike probe 2' in m and 'stopping strikes' in m for m in logged), logged
    assert timer.counts['strike_probes'] == 2
    assert 'object_fit_validation_wait' not in timer.counts


def _empty_strike(plan, index):
    from real2sim2real_ros.core.sysid.fit import Recording
    from real2sim2real_ros.core.sysid.object_fit import StrikeRecording
    p = plan.probe
    rec = Recording(p.times, p.positions, p.positions[0], p.times, p.positions, p.velocities,
                    None, p.positions[0], name=p.name)
    return StrikeRecording(rec, {}, plan.strikes, f'strike_{index}')


def test_live_probe_counts_share_max_probes_between_arm_and_strikes():
    # No objects: the goal's count, else the node's default.
    assert ident.probe_counts(0, 3, 2, 5, arm=True, objects=False) == (3, 0)
    assert ident.probe_counts(4, 3, 2, 5, arm=True, objects=False) == (4, 0)
    # Objects: the strikes' share comes off the arm's, which keeps at least one.
    assert ident.probe_counts(4, 3, 2, 5, arm=True, objects=True) == (3, 2)
    assert ident.probe_counts(0, 3, 6, 5, arm=True, objects=True) == (1, 4)
    # Objects only: every probe may strike.
    assert ident.probe_counts(0, 3, 6, 5, arm=False, objects=True) == (1, 5)


def test_offline_bags_split_into_arm_and_strike_recordings():
    arm, strikes = ['a0', 'a1'], ['s0']
    assert ident.split_offline_bags(arm + strikes, strikes, ['arm'], ['obj'], False) == (
        arm, strikes, ['arm'])
    # Strike bags count only when objects are identified.
    assert ident.split_offline_bags(arm + strikes, strikes, ['arm'], [], False) == (
        arm, [], ['arm'])
    # Strike bags alone: the objects only, unless parameters are named.
    assert ident.split_offline_bags(strikes, strikes, ['arm'], ['obj'], False) == (
        [], strikes, [])
    assert ident.split_offline_bags(strikes, strikes, ['arm'], ['obj'], True) == (
        [], strikes, ['arm'])


def test_tracked_poses_average_position_and_yaw_per_object():
    def quat(yaw):
        return (np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2))
    samples = [('box', (0.5, 0.1, 0.02), quat(3.1)), ('box', (0.7, 0.1, 0.04), quat(-3.1)),
               ('other', (0.0, 0.0, 0.0), quat(0.0))]
    poses = ident.mean_tracked_poses(samples, {'box'})
    assert set(poses) == {'box'}
    xyz, yaw = poses['box']
    assert np.allclose(xyz, (0.6, 0.1, 0.03))
    assert abs(abs(yaw) - np.pi) < 1e-6      # the circular mean across +-pi, not 0
