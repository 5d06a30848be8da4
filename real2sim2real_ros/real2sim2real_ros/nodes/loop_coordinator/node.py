"""The loop_coordinator node: parameters, child-goal plumbing and the run_loop action.

The stages live in stages.py (one child goal each) and execute.py (the cell trials); the
package docstring has the whole contract.
"""
from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

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
from real2sim2real_msgs.msg import Scene
from real2sim2real_msgs.srv import ResetObjects

from ...core import loop_plan as lp
from ...ros import qos
from ...ros.goal_client import GoalClient, code_name
from ...ros.params import Param, bind_checked
from ...ros.ros_main import run_node
from .execute import ExecuteStage
from .run import Canceled, LoopRun, StageFailed, read_json
from .stages import ChildStages

NODE_NAME = 'loop_coordinator'
LoopResult = RunLoop.Result
CANCEL_GRACE = 15.0     # s a canceled child goal gets to end
# s between checks that a child goal's action server still runs (a killed node's endpoints
# vanish when DDS notices, a respawned one has new endpoints): else STAGE_FAILED, not a wait
# of stage_timeout for a result that cannot come.
SERVER_CHECK_PERIOD = 0.5
# The child interfaces: (parameter, default, what it names), all read-only.
_INTERFACES = (
    ('capture_action', 'camera_capture/capture', 'Capture action'),
    ('reconstruct_action', 'scene_reconstruction/reconstruct', 'Reconstruct action'),
    ('identify_action', 'system_identification/identify', 'Identify action'),
    ('train_action', 'policy_trainer/train', 'Train action'),
    ('evaluate_action', 'policy_trainer/evaluate', 'Evaluate action'),
    ('execute_policy_action', 'robot_executor/execute_policy', 'ExecutePolicy action'),
    ('executor_node', 'robot_executor', 'Node whose arm / disarm services the loop calls'),
    ('reset_objects_service', 'emulated_cell/reset_objects',
     'Object reset between trials (the emulated cell only; skipped when absent)'),
    ('tracker_reset_service', 'object_tracker/reset',
     'Tracker reset after an object reset (skipped when absent)'),
    ('tracked_objects_topic', 'tracked_objects',
     'Object poses (the tracker), read only while the execute stage runs'),
)
PARAMETERS = (
    Param('task', 'slide_to_target', 'Task of goals that name none.'),
    Param('run_dir', '', "Run directory of goals that name none; '' = a temporary one."),
    Param('capture_views', 0, "Views per capture (0 = camera_capture's default).",
          lo=0, hi=1000),
    Param('identify_probes', 0,
          "Live identification probes (0 = system_identification's num_probes).",
          lo=0, hi=50),
    Param('train_total_steps', 0,
          "Training budget in environment steps (0 = policy_trainer's budget).",
          lo=0, hi=100000000),
    Param('train_randomize', True,
          'Domain randomisation over the identified 95% intervals while training.'),
    Param('execute_trials', 5, 'Policy executions on the cell.', lo=1, hi=10000),
    Param('execute_goals', Parameter.Type.DOUBLE_ARRAY,
          'Cell trial goals as x y yaw triples (world frame; cycled over the trials); unset '
          "= drawn like the task's reset distribution.", type_='double_array'),
    Param('execute_seed', 0, 'Seed of the goal draws.', lo=0, hi=2 ** 31 - 1),
    Param('execute_max_duration', 0.0,
          "s per cell trial (0 = the executor's policy_max_duration).", lo=0.0, hi=3600.0),
    Param('execute_record', True, 'Record each cell trial (MCAP bag).'),
    Param('reset_settle', 1.0, 's after an object reset before the pose is read.',
          lo=0.0, hi=30.0),
    Param('observation_wait', 5.0,
          "s to wait for a tracked pose of the object before a trial's goal is drawn (then: "
          'the reconstructed pose).', lo=0.0, hi=120.0),
    Param('observation_retries', 2,
          'A trial the executor refuses for want of an object pose before anything moved is '
          'sent again this many times (then the stage fails).', lo=0, hi=100),
    Param('twin_eval_trials', 0, "Twin evaluation trials (0 = policy_trainer's eval_trials).",
          lo=0, hi=100000),
    Param('stage_timeout', 3600.0,
          's a child goal may take before it is canceled and the stage fails.',
          lo=1.0, hi=86400.0),
    Param('server_wait', 10.0, 's to wait for a child action server.', lo=0.0, hi=600.0),
    Param('plots', True, "Write the summary's PNG plots."),
    Param('world_frame', 'world', 'Frame of the republished scene.', read_only=True),
    *(Param(name, default, f'{text}.', read_only=True) for name, default, text in _INTERFACES),
)


