"""loop_coordinator: the whole real-to-sim-to-real loop as one action, resumable from artifacts.

Action ``~/run_loop`` (real2sim2real_msgs/action/RunLoop) runs capture -> reconstruct ->
identify -> train -> execute -> evaluate by sending goals to the other nodes' actions (it is
their client; the clients live in a callback group of their own and the goal waits on
futures, so it never blocks the executor threads their answers need):

* **capture**: ``camera_capture/capture`` (``capture_views`` views, 0 = its default);
* **reconstruct**: ``scene_reconstruction/reconstruct`` of that capture set. The chosen scene
  (new or a skipped stage's) is then published on the latched ``scene`` topic from its
  manifest, so the trainer and the object tracker hold the scene the loop uses even when
  reconstruction was skipped in this bringup;
* **identify**: arms the executor, ``system_identification/identify`` with live probes
  (``identify_probes``, 0 = its default), disarms;
* **train**: ``policy_trainer/train`` of the task with the identified ``parameters.yaml``
  (``train_total_steps``, 0 = the trainer's budget; ``train_randomize``: domain randomisation
  over the 95% intervals) and the goal's ``demo_bags`` (demonstrations recorded on the cell
  with ``r2s2r record-demos``; none: the task's scripted demonstrator in the twin);
* **execute**: arms the executor and runs the checkpoint ``execute_trials`` times through
  ``robot_executor/execute_policy``. Between trials, where the emulated cell's
  ``emulated_cell/reset_objects`` service exists, the objects are put back (and
  ``object_tracker/reset`` forgets the track); a trial's goal is ``execute_goals`` (x y yaw
  triples, cycled) or is drawn like the task's reset distribution for the object where the
  tracker sees it (core/loop_plan.sample_goal). The executor is disarmed at the end, also on
  failure and cancel. A trial the executor ends with a safety or timeout error counts as a
  failed trial. When the executor's observation window after a motion saw no object pose
  (OBSERVATION_UNAVAILABLE after the episode ran: a tracker stall), the loop judges the
  outcome with the task's own success rule on the next tracked pose measured after the
  executor's answer (the object is at rest by then; ``outcome_from`` in the trial record);
  with none within ``observation_wait`` the trial is ``unobserved`` and left out of the
  success rate. A trial refused for want of an object pose before anything moved is sent
  again (``observation_retries``). Errors that say the stage cannot work (NOT_ARMED, BUSY,
  INVALID_CHECKPOINT, STOPPED, still no object pose after the retries) end the stage with
  STAGE_FAILED. Writes ``<run_dir>/execute_trials_NNN/manifest.json``;
* **evaluate**: ``policy_trainer/evaluate`` of the checkpoint in its twin (``twin_eval_trials``,
  0 = the trainer's eval_trials). Writes ``<run_dir>/evaluate_NNN/manifest.json``.

Goal: ``task`` ('' = parameter ``task``), ``run_dir`` ('' = parameter ``run_dir``),
``skip_stages`` and ``resume`` (core/loop_plan.py: an unknown stage name or a skipped stage
without an artifact -> INVALID_GOAL naming it; resume skips the leading stages whose
artifacts exist). Feedback: ``stage`` ("<stage>" or "<stage>: <detail>"; the stage name is
the text before the first colon) and overall ``progress`` 0..1. Cancel cancels the running
child goal, waits for it and ends CANCELED. A child that fails -> STAGE_FAILED with
``failed_stage`` and the child's error code name and text; a child whose action server
goes away mid-goal (its node killed; with the launch files' ``respawn:=true`` it is started
again) -> STAGE_FAILED naming the gone server within SERVER_CHECK_PERIOD plus DDS's notice of
the dead process, and ``resume`` then redoes that stage only. Every planned goal writes
``<run_dir>/loop_NNN/`` (summary.json, stage_times.png, parameters.png, success.png,
manifest.json; core/loop_report.py), also when it fails or is canceled; ``summary_path``
names it. One goal at a time (another is rejected while one runs).
"""
from __future__ import annotations

import json
import math
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from geometry_msgs.msg import Point, Pose, Quaternion, Vector3
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.parameter import Parameter
from std_msgs.msg import String
from std_srvs.srv import Trigger

from real2sim2real_msgs.action import (
    Capture,
    Evaluate,
    ExecutePolicy,
    Identify,
    Reconstruct,
    RunLoop,
    Train,
)
from real2sim2real_msgs.msg import ObjectEstimate, Scene, TrackedObjects
from real2sim2real_msgs.srv import ResetObjects

from ..core import loop_plan as lp
from ..core.geometry import quat_msg_yaw
from ..ros import qos
from ..ros.goal_client import GoalClient, code_name
from ..ros.params import declare
from ..ros.ros_main import ConfigurationError, run_node
from ..ros.ros_time import NodeDeadline
from ..ros.subscriptions import subscribed

NODE_NAME = 'loop_coordinator'
RR = RunLoop.Result
CANCEL_GRACE = 15.0     # s a canceled child goal gets to end
# s between checks that a child goal's action server still runs (a killed node's endpoints
# vanish when DDS notices, a respawned one has new endpoints): else STAGE_FAILED, not a wait
# of stage_timeout for a result that cannot come.
SERVER_CHECK_PERIOD = 0.5
P = ExecutePolicy.Result
# Executor answers that mean the execute stage cannot work at all (not a failed trial).
FATAL_POLICY_CODES = (P.NOT_ARMED, P.INVALID_CHECKPOINT, P.BUSY, P.STOPPED)


