"""The slip probe on the live cell: the finger-object friction and the held mass through the
armed executor (issue "Grasp and place", build item 5; the probe is core/grasping/slip.py).

Asked for by an identify goal whose ``parameter_names`` include ``global/finger_friction``
(alone: the probe only), or by every live identify goal without names when ``grip_task`` is
set and the robot has a gripper (then after the arm and strike probes, in the twin they
identified). The task and the twin are built as the policy_trainer builds them
(core/training_setup.build_task_and_twin: the scene's object and table, the start values,
this goal's estimates or else the last arm values), then core/grasping/slip.run_slip_probe
runs on :class:`ExecutorGripWorld`:

* the start: the object's tracked pose (``tracked_objects``; MISSING_TOPICS without one);
* arm motions: ``execute_trajectory`` goals (the lift recorded: a bag); a hold: the arm rests
  at its last point while the node waits;
* the jaw: ``grip`` goals (``position``, the step's effort; recorded), each waited for. A jaw
  stalled on the box succeeds after the controller's ``stall_timeout``, so a live step lasts
  that plus the probe's dwell, longer on a loaded machine: the fit replays each step in the
  twin for as long as it lasted on the cell's clock (the ``joint_states`` stamps: a box
  creeps in a grasp over time);
* readings: the latest ``joint_states`` (the jaw's position; the arm's positions, efforts).

The probe grasps once per ``SlipConfig.grasp_offsets`` entry, each grasp planned from the
box's pose as then tracked (it lies where the last run dropped it; the arm goes back to
where it started first, out of the camera's view of the box); the grasp through the seen
centre counts unless another slips ``catch_steps`` earlier (core/grasping/slip.py: a box
gripped off its centre of mass turns and holds on).

The held mass (slip.held_mass, interval slip.held_mass_interval) replaces the twin's before
the friction fit and the strikes' estimate in the result. Both estimates join the goal's
result and are pushed to the twin; ``run_dir/identify_grip_NNN`` holds ``grip_probe.json``
(the run, the fit, the held mass, the bags) and its manifest.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from real2sim2real_msgs.action import Grip, Identify
from real2sim2real_msgs.msg import TrackedObjects

from ...core.grasping import slip
from ...ros import qos
from ...ros.subscriptions import subscribed
from .failure import GoalFailed

PARAMETER = slip.PARAMETER
# s waited after a move home before a repeat's start is read (the pose mean's 0.4 s window
# and the tracker's latency: the box seen where the last run dropped it)
OBSERVE_AFTER_MOVE_S = 0.6
STAGE = 'identify_grip'
R = Identify.Result


def grip_plan(names, bag_paths, grip_task: str, has_gripper: bool) -> tuple[bool, bool]:
    """(the slip probe, the arm and object identification): what an identify goal with
    parameter ``names`` runs (module docstring). The probe alone only for a goal that names
    nothing else."""
    names = list(names)
    grip = PARAMETER in names or (not names and not bag_paths and bool(grip_task)
                                  and has_gripper)
    return grip, names != [PARAMETER]


class ExecutorGripWorld:
    """core/grasping/slip.run_slip_probe's world on the live cell (module docstring): ``node``
    is the system_identification node, ``goal_handle`` its identify goal."""

    def __init__(self, node, goal_handle, robot, object_id: str, home=None):
        self.node, self.goal_handle, self.robot = node, goal_handle, robot
        self.object_id = object_id
        # the arm's pose before the probe: a repeat observes the box from there again
        self.home = None if home is None else np.asarray(home, float)
        self.observed = 0
        # (position m, effort N, start, duration): the jaw goals on the cell's clock (s)
        self.grips: list[tuple[float, float, float, float]] = []
        self.bags: list[str] = []

    def _wait(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.goal_handle.is_cancel_requested:
                raise GoalFailed(R.CANCELED, 'canceled during the slip probe')
            time.sleep(min(0.02, max(0.0, end - time.monotonic())))

    def observe_start(self, _xyz, _yaw):
        """The object's tracked pose (the probe plans its grasp from it). A repeat first takes
        the arm back home (out of the camera's view of the box the last run dropped) and
        waits for poses seen after it."""
        if self.observed and self.home is not None:
            self.reset(self.home)
            self._wait(OBSERVE_AFTER_MOVE_S)
        self.observed += 1
        poses = self.node._tracked_poses([self.object_id])
        if self.object_id not in poses:
            return None
        xyz, yaw = poses[self.object_id]
        return np.asarray(xyz, float), float(yaw)

    def reset(self, q, _xyz=None, _yaw=None, **_kw) -> None:
        """The arm to ``q`` (the object stays where it is: nobody places it)."""
        from ...core.sysid.probes import move_trajectory
        t, p, v = move_trajectory(self.node._current(self.robot), np.asarray(q, float),
                                  self.robot.velocity_limits)
        self.node._execute(self.goal_handle, self.robot, t, p, v, False,
                           'slip probe: move above the object')

    def execute(self, times, positions, velocities=None, duration=None) -> None:
        """A motion through the executor; one point (a hold at the last one): a wait."""
        times = np.asarray(times, float)
        wait = float(times[-1] if duration is None else duration)
        if len(times) > 1:
            bag = self.node._execute(self.goal_handle, self.robot, times, positions,
                                     velocities, True, 'slip probe: arm motion')
            self.bags.append(bag)
            wait -= float(times[-1])
        self._wait(max(0.0, wait))

    def command_gripper(self, position: float, max_effort: float | None = None) -> None:
        """A ``grip`` goal to ``position`` with ``max_effort``, waited for."""
        n = self.node
        t0 = n._cell_time()
        goal = Grip.Goal(command='position', position=float(position),
                         max_effort=float(max_effort or 0.0), record=True)
        res = n._send_and_wait(self.goal_handle, n._grip_client, n.p.grip_action, goal,
                               n.p.grip_goal_timeout, 'slip probe: grip')
        if res.error_code != Grip.Result.NONE:
            raise GoalFailed(R.EXECUTION_FAILED, f'slip probe: grip error {res.error_code}: '
                             f'{res.error_msg}')
        if res.bag_path:
            self.bags.append(res.bag_path)
        self.grips.append((float(position), float(max_effort or 0.0), t0,
                           n._cell_time() - t0))

    def gripper_state(self) -> tuple[float, float, float]:
        """The jaw's latest (position m, velocity m/s, effort N) from joint_states."""
        from ...core.grasping.jaw import gripper_joints
        return tuple(float(x[0]) for x in self.node._latest([gripper_joints(self.robot).joint]))

    def joint_positions(self) -> np.ndarray:
        """The arm's latest joint positions (rad)."""
        return self.node._latest(self.robot.joint_names)[0]

    def joint_efforts(self) -> np.ndarray:
        """The arm's latest joint efforts (N m)."""
        return self.node._latest(self.robot.joint_names)[2]

    @property
    def time(self) -> float:
        """The cell's clock (s, the ``joint_states`` stamps): the probe times its steps on it."""
        return self.node._cell_time()


@dataclass
class CellProbe:
    """The slip probe as run on the cell: the task it was planned with, the run, the world
    (its grip goals and bags) and the probe's config."""

    task_name: str
    object_id: str
    run: slip.SlipRun
    world: ExecutorGripWorld
    cfg: slip.SlipConfig


class GripProbe:
    """SystemIdentificationNode's slip probe (a mixin: ``self`` is the node): on the cell
    (:meth:`_grip_on_cell`, right after the arm probes, while the object is where the scene
    has it: the strikes push it, once out of the arm's reach), then its fit
    (:meth:`_grip_fit`, once the goal's other estimates exist)."""

    def _grip_task(self, robot, config, scene_path: str, values: dict):
        from ...core.grasping.jaw import gripper_joints
        from ...core.training_setup import build_task_and_twin, scene_info_from_mjcf
        if gripper_joints(robot) is None:
            raise GoalFailed(R.UNKNOWN_PARAMETER, f'{PARAMETER}: the robot ({robot.name}) has '
                             'no parallel-jaw gripper')
        if not scene_path:
            raise GoalFailed(R.MISSING_TOPICS, 'the slip probe needs the scene (the object\'s '
                             'size): no scene_file and nothing on the scene topic')
        task_name = self.p.grip_task or 'pick_and_place'
        task, twin, _ = build_task_and_twin(
            robot, task_name, scene=scene_info_from_mjcf(scene_path, 'identify'),
            start_values=config.start_values(), timestep=self.p.timestep, parameters=values)
        return task_name, task, twin

    def _grip_on_cell(self, goal_handle, robot, config, scene_path: str) -> CellProbe:
        """The probe on the cell (its grasp planned from the tracked pose)."""
        with self._lock:
            last = dict(self._arm_values)
        task_name, task, twin = self._grip_task(robot, config, scene_path, last)
        twin.close()
        self._feedback(goal_handle, 'slip probe', 0.3)
        start = self._current(robot)
        world = ExecutorGripWorld(self, goal_handle, robot, task.object_id, home=start)
        cfg = slip.SlipConfig()
        try:
            with subscribed(self, TrackedObjects, self.p.tracked_objects_topic,
                            self._on_tracked, qos.STATE, self._cb):
                run = slip.run_slip_probe(task, world, task.sample_reset(
                    np.random.default_rng(0)), cfg)
        except slip.SlipProbeError as exc:
            raise GoalFailed(R.EXECUTION_FAILED, str(exc)) from None
        # Back where the arm was (the strikes start from above the objects; the jaw, open,
        # is 2 cm above the fallen box and the start pose higher).
        world.reset(start)
        return CellProbe(task_name, task.object_id, run, world, cfg)

    def _grip_fit(self, goal_handle, robot, config, scene_path: str, probe: CellProbe,
                  estimates, run_dir: str):
        """(estimates [finger friction, held mass or none], the identify_grip folder, the
        record): the held mass into the twin, the friction fit (module docstring).
        ``estimates``: this goal's (a ParameterSet) or None (the last arm values then)."""
        from ...core.artifacts import RunDirectory, atomic_write_json
        from ...core.parameters import ParameterEstimate, ParameterSet
        from ...core.sysid.object_fit import object_parameter_names
        from ...core.tasks.worlds import TwinWorld
        with self._lock:
            values = estimates.values() if estimates else dict(self._arm_values)
        _, task, twin = self._grip_task(robot, config, scene_path, values)
        run, oid = probe.run, probe.object_id
        try:
            mass_name = object_parameter_names(oid)[1]
            mass = slip.held_mass(robot, run)
            prior = (estimates[mass_name].prior if estimates and mass_name in estimates
                     else twin.get_parameter(mass_name))
            mass_est = slip.held_mass_estimate(mass_name, mass, prior)
            out = [] if mass_est is None else [mass_est]
            if mass_est is not None:
                twin.set_parameter(mass_name, mass_est.value)
            prior = twin.get_parameter(PARAMETER)
            dwells = tuple(run.step_durations)
            self._feedback(goal_handle, 'fit finger friction', 0.97)
            fit = slip.fit_finger_friction(task, TwinWorld(twin, oid), run,
                                           replace(probe.cfg, step_dwells=dwells))
        finally:
            twin.close()
        out.insert(0, ParameterEstimate(PARAMETER, fit.value, fit.lower_95, fit.upper_95,
                                        prior, '1', fit.identified))
        record = {'task': probe.task_name, 'object_id': oid, 'cell': run.to_dict(),
                  'fit': fit.to_dict(), 'step_dwells_s': list(dwells),
                  'held_mass': None if mass is None else list(mass),
                  'grips': [list(g) for g in probe.world.grips],
                  'estimates': [vars(e) for e in out]}
        stage = RunDirectory(run_dir).new_stage(STAGE, inputs={
            'scene': scene_path, 'bags': probe.world.bags}, parameters={
            'slip': vars(probe.cfg), 'grip_task': probe.task_name,
            'grip_action': self.p.grip_action})
        stage.add_output('grip_probe', atomic_write_json(stage.folder / 'grip_probe.json',
                                                         record))
        stage.add_output('parameters', ParameterSet(
            {e.name: e for e in out}).save(stage.folder / 'parameters.yaml'))
        stage.results = {'estimates': record['estimates']}
        stage.finish()
        return out, stage.folder, record


def amend_identify(out, grip) -> None:
    """The identify_<n> folder of ``out`` (a StageOutput) with the slip probe's estimates
    (``grip`` = (estimates, folder, record)) in its parameters.yaml, in place of any of the
    same name, and its manifest saying so: what the next stages consume (the loop's train,
    a resumed loop) is the goal's whole result."""
    import json

    from ...core.artifacts import atomic_write_json, sha256_file
    for e in grip[0]:
        out.estimates.add(e)
    path = out.estimates.save(out.folder / 'parameters.yaml')
    manifest = json.loads(out.manifest_path.read_text())
    manifest['outputs']['parameters'] = {'path': str(path.resolve()),
                                         'sha256': sha256_file(path)}
    manifest['results']['estimates'] = out.estimates.to_dict()['parameters']
    manifest['results']['grip'] = {'folder': str(grip[1]),
                                   'replaced_or_added': [e.name for e in grip[0]]}
    atomic_write_json(out.manifest_path, manifest)