class LoopCoordinatorNode(ChildStages, ExecuteStage, Node):
    def __init__(self):
        super().__init__(NODE_NAME)
        self._lock = threading.Lock()
        self._busy = threading.Lock()
        # Tunables follow `ros2 param set` between goals; a running goal reads them live.
        self.p = bind_checked(self, PARAMETERS, NODE_NAME)
        self._urdf = ''
        self._robot = None
        self._poses: dict[str, tuple] = {}     # object id -> (x, y, yaw, received monotonic)
        self._make_clients(ReentrantCallbackGroup())
        self._tracked_cb = MutuallyExclusiveCallbackGroup()
        self.pub_scene = self.create_publisher(Scene, 'scene', qos.LATCHED)
        self.create_subscription(String, 'robot_description', self._on_description,
                                 qos.LATCHED, callback_group=MutuallyExclusiveCallbackGroup())
        self._action = ActionServer(
            self, RunLoop, '~/run_loop', self._on_run_loop, goal_callback=self._on_goal,
            cancel_callback=lambda _g: CancelResponse.ACCEPT,
            callback_group=ReentrantCallbackGroup())
        self.get_logger().info(
            f'loop_coordinator ready: task {self.p.task}, run_dir '
            f'{self.p.run_dir or "(temporary)"}, {self.p.execute_trials} cell trials')

    def _make_clients(self, cb):
        """The child actions' goal clients and the executor's / cell's service clients, all
        in ``cb``: the goal waits on their futures, so their answers need threads of their
        own."""
        p = self.p
        self._clients_cb = cb
        self._capture = GoalClient(self, Capture, p.capture_action, callback_group=cb)
        self._reconstruct = GoalClient(self, Reconstruct, p.reconstruct_action,
                                       callback_group=cb)
        self._identify = GoalClient(self, Identify, p.identify_action, callback_group=cb)
        self._train = GoalClient(self, Train, p.train_action, callback_group=cb)
        self._evaluate = GoalClient(self, Evaluate, p.evaluate_action, callback_group=cb)
        self._execute_policy = GoalClient(self, ExecutePolicy, p.execute_policy_action,
                                          callback_group=cb)
        self._names = {id(c): self.resolve_topic_name(getattr(p, n)) for c, n in (
            (self._capture, 'capture_action'), (self._reconstruct, 'reconstruct_action'),
            (self._identify, 'identify_action'), (self._train, 'train_action'),
            (self._evaluate, 'evaluate_action'),
            (self._execute_policy, 'execute_policy_action'))}
        self._arm = self.create_client(Trigger, f'{p.executor_node}/arm', callback_group=cb)
        self._disarm = self.create_client(Trigger, f'{p.executor_node}/disarm',
                                          callback_group=cb)
        self._reset_objects = self.create_client(ResetObjects, p.reset_objects_service,
                                                 callback_group=cb)
        self._tracker_reset = self.create_client(Trigger, p.tracker_reset_service,
                                                 callback_group=cb)

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
                from ...core.robot_description import load_robot
                robot = load_robot(urdf)
                with self._lock:
                    self._robot = robot
                return robot
            if time.monotonic() > deadline:
                raise StageFailed('no robot_description received (needed to draw the task '
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

    def _check_cancel(self, run: LoopRun):
        if run.goal_handle.is_cancel_requested:
            raise Canceled(f'canceled during {run.stage or "planning"}')
        if self._stopping():
            raise Canceled('node shutting down')

    def _feedback(self, run: LoopRun, detail: str = '', fraction: float = 0.0,
                  force: bool = False):
        text = run.stage + (f': {detail}' if detail else '')
        now = time.monotonic()
        if not force and text == run.last_feedback[0] and now - run.last_feedback[1] < 0.25:
            return
        run.last_feedback = (text, now)
        run.goal_handle.publish_feedback(RunLoop.Feedback(
            stage=text, progress=lp.overall_progress(run.stage, fraction, run.done)))

    def _wait(self, run: LoopRun, future, timeout: float, what: str, cancelable: bool = True):
        done = threading.Event()
        future.add_done_callback(lambda _f: done.set())
        deadline = time.monotonic() + timeout
        while not done.wait(0.05):
            if cancelable:
                self._check_cancel(run)
            if time.monotonic() > deadline:
                raise StageFailed(f'{what}: no answer within {timeout:.0f} s')
        return future.result()

    def _call(self, run: LoopRun, client, request, what: str, timeout: float = 10.0,
              cancelable: bool = True):
        if not client.wait_for_service(timeout_sec=min(timeout, 5.0)):
            raise StageFailed(f'service {client.srv_name} is not available')
        return self._wait(run, client.call_async(request), timeout, what, cancelable)

    def _run_child(self, run: LoopRun, client, goal, what: str, on_feedback=None):
        """Send a child goal; relay cancel; return its result message."""
        deadline = time.monotonic() + float(self.p.server_wait)
        while not client.server_is_ready():
            self._check_cancel(run)
            if time.monotonic() > deadline:
                raise StageFailed(f'{what}: action {self._names[id(client)]} is not '
                                  'available')
            time.sleep(0.1)
        stage, finished = run.stage, [False]

        def relay(msg):     # only while this child is the running stage's (see LoopRun)
            with run.feedback_lock:
                if run.stage == stage and not finished[0]:
                    on_feedback(msg.feedback)
        send = client.send_goal_async(goal, feedback_callback=relay if on_feedback else None)
        handle = self._wait(run, send, 30.0, f'{what} goal', cancelable=False)
        if not handle.accepted:
            raise StageFailed(f'{what}: {self._names[id(client)]} rejected the goal (busy '
                              f'with another goal?)')
        run.child = handle
        try:
            return self._await_child(run, handle, self._names[id(client)], what)
        finally:
            with run.feedback_lock:
                finished[0] = True
            run.child = None

    def _await_child(self, run: LoopRun, handle, name: str, what: str):
        """The accepted child goal's result; cancels it on cancel or stage_timeout; fails when
        the server process that accepted it is gone."""
        got = threading.Event()
        res_future = handle.get_result_async()
        res_future.add_done_callback(lambda _f: got.set())
        deadline = time.monotonic() + float(self.p.stage_timeout)
        server = self._server_endpoints(name)     # the process that accepted the goal
        next_check = time.monotonic() + SERVER_CHECK_PERIOD
        while not got.wait(0.1):
            if server and time.monotonic() > next_check:
                next_check = time.monotonic() + SERVER_CHECK_PERIOD
                if not server & self._server_endpoints(name):
                    raise StageFailed(
                        f'{what}: the action server {name} that accepted the goal is '
                        f'gone (its node died or was restarted); the goal is lost')
            try:
                self._check_cancel(run)
            except Canceled:
                handle.cancel_goal_async()
                got.wait(CANCEL_GRACE)
                raise
            if time.monotonic() > deadline:
                handle.cancel_goal_async()
                got.wait(CANCEL_GRACE)
                raise StageFailed(f'{what}: no result within stage_timeout '
                                  f'{self.p.stage_timeout:.0f} s (canceled)')
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
            return LoopResult(error_code=LoopResult.INVALID_GOAL,
                              error_msg='busy with another loop')
        try:
            return self._loop(goal_handle)
        finally:
            self._busy.release()

    def _loop(self, goal_handle):
        run = self._plan(goal_handle)
        if isinstance(run, LoopResult):      # an invalid goal
            return run
        self.get_logger().info(
            f'run_loop {run.task} in {run.run_dir}: ' + ', '.join(
                f'{s.stage}={"skip" if s.skip else "run"}' for s in run.plan))
        code, message, failed = self._run_stages(run)
        result = LoopResult(error_code=code, error_msg=message, failed_stage=failed)
        try:
            result.summary_path = str(self._write_summary(run, code, message, failed))
        except Exception as exc:  # noqa: BLE001 - the loop's outcome stands without it
            self.get_logger().error(f'run_loop: cannot write the summary: {exc!r}')
        self._end_goal(run, result)
        return result

    def _plan(self, goal_handle) -> LoopRun | LoopResult:
        """The goal's run (its task, run directory and stage plan), or the INVALID_GOAL
        result (the goal aborted) naming what is wrong."""
        from ...core.tasks import task_names
        goal = goal_handle.request
        task = goal.task.strip() or self.p.task
        run_dir = goal.run_dir.strip() or self.p.run_dir or tempfile.mkdtemp(
            prefix='r2s2r_loop_')
        try:
            if task not in task_names():
                raise lp.PlanError(f'unknown task {task!r}; known tasks: {task_names()}')
            Path(run_dir).expanduser().mkdir(parents=True, exist_ok=True)
            plan = lp.plan_loop(run_dir, task, list(goal.skip_stages), bool(goal.resume))
        except (lp.PlanError, OSError) as exc:
            goal_handle.abort()
            self.get_logger().warning(f'run_loop: invalid goal: {exc}')
            return LoopResult(error_code=LoopResult.INVALID_GOAL, error_msg=str(exc))
        return LoopRun(goal_handle, task, Path(run_dir).expanduser().resolve(), plan)

    def _run_stages(self, run: LoopRun) -> tuple[int, str, str]:
        """(error code, message, failed stage) after running or skipping each planned stage."""
        try:
            for step in run.plan:
                with run.feedback_lock:
                    run.stage = step.stage
                if step.skip:
                    self._skip_stage(run, step)
                else:
                    self._run_stage(run, step.stage)
                run.done.append(step.stage)
        except StageFailed as exc:
            run.records[run.stage]['status'] = 'failed'
            return LoopResult.STAGE_FAILED, exc.message, run.stage
        except Canceled as exc:
            run.records[run.stage]['status'] = 'canceled'
            return LoopResult.CANCELED, exc.message, ''
        except Exception as exc:  # noqa: BLE001 - never crash the node; report the stage
            self.get_logger().error(f'run_loop: {run.stage} failed unexpectedly: {exc!r}')
            run.records[run.stage]['status'] = 'failed'
            return LoopResult.STAGE_FAILED, f'{type(exc).__name__}: {exc}', run.stage
        return LoopResult.NONE, '', ''

    def _skip_stage(self, run: LoopRun, step):
        run.artifacts[step.stage] = step.artifact
        run.records[step.stage].update(status='skipped', artifact=str(step.artifact.path))
        self._feedback(run, f'skipped ({step.artifact.folder.name})', 1.0, force=True)
        if step.stage == 'reconstruct':
            self._publish_scene(run, step.artifact)
        for name, value in lp.skipped_stage_results(step.stage, step.artifact.manifest).items():
            setattr(run, name, value)

    def _run_stage(self, run: LoopRun, stage: str):
        rec = run.records[stage]
        self._check_cancel(run)
        self._feedback(run, '', 0.0, force=True)
        t0 = time.monotonic()
        rec['status'] = 'running'
        try:
            art = getattr(self, f'_stage_{stage}')(run)
        finally:
            rec['seconds'] = round(time.monotonic() - t0, 3)
        run.artifacts[stage] = art
        rec.update(status='ran', artifact=str(art.path))
        self.get_logger().info(f'run_loop: {stage} done in {rec["seconds"]:.1f} s: {art.path}')

    def _end_goal(self, run: LoopRun, result):
        goal_handle, code = run.goal_handle, result.error_code
        if code == LoopResult.NONE:
            with run.feedback_lock:
                run.stage = 'done'
            goal_handle.publish_feedback(RunLoop.Feedback(stage='done', progress=1.0))
            goal_handle.succeed()
            self.get_logger().info(f'run_loop: done in {time.monotonic() - run.t0:.1f} s; '
                                   f'summary {result.summary_path}')
        elif code == LoopResult.CANCELED and goal_handle.is_cancel_requested:
            goal_handle.canceled()
            self.get_logger().info(f'run_loop: canceled ({result.error_msg})')
        else:
            goal_handle.abort()
            self.get_logger().warning(
                f'run_loop: {code_name(LoopResult, code)} at {result.failed_stage or "-"}: '
                f'{result.error_msg}')

    # ------------------------------------------------------------------ summary
    def _write_summary(self, run: LoopRun, code: int, message: str, failed: str) -> Path:
        from ...core.artifacts import RunDirectory
        from ...core.loop_report import write_summary
        params = []
        ident = run.artifacts.get('identify')
        if ident is not None:
            try:
                params = lp.load_parameters(ident.path)
            except Exception as exc:  # noqa: BLE001 - an unreadable set: the summary says so
                params = []
                run.records['identify']['detail']['parameters_error'] = str(exc)
        status = {LoopResult.NONE: 'succeeded', LoopResult.CANCELED: 'canceled'}.get(code, 'failed')
        record = RunDirectory(run.run_dir).new_stage('loop', inputs={
            'task': run.task, 'skip_stages': list(run.goal_handle.request.skip_stages),
            'resume': bool(run.goal_handle.request.resume),
            'demo_bags': list(run.goal_handle.request.demo_bags),
            'artifacts': {s: a.to_dict() for s, a in run.artifacts.items()}},
            parameters={n: getattr(self.p, n) for n in (
                'capture_views', 'identify_probes', 'train_total_steps', 'train_randomize',
                'execute_trials', 'execute_seed', 'execute_max_duration', 'twin_eval_trials')})
        record.parameters['execute_goals'] = list(self.p.execute_goals or [])
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
        path = write_summary(record.folder, summary, plots=bool(self.p.plots))
        written = read_json(path)
        record.add_output('summary', path)
        for name, png in written.get('plots', {}).items():
            record.add_output(f'plot/{name}', png)
        record.results = {'status': status, 'failed_stage': failed, 'error': message}
        record.finish()
        return path

    def close(self):
        self._action.destroy()


def main(args=None):
    return run_node(LoopCoordinatorNode, args=args)


if __name__ == '__main__':
    raise SystemExit(main())
