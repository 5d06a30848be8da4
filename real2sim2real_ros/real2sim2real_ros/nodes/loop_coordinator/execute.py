"""The run_loop execute stage: the checkpoint on the cell, ``execute_trials`` times.

Per trial: reset the objects where the emulated cell offers it (and the tracker's track), a
goal (``execute_goals`` cycled, else drawn from the task's reset distribution about the
tracked or reconstructed object pose: core/loop_plan.sample_goal), the executor's
``execute_policy`` goal (sent again while it is refused for want of an object pose before
anything moved), and the outcome (the executor's, or the task's rule on a later tracked pose
when the executor's observation window saw none). Writes
``<run_dir>/execute_trials_NNN/manifest.json``.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
from std_srvs.srv import Trigger

from real2sim2real_msgs.action import ExecutePolicy
from real2sim2real_msgs.msg import TrackedObjects
from real2sim2real_msgs.srv import ResetObjects

from ...core import loop_plan as lp
from ...core.geometry import quat_msg_yaw
from ...ros import qos
from ...ros.ros_time import NodeDeadline
from ...ros.subscriptions import subscribed
from .run import LoopRun, StageFailed, child_error, read_json

PolicyResult = ExecutePolicy.Result
# Executor answers that mean the execute stage cannot work at all (not a failed trial).
FATAL_POLICY_CODES = (PolicyResult.NOT_ARMED, PolicyResult.INVALID_CHECKPOINT,
                      PolicyResult.BUSY, PolicyResult.STOPPED)


class ExecuteStage:
    """LoopCoordinatorNode's execute stage (a mixin: ``self`` is the node)."""

    def _stage_execute(self, run: LoopRun) -> lp.Artifact:
        from ...core.artifacts import RunDirectory
        ckpt = run.artifacts['train'].path
        n = int(self.p.execute_trials)
        try:
            given = lp.given_goals(list(self.p.execute_goals or []))
        except lp.PlanError as exc:
            raise StageFailed(str(exc)) from None
        task = self._goal_task(ckpt)        # goal draws and late outcomes
        rng = np.random.default_rng(int(self.p.execute_seed))
        max_duration = float(self.p.execute_max_duration)
        stage = RunDirectory(run.run_dir).new_stage('execute_trials', inputs={
            'task': run.task, 'checkpoint': str(ckpt), 'trials': n,
            'goals': 'execute_goals parameter' if given else 'task reset distribution',
        }, parameters={'execute_seed': int(self.p.execute_seed),
                       'max_duration': max_duration, 'record': bool(self.p.execute_record)})
        trials: list[dict] = []
        ok = False
        try:
            self._arm_executor(run)
            with subscribed(self, TrackedObjects, self.p.tracked_objects_topic,
                            self._on_tracked, qos.SENSOR_DATA, self._tracked_cb):
                for i in range(n):
                    trials.append(self._trial(run, i, n, ckpt, task, given, rng,
                                              max_duration))
            ok = True
        finally:
            self._disarm_executor(run)
            if not ok:      # no artifact; the summary keeps the trials that ran
                shutil.rmtree(stage.folder, ignore_errors=True)
                run.cell = {**lp.cell_result(trials), 'incomplete': True}
        run.cell = lp.cell_result(trials)
        stage.results = {'cell': run.cell}
        stage.finish()
        run.records['execute']['detail'].update(
            {'trials': run.cell['trials'], 'successes': run.cell['successes'],
             'unobserved': run.cell['unobserved'],
             'errors': sum(1 for t in trials if t['error'])})
        return lp.Artifact('execute', stage.folder, stage.folder / 'manifest.json',
                           read_json(stage.folder / 'manifest.json'))

    def _trial(self, run: LoopRun, i: int, n: int, ckpt: Path, task, given, rng,
               max_duration: float) -> dict:
        self._check_cancel(run)
        self._feedback(run, f'trial {i + 1}/{n}: reset', i / n, force=True)
        reset_note, t_reset = self._reset_objects_for_trial(run)
        goal, source = self._trial_goal(run, i, task, given, rng, t_reset)
        self._feedback(run, f'trial {i + 1}/{n}', i / n, force=True)
        t0 = time.monotonic()
        res, attempts, no_start = self._send_trial(run, i, n, ckpt, goal, max_duration)
        success, observed, outcome = self._trial_outcome(run, task, goal, res, no_start)
        trial = {'trial': i, 'goal': [float(v) for v in goal], 'goal_from': source,
                 'reset': reset_note, 'task_success': success, 'outcome_from': outcome,
                 'observed': observed, 'attempts': attempts,
                 'error_code': int(res.error_code),
                 'error': child_error('robot_executor', res) if res.error_code else '',
                 'steps': int(res.steps), 'duration': float(res.duration),
                 'wall_s': round(time.monotonic() - t0, 3), 'bag': res.bag_path}
        if res.error_code in FATAL_POLICY_CODES or no_start:
            raise StageFailed(f'trial {i + 1}/{n}: ' + child_error('robot_executor', res)
                              + (f' ({attempts} attempts; is the object tracker '
                                 f'publishing {self.p.tracked_objects_topic}?)'
                                 if no_start else ''))
        self.get_logger().info(
            f'run_loop: trial {i + 1}/{n} goal {np.round(goal, 3).tolist() if goal else "-"}'
            f' -> success {success}' + (f' ({trial["error"]}; outcome from {outcome})'
                                        if res.error_code else ''))
        return trial

    def _reset_objects_for_trial(self, run: LoopRun) -> tuple[str, float]:
        """(what was done, monotonic time after it): the emulated cell's object reset and the
        tracker's, where those services exist."""
        if not self._reset_objects.service_is_ready():
            return 'no reset service (not the emulated cell)', time.monotonic()
        resp = self._call(run, self._reset_objects, ResetObjects.Request(), 'reset_objects')
        if not resp.success:
            raise StageFailed(f'emulated_cell/reset_objects: {resp.message}')
        if self._tracker_reset.service_is_ready():
            self._call(run, self._tracker_reset, Trigger.Request(), 'object_tracker/reset')
        self._sleep(run, float(self.p.reset_settle))
        return 'objects reset', time.monotonic()

    def _trial_goal(self, run: LoopRun, i: int, task, given, rng, t_reset: float):
        """(goal, where it came from): given, drawn about the object's pose, or the task's
        default (an empty goal) when the checkpoint's task cannot be read here."""
        if given:
            return given[i % len(given)], 'given'
        if task is None:
            return (), 'task default (checkpoint config unreadable here)'
        base = lp.tracked_goal(task)
        if base:     # stack: where its base stands, as the executor tracks it
            return (), f'the base {base!r} as tracked (the executor\'s)'
        pose = self._object_pose(run, task.object_id, t_reset)
        if pose is None:
            raise StageFailed(f'no pose of {task.object_id} (not tracked on '
                              f'{self.p.tracked_objects_topic} within '
                              f'{self.p.observation_wait} s and not in the scene)')
        x, y, yaw, source = pose
        return lp.sample_goal(task, rng, (x, y), yaw), source

    def _send_trial(self, run: LoopRun, i: int, n: int, ckpt: Path, goal,
                    max_duration: float):
        """(result, attempts, no_start): the executor's answer; a goal refused for want of an
        object pose before anything moved is sent again ``observation_retries`` times."""
        span = max_duration or 60.0

        def fb(f):
            self._feedback(run, f'trial {i + 1}/{n}, step {f.step}, {f.elapsed:.1f} s',
                           (i + min(f.elapsed / span, 0.95)) / n)
        retries = int(self.p.observation_retries)
        for attempt in range(retries + 1):
            res = self._run_child(run, self._execute_policy, ExecutePolicy.Goal(
                checkpoint_path=str(ckpt), task=run.task, task_goal=[float(v) for v in goal],
                max_duration=max_duration, record=bool(self.p.execute_record)),
                'robot_executor', fb)
            no_start = res.error_code == PolicyResult.OBSERVATION_UNAVAILABLE and res.steps == 0
            if not no_start or attempt == retries:
                break
            # Nothing moved: the tracker missed the executor's observation window (a
            # loaded machine); the same goal again.
            self._feedback(run, f'trial {i + 1}/{n}: no object pose yet, retry '
                           f'{attempt + 1}/{retries}', i / n, force=True)
            self._sleep(run, 1.0)
        return res, attempt + 1, no_start

    def _trial_outcome(self, run: LoopRun, task, goal, res, no_start: bool):
        """(success, observed, outcome_from) of an executed trial."""
        success, outcome = bool(res.task_success), 'executor'
        observed = res.error_code != PolicyResult.OBSERVATION_UNAVAILABLE
        if not observed and not no_start and task is not None and len(goal):
            # The episode ran but the executor's observation window (its observation_timeout
            # after the motion) saw no pose: judge the outcome on a later pose of the object
            # at rest, with the task's own rule.
            late = self._late_outcome(run, task, goal, self._now())
            if late is not None:
                success, observed = late[0], True
                outcome = f'loop_coordinator: tracked pose at {late[1]:.3f} (cell clock)'
        return success, observed, outcome

    # ------------------------------------------------------------------ observations
    def _on_tracked(self, msg: TrackedObjects):
        now = time.monotonic()
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        with self._lock:
            for oid, pose in zip(msg.ids, msg.poses):
                o = pose.orientation
                self._poses[oid] = (pose.position.x, pose.position.y, quat_msg_yaw(o), now,
                                    (pose.position.x, pose.position.y, pose.position.z),
                                    (o.w, o.x, o.y, o.z), stamp)

    def _late_outcome(self, run: LoopRun, task, goal, after_stamp: float):
        """(success, pose stamp) from a tracked pose measured after ``after_stamp`` (s, the
        cell's clock), judged by the task's own success rule as the executor judges it; None
        when no such pose comes within ``observation_wait``."""
        deadline = time.monotonic() + float(self.p.observation_wait)
        while True:
            with self._lock:
                entry = self._poses.get(task.object_id)
            if entry is not None and entry[6] >= after_stamp:
                break
            if time.monotonic() > deadline:
                return None
            self._check_cancel(run)
            time.sleep(0.05)
        return lp.task_success_at(task, entry[4], entry[5], goal), entry[6]

    def _object_pose(self, run: LoopRun, object_id: str, since: float):
        """(x, y, yaw, source) of the object: tracked after ``since``, else reconstructed."""
        deadline = time.monotonic() + float(self.p.observation_wait)
        while True:
            with self._lock:
                pose = self._poses.get(object_id)
            if pose is not None and pose[3] >= since:
                return pose[0], pose[1], pose[2], 'tracked'
            if time.monotonic() > deadline:
                break
            self._check_cancel(run)
            time.sleep(0.05)
        scene = run.artifacts.get('reconstruct')
        found = lp.reconstructed_pose(scene.manifest, object_id) if scene else None
        return None if found is None else (*found, 'reconstructed')

    def _goal_task(self, ckpt: Path):
        """The checkpoint's task (for its reset distribution) or None when the checkpoint's
        config cannot be read (the executor then reports why)."""
        from ...core.tasks import TaskError, get_task
        try:
            cfg = dict(json.loads((ckpt / 'policy.json').read_text()).get('task') or {})
            name = cfg.pop('task')
            return get_task(name, self._robot_model(), cfg)
        except (OSError, ValueError, KeyError, TypeError, TaskError):
            return None

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _sleep(self, run: LoopRun, seconds: float):
        """``seconds`` on the cell's clock (simulated under use_sim_time)."""
        deadline = NodeDeadline(self, seconds, stall_s=max(30.0, seconds))
        while not deadline.expired():
            self._check_cancel(run)
            time.sleep(0.05)