class _StageFailed(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class _Canceled(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def _child_error(what: str, result) -> str:
    return (f'{what}: {code_name(type(result), result.error_code)} ({result.error_code}): '
            f'{result.error_msg}')


def scene_from_manifest(artifact: lp.Artifact, frame: str) -> Scene:
    """The Scene message scene_reconstruction published for a reconstruct_NNN folder."""
    res = artifact.manifest.get('results', {})
    scene = Scene(table_plane=[float(v) for v in res.get('table_plane', [0, 0, 1, 0])],
                  table_height=float(res.get('table_height', 0.0)),
                  mjcf_path=str(artifact.path), artifact_dir=str(artifact.folder))
    scene.header.frame_id = frame
    for o in res.get('objects', []):
        w, x, y, z = (float(v) for v in o.get('quat_wxyz', (1, 0, 0, 0)))
        px, py, pz = (float(v) for v in o.get('position', (0, 0, 0)))
        ex, ey, ez = (float(v) for v in o.get('extents', (0, 0, 0)))
        scene.objects.append(ObjectEstimate(
            id=str(o['id']), shape=str(o.get('shape', 'mesh')),
            pose=Pose(position=Point(x=px, y=py, z=pz),
                      orientation=Quaternion(x=x, y=y, z=z, w=w)),
            extents=Vector3(x=ex, y=ey, z=ez), mass=float(o.get('mass', 0.0)),
            mass_is_prior=bool(o.get('mass_is_prior', True)),
            mesh_path=str(o.get('mesh_path', '')),
            collision_paths=[str(p) for p in o.get('collision_paths', [])],
            fit_residual=float(o.get('fit_residual', 0.0))))
    return scene


class _Run:
    """One goal's book-keeping."""

    def __init__(self, goal_handle, task: str, run_dir: Path, plan):
        self.goal_handle = goal_handle
        self.task = task
        self.run_dir = run_dir
        self.plan = plan
        self.t0 = time.monotonic()
        self.started = time.time()
        self.done: list[str] = []
        self.stage = ''
        self.artifacts: dict[str, lp.Artifact] = {}
        self.records = {s.stage: {'stage': s.stage, 'status': 'not_run', 'seconds': 0.0,
                                  'artifact': '', 'reason': s.reason, 'detail': {}}
                        for s in plan}
        self.child = None                 # the running child goal's handle
        # Held while the stage changes and while a child's feedback is relayed: a late
        # feedback of a finished child is never published under the next stage's name.
        self.feedback_lock = threading.Lock()
        self.last_feedback = ('', 0.0)
        self.twin = None                  # SuccessCount dicts
        self.train_twin = None
        self.cell = None


class LoopCoordinatorNode(Node):
    def __init__(self):
        super().__init__(NODE_NAME)
        self._lock = threading.Lock()
        self._busy = threading.Lock()
        self._read_parameters()
        self._urdf = ''
        self._robot = None
        self._poses: dict[str, tuple] = {}     # object id -> (x, y, yaw, received monotonic)
        self._clients_cb = ReentrantCallbackGroup()
        cb = self._clients_cb
        p = self._p
        self._capture = GoalClient(self, Capture, p('capture_action'), callback_group=cb)
        self._reconstruct = GoalClient(self, Reconstruct, p('reconstruct_action'),
                                       callback_group=cb)
        self._identify = GoalClient(self, Identify, p('identify_action'), callback_group=cb)
        self._train = GoalClient(self, Train, p('train_action'), callback_group=cb)
        self._evaluate = GoalClient(self, Evaluate, p('evaluate_action'), callback_group=cb)
        self._execute_policy = GoalClient(self, ExecutePolicy, p('execute_policy_action'),
                                          callback_group=cb)
        self._names = {id(c): self.resolve_topic_name(p(n)) for c, n in (
            (self._capture, 'capture_action'), (self._reconstruct, 'reconstruct_action'),
            (self._identify, 'identify_action'), (self._train, 'train_action'),
            (self._evaluate, 'evaluate_action'),
            (self._execute_policy, 'execute_policy_action'))}
        ex = p('executor_node')
        self._arm = self.create_client(Trigger, f'{ex}/arm', callback_group=cb)
        self._disarm = self.create_client(Trigger, f'{ex}/disarm', callback_group=cb)
        self._reset_objects = self.create_client(ResetObjects, p('reset_objects_service'),
                                                 callback_group=cb)
        self._tracker_reset = self.create_client(Trigger, p('tracker_reset_service'),
                                                 callback_group=cb)
        self._tracked_cb = MutuallyExclusiveCallbackGroup()
        self.pub_scene = self.create_publisher(Scene, 'scene', qos.LATCHED)
        self.create_subscription(String, 'robot_description', self._on_description,
                                 qos.LATCHED, callback_group=MutuallyExclusiveCallbackGroup())
        self._action = ActionServer(
            self, RunLoop, '~/run_loop', self._on_run_loop, goal_callback=self._on_goal,
            cancel_callback=lambda _g: CancelResponse.ACCEPT,
            callback_group=ReentrantCallbackGroup())
        self.get_logger().info(
            f'loop_coordinator ready: task {p("task")}, run_dir '
            f'{p("run_dir") or "(temporary)"}, {p("execute_trials")} cell trials')

    # ------------------------------------------------------------------ parameters
    def _read_parameters(self):
        d = declare
        try:
            d(self, 'task', 'slide_to_target', "Task of goals that name none.")
            d(self, 'run_dir', '', "Run directory of goals that name none; '' = a temporary "
              "one.")
            d(self, 'capture_views', 0, 'Views per capture (0 = camera_capture\'s default).',
              lo=0, hi=1000)
            d(self, 'identify_probes', 0, 'Live identification probes (0 = '
              'system_identification\'s num_probes).', lo=0, hi=50)
            d(self, 'train_total_steps', 0, 'Training budget in environment steps (0 = '
              'policy_trainer\'s budget).', lo=0, hi=100000000)
            d(self, 'train_randomize', True, 'Domain randomisation over the identified 95% '
              'intervals while training.')
            d(self, 'execute_trials', 5, 'Policy executions on the cell.', lo=1, hi=10000)
            d(self, 'execute_goals', Parameter.Type.DOUBLE_ARRAY, 'Cell trial goals as x y yaw '
              'triples (world frame; cycled over the trials); unset = drawn like the task\'s '
              'reset distribution.', type_='double_array')
            d(self, 'execute_seed', 0, 'Seed of the goal draws.', lo=0, hi=2 ** 31 - 1)
            d(self, 'execute_max_duration', 0.0, 's per cell trial (0 = the executor\'s '
              'policy_max_duration).', lo=0.0, hi=3600.0)
            d(self, 'execute_record', True, 'Record each cell trial (MCAP bag).')
            d(self, 'reset_settle', 1.0, 's after an object reset before the pose is read.',
              lo=0.0, hi=30.0)
            d(self, 'observation_wait', 5.0, 's to wait for a tracked pose of the object '
              'before a trial\'s goal is drawn (then: the reconstructed pose).', lo=0.0,
              hi=120.0)
            d(self, 'observation_retries', 2, 'A trial the executor refuses for want of an '
              'object pose before anything moved is sent again this many times (then the '
              'stage fails).', lo=0, hi=100)
            d(self, 'twin_eval_trials', 0, 'Twin evaluation trials (0 = policy_trainer\'s '
              'eval_trials).', lo=0, hi=100000)
            d(self, 'stage_timeout', 3600.0, 's a child goal may take before it is canceled '
              'and the stage fails.', lo=1.0, hi=86400.0)
            d(self, 'server_wait', 10.0, 's to wait for a child action server.', lo=0.0,
              hi=600.0)
            d(self, 'plots', True, 'Write the summary\'s PNG plots.')
            d(self, 'world_frame', 'world', 'Frame of the republished scene.', read_only=True)
            for name, default, text in (
                    ('capture_action', 'camera_capture/capture', 'Capture action'),
                    ('reconstruct_action', 'scene_reconstruction/reconstruct',
                     'Reconstruct action'),
                    ('identify_action', 'system_identification/identify', 'Identify action'),
                    ('train_action', 'policy_trainer/train', 'Train action'),
                    ('evaluate_action', 'policy_trainer/evaluate', 'Evaluate action'),
                    ('execute_policy_action', 'robot_executor/execute_policy',
                     'ExecutePolicy action'),
                    ('executor_node', 'robot_executor', 'Node whose arm / disarm services '
                     'the loop calls'),
                    ('reset_objects_service', 'emulated_cell/reset_objects',
                     'Object reset between trials (the emulated cell only; skipped when '
                     'absent)'),
                    ('tracker_reset_service', 'object_tracker/reset',
                     'Tracker reset after an object reset (skipped when absent)'),
                    ('tracked_objects_topic', 'tracked_objects', 'Object poses (the '
                     'tracker), read only while the execute stage runs')):
                d(self, name, default, f'{text}.', read_only=True)
        except Exception as exc:  # noqa: BLE001 - rclpy range/type errors
            err = ConfigurationError(f'loop_coordinator parameters: {exc}')
            err.node_name = NODE_NAME
            raise err from None

    def _p(self, name):
        # Re-read per goal: `ros2 param set` between goals takes effect.
        if name == 'execute_goals':     # a typed, possibly unset array
            param = self.get_parameter_or(name, None)
            return list(param.value or []) if param is not None and \
                param.type_ != Parameter.Type.NOT_SET else []
        return self.get_parameter(name).value

    def _on_description(self, msg: String):
        with self._lock:
            self._urdf, self._robot = msg.data, None

    def _robot_model(self, wait: float = 10.0):
        deadline = time.monotonic() + wait
        while True:
            with self._lock:
                urdf, robot = self._urdf, self._robot
            if robot is not None:
                return robot
            if urdf:
                from ..core.robot_description import load_robot
                robot = load_robot(urdf)
                with self._lock:
                    self._robot = robot
                return robot
            if time.monotonic() > deadline:
                raise _StageFailed('no robot_description received (needed to draw the task '
                                   'goals)')
            time.sleep(0.1)

    # ------------------------------------------------------------------ goal plumbing
    def _on_goal(self, _goal):
        return GoalResponse.REJECT if self._busy.locked() else GoalResponse.ACCEPT

    def _stopping(self) -> bool:
        if not self.context.ok():
            return True
        executor = self.executor
        return executor is not None and self not in executor.get_nodes()

    def _check_cancel(self, run: _Run):
        if run.goal_handle.is_cancel_requested:
            raise _Canceled(f'canceled during {run.stage or "planning"}')
        if self._stopping():
            raise _Canceled('node shutting down')

    def _feedback(self, run: _Run, detail: str = '', fraction: float = 0.0,
                  force: bool = False):
        text = run.stage + (f': {detail}' if detail else '')
        now = time.monotonic()
        if not force and text == run.last_feedback[0] and now - run.last_feedback[1] < 0.25:
            return
        run.last_feedback = (text, now)
        run.goal_handle.publish_feedback(RunLoop.Feedback(
            stage=text, progress=lp.overall_progress(run.stage, fraction, run.done)))

    def _wait(self, run: _Run, future, timeout: float, what: str, cancelable: bool = True):
        done = threading.Event()
        future.add_done_callback(lambda _f: done.set())
        deadline = time.monotonic() + timeout
        while not done.wait(0.05):
            if cancelable:
                self._check_cancel(run)
            if time.monotonic() > deadline:
                raise _StageFailed(f'{what}: no answer within {timeout:.0f} s')
        return future.result()

    def _call(self, run: _Run, client, request, what: str, timeout: float = 10.0,
              cancelable: bool = True):
        if not client.wait_for_service(timeout_sec=min(timeout, 5.0)):
            raise _StageFailed(f'service {client.srv_name} is not available')
        return self._wait(run, client.call_async(request), timeout, what, cancelable)

    def _run_child(self, run: _Run, client, goal, what: str, on_feedback=None):
        """Send a child goal; relay cancel; return its result message."""
        deadline = time.monotonic() + float(self._p('server_wait'))
        while not client.server_is_ready():
            self._check_cancel(run)
            if time.monotonic() > deadline:
                raise _StageFailed(f'{what}: action {self._names[id(client)]} is not '
                                   'available')
            time.sleep(0.1)
        stage, finished = run.stage, [False]

        def relay(msg):     # only while this child is the running stage's (see _Run)
            with run.feedback_lock:
                if run.stage == stage and not finished[0]:
                    on_feedback(msg.feedback)
        send = client.send_goal_async(goal, feedback_callback=relay if on_feedback else None)
        handle = self._wait(run, send, 30.0, f'{what} goal', cancelable=False)
        if not handle.accepted:
            raise _StageFailed(f'{what}: {self._names[id(client)]} rejected the goal (busy '
                               f'with another goal?)')
        run.child = handle
        try:
            return self._await_child(run, handle, self._names[id(client)], what)
        finally:
            with run.feedback_lock:
                finished[0] = True
            run.child = None

    def _await_child(self, run: _Run, handle, name: str, what: str):
        """The accepted child goal's result; cancels it on cancel or stage_timeout; fails when
        the server process that accepted it is gone."""
        got = threading.Event()
        res_future = handle.get_result_async()
        res_future.add_done_callback(lambda _f: got.set())
        deadline = time.monotonic() + float(self._p('stage_timeout'))
        server = self._server_endpoints(name)     # the process that accepted the goal
        next_check = time.monotonic() + SERVER_CHECK_PERIOD
        while not got.wait(0.1):
            if server and time.monotonic() > next_check:
                next_check = time.monotonic() + SERVER_CHECK_PERIOD
                if not server & self._server_endpoints(name):
                    raise _StageFailed(
                        f'{what}: the action server {name} that accepted the goal is '
                        f'gone (its node died or was restarted); the goal is lost')
            try:
                self._check_cancel(run)
            except _Canceled:
                handle.cancel_goal_async()
                got.wait(CANCEL_GRACE)
                raise
            if time.monotonic() > deadline:
                handle.cancel_goal_async()
                got.wait(CANCEL_GRACE)
                raise _StageFailed(f'{what}: no result within stage_timeout '
                                   f'{self._p("stage_timeout"):.0f} s (canceled)')
        return res_future.result().result

    def _server_endpoints(self, action_name: str) -> set[bytes]:
        """The endpoint GIDs publishing ``action_name``'s goal status: one per server process.
        A node killed and respawned comes back with new GIDs and without the old goals."""
        return {bytes(i.endpoint_gid) for i in
                self.get_publishers_info_by_topic(f'{action_name}/_action/status')}

    # ------------------------------------------------------------------ the action
    def _on_run_loop(self, goal_handle):
        if not self._busy.acquire(blocking=False):
            goal_handle.abort()
            return RR(error_code=RR.INVALID_GOAL, error_msg='busy with another loop')
        try:
            return self._loop(goal_handle)
        finally:
            self._busy.release()

    def _loop(self, goal_handle):
        goal = goal_handle.request
        task = goal.task.strip() or self._p('task')
        run_dir = goal.run_dir.strip() or self._p('run_dir') or tempfile.mkdtemp(
            prefix='r2s2r_loop_')
        from ..core.tasks import task_names
        try:
            if task not in task_names():
                raise lp.PlanError(f'unknown task {task!r}; known tasks: {task_names()}')
            Path(run_dir).expanduser().mkdir(parents=True, exist_ok=True)
            plan = lp.plan_loop(run_dir, task, list(goal.skip_stages), bool(goal.resume))
        except (lp.PlanError, OSError) as exc:
            goal_handle.abort()
            self.get_logger().warning(f'run_loop: invalid goal: {exc}')
            return RR(error_code=RR.INVALID_GOAL, error_msg=str(exc))
        run = _Run(goal_handle, task, Path(run_dir).expanduser().resolve(), plan)
        self.get_logger().info(
            f'run_loop {task} in {run.run_dir}: ' + ', '.join(
                f'{s.stage}={"skip" if s.skip else "run"}' for s in plan))
        code, message, failed = RR.NONE, '', ''
        try:
            for step in plan:
                with run.feedback_lock:
                    run.stage = step.stage
                rec = run.records[step.stage]
                if step.skip:
                    run.artifacts[step.stage] = step.artifact
                    rec.update(status='skipped', artifact=str(step.artifact.path))
                    self._feedback(run, f'skipped ({step.artifact.folder.name})', 1.0,
                                   force=True)
                    self._after_skip(run, step.stage, step.artifact)
                else:
                    self._check_cancel(run)
                    self._feedback(run, '', 0.0, force=True)
                    t0 = time.monotonic()
                    rec['status'] = 'running'
                    try:
                        art = getattr(self, f'_stage_{step.stage}')(run)
                    finally:
                        rec['seconds'] = round(time.monotonic() - t0, 3)
                    run.artifacts[step.stage] = art
                    rec.update(status='ran', artifact=str(art.path))
                    self.get_logger().info(f'run_loop: {step.stage} done in '
                                           f'{rec["seconds"]:.1f} s: {art.path}')
                run.done.append(step.stage)
        except _StageFailed as exc:
            code, message, failed = RR.STAGE_FAILED, exc.message, run.stage
            run.records[run.stage]['status'] = 'failed'
        except _Canceled as exc:
            code, message = RR.CANCELED, exc.message
            run.records[run.stage]['status'] = 'canceled'
        except Exception as exc:  # noqa: BLE001 - never crash the node; report the stage
            self.get_logger().error(f'run_loop: {run.stage} failed unexpectedly: {exc!r}')
            code, message, failed = RR.STAGE_FAILED, f'{type(exc).__name__}: {exc}', run.stage
            run.records[run.stage]['status'] = 'failed'
        result = RR(error_code=code, error_msg=message, failed_stage=failed)
        try:
            result.summary_path = str(self._write_summary(run, code, message, failed))
        except Exception as exc:  # noqa: BLE001 - the loop's outcome stands without it
            self.get_logger().error(f'run_loop: cannot write the summary: {exc!r}')
        if code == RR.NONE:
            with run.feedback_lock:
                run.stage = 'done'
            run.goal_handle.publish_feedback(RunLoop.Feedback(stage='done', progress=1.0))
            goal_handle.succeed()
            self.get_logger().info(f'run_loop: done in {time.monotonic() - run.t0:.1f} s; '
                                   f'summary {result.summary_path}')
        elif code == RR.CANCELED and goal_handle.is_cancel_requested:
            goal_handle.canceled()
            self.get_logger().info(f'run_loop: canceled ({message})')
        else:
            goal_handle.abort()
            self.get_logger().warning(f'run_loop: {code_name(RR, code)} at {failed or "-"}: '
                                      f'{message}')
        return result

    def _after_skip(self, run: _Run, stage: str, artifact: lp.Artifact):
        if stage == 'reconstruct':
            self._publish_scene(run, artifact)
        elif stage == 'train':
            res = artifact.manifest.get('results', {}).get('twin_eval') or {}
            if res.get('n_trials'):
                run.train_twin = lp.SuccessCount(int(res['n_trials']),
                                                 int(res['successes'])).to_dict()
        elif stage == 'execute':
            cell = artifact.manifest.get('results', {}).get('cell')
            run.cell = cell or None
        elif stage == 'evaluate':
            run.twin = artifact.manifest.get('results', {}).get('twin') or None

    # ------------------------------------------------------------------ stages
    def _stage_capture(self, run: _Run) -> lp.Artifact:
        def fb(f):
            total = max(1, int(f.views_total))
            self._feedback(run, f'view {f.views_done}/{f.views_total}', f.views_done / total)
        res = self._run_child(run, self._capture, Capture.Goal(
            num_views=int(self._p('capture_views')), run_dir=str(run.run_dir)),
            'camera_capture', fb)
        if res.error_code:
            raise _StageFailed(_child_error('camera_capture', res))
        manifest = Path(res.capture_set.manifest_path)
        run.records['capture']['detail'] = {'views': int(res.capture_set.num_views),
                                            'bag': res.capture_set.bag_path}
        return lp.Artifact('capture', manifest.parent, manifest, _read_json(manifest))

    def _stage_reconstruct(self, run: _Run) -> lp.Artifact:
        capture = run.artifacts['capture']
        res = self._run_child(run, self._reconstruct, Reconstruct.Goal(
            capture_manifest=str(capture.path), run_dir=str(run.run_dir)),
            'scene_reconstruction', lambda f: self._feedback(run, f.stage, f.progress))
        if res.error_code:
            raise _StageFailed(_child_error('scene_reconstruction', res))
        folder = Path(res.scene.artifact_dir)
        art = lp.Artifact('reconstruct', folder, Path(res.scene.mjcf_path),
                          _read_json(folder / 'manifest.json'))
        run.records['reconstruct']['detail'] = {'objects': [
            {'id': o.id, 'shape': o.shape} for o in res.scene.objects]}
        self._publish_scene(run, art)
        return art

    def _publish_scene(self, run: _Run, artifact: lp.Artifact):
        """The loop's scene on the latched ``scene`` topic (what the trainer trains in and
        the tracker tracks), built from the reconstruct stage's manifest."""
        if not artifact.manifest.get('results', {}).get('objects'):
            return
        scene = scene_from_manifest(artifact, self._p('world_frame'))
        scene.header.stamp = self.get_clock().now().to_msg()
        self.pub_scene.publish(scene)
        time.sleep(0.5)   # latched delivery to the trainer / tracker before the next goal

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _sleep(self, run: _Run, seconds: float):
        """``seconds`` on the cell's clock (simulated under use_sim_time)."""
        deadline = NodeDeadline(self, seconds, stall_s=max(30.0, seconds))
        while not deadline.expired():
            self._check_cancel(run)
            time.sleep(0.05)

    def _arm_executor(self, run: _Run):
        deadline = time.monotonic() + 15.0
        while True:
            resp = self._call(run, self._arm, Trigger.Request(), 'arm')
            if resp.success:
                return
            if 'waiting' not in resp.message or time.monotonic() > deadline:
                raise _StageFailed(f'robot_executor/arm refused: {resp.message}')
            time.sleep(0.3)

    def _disarm_executor(self, run: _Run):
        """Always after the stages that arm; never raises (the loop's outcome is reported)."""
        try:
            resp = self._call(run, self._disarm, Trigger.Request(), 'disarm', timeout=10.0,
                              cancelable=False)
            ok, text = resp.success, resp.message
        except _StageFailed as exc:
            ok, text = False, exc.message
        run.records[run.stage]['detail']['disarmed'] = bool(ok)
        if not ok:
            self.get_logger().error(f'run_loop: disarming the executor failed: {text}')
            run.records[run.stage]['detail']['disarm_error'] = text

    def _stage_identify(self, run: _Run) -> lp.Artifact:
        try:
            self._arm_executor(run)
            res = self._run_child(run, self._identify, Identify.Goal(
                num_probes=int(self._p('identify_probes')), run_dir=str(run.run_dir)),
                'system_identification', lambda f: self._feedback(run, f.stage, f.progress))
        finally:
            self._disarm_executor(run)
        if res.error_code:
            raise _StageFailed(_child_error('system_identification', res))
        folder = Path(res.parameters.artifact_dir)
        run.records['identify']['detail'].update({
            'residual_before': res.residual_before, 'residual_after': res.residual_after,
            'heldout_error_before': res.heldout_error_before,
            'heldout_error_after': res.heldout_error_after, 'report': res.report_path})
        return lp.Artifact('identify', folder, folder / 'parameters.yaml',
                           _read_json(folder / 'manifest.json'))

    def _stage_train(self, run: _Run) -> lp.Artifact:
        params = run.artifacts['identify'].path

        def fb(f):
            extra = (f', twin success {f.twin_success_rate:.0%}'
                     if math.isfinite(f.twin_success_rate) else '')
            self._feedback(run, f'{f.stage}{extra}', f.progress)
        res = self._run_child(run, self._train, Train.Goal(
            task=run.task, parameters_path=str(params),
            randomize=bool(self._p('train_randomize')),
            total_steps=int(self._p('train_total_steps')), run_dir=str(run.run_dir),
            demo_bags=list(run.goal_handle.request.demo_bags)),
            'policy_trainer', fb)
        if res.error_code:
            raise _StageFailed(_child_error('policy_trainer', res))
        ckpt = Path(res.checkpoint_path)
        tw = res.twin_result
        run.train_twin = lp.SuccessCount(int(tw.trials), int(tw.successes)).to_dict()
        manifest = _read_json(ckpt.parent / 'manifest.json')
        detail = {'twin_success': run.train_twin,
                  'total_steps': manifest.get('parameters', {}).get('training_steps')}
        scene_used = manifest.get('inputs', {}).get('scene', {}).get('mjcf_path', '')
        scene = run.artifacts.get('reconstruct')
        if scene is not None and str(Path(scene_used or '.').resolve()) != str(
                scene.path.resolve()):
            detail['warning'] = (f'the trainer used scene {scene_used or "(its task default)"}'
                                 f', not the loop\'s {scene.path}')
            self.get_logger().warning(f'run_loop: {detail["warning"]}')
        run.records['train']['detail'] = detail
        return lp.Artifact('train', ckpt.parent, ckpt, manifest)

    # -- execute
    def _on_tracked(self, msg: TrackedObjects):
        now = time.monotonic()
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        with self._lock:
            for oid, pose in zip(msg.ids, msg.poses):
                o = pose.orientation
                self._poses[oid] = (pose.position.x, pose.position.y, quat_msg_yaw(o), now,
                                    (pose.position.x, pose.position.y, pose.position.z),
                                    (o.w, o.x, o.y, o.z), stamp)

    def _late_outcome(self, run: _Run, task, goal, after_stamp: float):
        """(success, pose stamp) from a tracked pose measured after ``after_stamp`` (s, the
        cell's clock), judged by the task's own success rule as the executor judges it; None
        when no such pose comes within ``observation_wait``."""
        from ..core.policy_execution import ObjectPose
        deadline = time.monotonic() + float(self._p('observation_wait'))
        while True:
            with self._lock:
                entry = self._poses.get(task.object_id)
            if entry is not None and entry[6] >= after_stamp:
                break
            if time.monotonic() > deadline:
                return None
            self._check_cancel(run)
            time.sleep(0.05)
        pose = ObjectPose.from_xyz_quat(entry[4], entry[5], entry[6])
        state = {'object_xy': pose.xy, 'object_z': pose.z, 'object_yaw': pose.yaw,
                 'object_up_z': pose.up_z, 'goal_xy': np.asarray(goal[:2], float),
                 'goal_yaw': float(goal[2]) if len(goal) > 2 else pose.yaw, 'tip_xy': None}
        return bool(task.success(state)), entry[6]

    def _object_pose(self, run: _Run, object_id: str, since: float):
        """(x, y, yaw, source) of the object: tracked after ``since``, else reconstructed."""
        deadline = time.monotonic() + float(self._p('observation_wait'))
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
        for o in (scene.manifest.get('results', {}).get('objects', []) if scene else []):
            if o.get('id') == object_id:
                return float(o['position'][0]), float(o['position'][1]), float(
                    o.get('yaw', 0.0)), 'reconstructed'
        return None

    def _goal_task(self, ckpt: Path):
        """The checkpoint's task (for its reset distribution) or None when the checkpoint's
        config cannot be read (the executor then reports why)."""
        from ..core.tasks import TaskError, get_task
        try:
            cfg = dict(json.loads((ckpt / 'policy.json').read_text()).get('task') or {})
            name = cfg.pop('task')
            return get_task(name, self._robot_model(), cfg)
        except (OSError, ValueError, KeyError, TypeError, TaskError):
            return None

    def _stage_execute(self, run: _Run) -> lp.Artifact:
        from ..core.artifacts import RunDirectory
        ckpt = run.artifacts['train'].path
        n = int(self._p('execute_trials'))
        try:
            given = lp.given_goals(self._p('execute_goals') or [])
        except lp.PlanError as exc:
            raise _StageFailed(str(exc)) from None
        task = self._goal_task(ckpt)        # goal draws and late outcomes
        rng = np.random.default_rng(int(self._p('execute_seed')))
        max_duration = float(self._p('execute_max_duration'))
        stage = RunDirectory(run.run_dir).new_stage('execute_trials', inputs={
            'task': run.task, 'checkpoint': str(ckpt), 'trials': n,
            'goals': 'execute_goals parameter' if given else 'task reset distribution',
        }, parameters={'execute_seed': int(self._p('execute_seed')),
                       'max_duration': max_duration, 'record': bool(self._p('execute_record'))})
        trials: list[dict] = []
        ok = False
        try:
            self._arm_executor(run)
            with subscribed(self, TrackedObjects, self._p('tracked_objects_topic'),
                            self._on_tracked, qos.SENSOR_DATA, self._tracked_cb):
                for i in range(n):
                    trials.append(self._trial(run, i, n, ckpt, task, given, rng,
                                              max_duration))
            ok = True
        finally:
            self._disarm_executor(run)
            if not ok:      # no artifact; the summary keeps the trials that ran
                import shutil
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
                           _read_json(stage.folder / 'manifest.json'))

    def _trial(self, run: _Run, i: int, n: int, ckpt: Path, task, given, rng,
               max_duration: float) -> dict:
        self._check_cancel(run)
        self._feedback(run, f'trial {i + 1}/{n}: reset', i / n, force=True)
        reset_note = 'no reset service (not the emulated cell)'
        t_reset = time.monotonic()
        if self._reset_objects.service_is_ready():
            resp = self._call(run, self._reset_objects, ResetObjects.Request(), 'reset_objects')
            if not resp.success:
                raise _StageFailed(f'emulated_cell/reset_objects: {resp.message}')
            if self._tracker_reset.service_is_ready():
                self._call(run, self._tracker_reset, Trigger.Request(), 'object_tracker/reset')
            self._sleep(run, float(self._p('reset_settle')))
            t_reset = time.monotonic()
            reset_note = 'objects reset'
        source = 'given'
        if given:
            goal = given[i % len(given)]
        elif task is not None:
            pose = self._object_pose(run, task.object_id, t_reset)
            if pose is None:
                raise _StageFailed(f'no pose of {task.object_id} (not tracked on '
                                   f'{self._p("tracked_objects_topic")} within '
                                   f'{self._p("observation_wait")} s and not in the scene)')
            x, y, yaw, source = pose
            goal = lp.sample_goal(task, rng, (x, y), yaw)
        else:
            goal, source = (), 'task default (checkpoint config unreadable here)'
        self._feedback(run, f'trial {i + 1}/{n}', i / n, force=True)
        span = max_duration or 60.0

        def fb(f):
            self._feedback(run, f'trial {i + 1}/{n}, step {f.step}, {f.elapsed:.1f} s',
                           (i + min(f.elapsed / span, 0.95)) / n)
        t0 = time.monotonic()
        retries = int(self._p('observation_retries'))
        for attempt in range(retries + 1):
            res = self._run_child(run, self._execute_policy, ExecutePolicy.Goal(
                checkpoint_path=str(ckpt), task=run.task, task_goal=[float(v) for v in goal],
                max_duration=max_duration, record=bool(self._p('execute_record'))),
                'robot_executor', fb)
            no_start = res.error_code == P.OBSERVATION_UNAVAILABLE and res.steps == 0
            if not no_start or attempt == retries:
                break
            # Nothing moved: the tracker missed the executor's observation window (a
            # loaded machine); the same goal again.
            self._feedback(run, f'trial {i + 1}/{n}: no object pose yet, retry '
                           f'{attempt + 1}/{retries}', i / n, force=True)
            self._sleep(run, 1.0)
        success, outcome = bool(res.task_success), 'executor'
        observed = res.error_code != P.OBSERVATION_UNAVAILABLE
        if not observed and not no_start and task is not None and len(goal):
            # The episode ran but the executor's observation window (its observation_timeout
            # after the motion) saw no pose: judge the outcome on a later pose of the object
            # at rest, with the task's own rule.
            late = self._late_outcome(run, task, goal, self._now())
            if late is not None:
                success, observed = late[0], True
                outcome = f'loop_coordinator: tracked pose at {late[1]:.3f} (cell clock)'
        trial = {'trial': i, 'goal': [float(v) for v in goal], 'goal_from': source,
                 'reset': reset_note, 'task_success': success, 'outcome_from': outcome,
                 'observed': observed, 'attempts': attempt + 1,
                 'error_code': int(res.error_code),
                 'error': _child_error('robot_executor', res) if res.error_code else '',
                 'steps': int(res.steps), 'duration': float(res.duration),
                 'wall_s': round(time.monotonic() - t0, 3), 'bag': res.bag_path}
        if res.error_code in FATAL_POLICY_CODES or no_start:
            raise _StageFailed(f'trial {i + 1}/{n}: ' + _child_error('robot_executor', res)
                               + (f' ({attempt + 1} attempts; is the object tracker '
                                  f'publishing {self._p("tracked_objects_topic")}?)'
                                  if no_start else ''))
        self.get_logger().info(
            f'run_loop: trial {i + 1}/{n} goal {np.round(goal, 3).tolist() if goal else "-"}'
            f' -> success {success}' + (f' ({trial["error"]}; outcome from {outcome})'
                                        if res.error_code else ''))
        return trial

    def _stage_evaluate(self, run: _Run) -> lp.Artifact:
        from ..core.artifacts import RunDirectory
        ckpt = run.artifacts['train'].path
        trials = int(self._p('twin_eval_trials'))

        def fb(f):
            total = trials or max(int(f.trials_done), 1)
            self._feedback(run, f'{f.trials_done} trials, success {f.success_rate:.0%}',
                           f.trials_done / max(total, 1))
        res = self._run_child(run, self._evaluate, Evaluate.Goal(
            checkpoint_path=str(ckpt), task=run.task, trials=trials), 'policy_trainer', fb)
        if res.error_code:
            raise _StageFailed(_child_error('policy_trainer', res))
        r = res.result
        run.twin = lp.SuccessCount(int(r.trials), int(r.successes)).to_dict()
        stage = RunDirectory(run.run_dir).new_stage('evaluate', inputs={
            'task': run.task, 'checkpoint': str(ckpt)}, parameters={'trials': trials})
        stage.results = {'twin': run.twin}
        stage.finish()
        run.records['evaluate']['detail'] = dict(run.twin)
        return lp.Artifact('evaluate', stage.folder, stage.folder / 'manifest.json',
                           _read_json(stage.folder / 'manifest.json'))

    # ------------------------------------------------------------------ summary
    def _write_summary(self, run: _Run, code: int, message: str, failed: str) -> Path:
        from ..core.artifacts import RunDirectory
        from ..core.loop_report import write_summary
        params = []
        ident = run.artifacts.get('identify')
        if ident is not None:
            try:
                params = lp.load_parameters(ident.path)
            except Exception as exc:  # noqa: BLE001 - an unreadable set: the summary says so
                params = []
                run.records['identify']['detail']['parameters_error'] = str(exc)
        status = {RR.NONE: 'succeeded', RR.CANCELED: 'canceled'}.get(code, 'failed')
        record = RunDirectory(run.run_dir).new_stage('loop', inputs={
            'task': run.task, 'skip_stages': list(run.goal_handle.request.skip_stages),
            'resume': bool(run.goal_handle.request.resume),
            'demo_bags': list(run.goal_handle.request.demo_bags),
            'artifacts': {s: a.to_dict() for s, a in run.artifacts.items()}},
            parameters={n: self._p(n) for n in (
                'capture_views', 'identify_probes', 'train_total_steps', 'train_randomize',
                'execute_trials', 'execute_seed', 'execute_max_duration', 'twin_eval_trials')})
        record.parameters['execute_goals'] = list(self._p('execute_goals') or [])
        summary = {
            'task': run.task, 'run_dir': str(run.run_dir), 'status': status,
            'error': message, 'failed_stage': failed,
            'demo_bags': list(run.goal_handle.request.demo_bags),
            'started': run.started, 'wall_s': round(time.monotonic() - run.t0, 3),
            'stages': [run.records[s.stage] for s in run.plan],
            'identified_parameters': params, 'identify_artifact': str(ident.path) if ident
            else '', 'checkpoint': str(run.artifacts['train'].path)
            if 'train' in run.artifacts else '',
            'twin': run.twin, 'train_twin': run.train_twin, 'cell': run.cell}
        path = write_summary(record.folder, summary, plots=bool(self._p('plots')))
        written = _read_json(path)
        record.add_output('summary', path)
        for name, png in written.get('plots', {}).items():
            record.add_output(f'plot/{name}', png)
        record.results = {'status': status, 'failed_stage': failed, 'error': message}
        record.finish()
        return path

    def close(self):
        self._action.destroy()


def _read_json(path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def main(args=None):
    return run_node(LoopCoordinatorNode, args=args)


if __name__ == '__main__':
    raise SystemExit(main())
