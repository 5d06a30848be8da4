"""policy_trainer: train a task policy in the twin, and evaluate checkpoints in the twin.

Action ``~/train`` (real2sim2real_msgs/action/Train):

* ``task``: a name of the core/tasks registry (UNKNOWN_TASK lists the known ones);
* ``parameters_path``: an identified ParameterSet (system_identification's
  ``identify_NNN/parameters.yaml``, or that folder); empty = the nominal twin. Unreadable, or
  naming elements the twin lacks, or invalid values: INVALID_PARAMETERS with the reason;
  values that make the twin diverge (core.twin.Twin.check_stable: a small move of the arm),
  or a twin that diverges during training: UNSTABLE_TWIN naming the set or the stage;
* ``randomize``: domain randomisation from the parameters' 95% intervals during
  self-imitation and PPO (core/policies/randomization.py; nothing to randomise without
  identified parameters);
* ``total_steps``: environment steps of training in the twin; 0 = the node's parameters
  (demos + self_imitation_rounds x self_imitation_episodes + ppo_iterations x ppo_batch_size
  episodes = 584 by default). One step is one episode of a one-shot task (slide_to_target)
  and one control tick of a closed-loop task (push_to_pose, up to max_steps per episode).
  Demos, self-imitation episodes and PPO iterations are scaled together
  (core/training_setup.budget_config); BC epochs and evaluation trials are not steps;
* ``demo_bags``: demonstrations recorded on the cell instead of the task's scripted
  demonstrator: the robot_executor's ``~/execute_policy`` bags (a bag folder, or its
  ``execute_policy_<n>/`` folder) with real2sim2real_msgs/PolicyStep on ``policy_steps``,
  e.g. from ``r2s2r record-demos`` (the scripted demonstrator on the cell) or an operator's
  actions (core/policies/demo_bags.py). Each demo is replayed in the twin from its recorded
  start (object pose, goal, tool start; slide_to_target: its one action, push_to_pose: its
  action sequence, open loop), only those that succeed there are kept (RialTo's inverse
  distillation) and the twin replay's (observation, action) pairs are the imitation data;
  self-imitation / DAgger / PPO / evaluation follow as without bags (push_to_pose's DAgger
  still labels the learner's states with the task's scripted expert). The ``demos``
  parameter and the demo share of ``total_steps`` do not apply. A bag that does not exist,
  cannot be read, has no policy_steps or records another task -> INVALID_DEMOS naming it;
  none of the demos succeeding in the twin -> NO_DEMOS with each demo's twin outcome. The
  manifest's results carry ``demos`` (source, tried, kept, per demo). Without bags, NO_DEMOS
  when no scripted demonstration succeeds;
* ``run_dir``: empty = parameter ``run_dir``.

The twin: the robot from ``robot_urdf`` or the latched ``robot_description``; the scene from
``scene_path``, else the latched ``scene`` topic (scene_reconstruction: its mjcf_path, the
object's id and size and the table height go into the task config), else the task's own scene
(core/tasks/worlds.task_scene_xml); starting values from ``twin_parameters_file`` (the
controller gains the lab knows + priors: what sim_server starts from), then the identified
values. Training (core/policies/pipeline.train_policy) runs on a worker thread with
``torch_threads`` threads (the core's rollouts are one parameter sample at a time, so there
is no mujoco.rollout nthread to set). Feedback: stage (setup, demos, imitation,
self_imitation, evaluate, ppo, done), progress 0..1 (monotonic), the latest twin success rate
(NaN before the first evaluation; during ppo the latest batch's, with exploration and
randomisation; during an evaluation the running rate), at most every ``feedback_period`` s
plus at each stage change. Cancel -> CANCELED within about a second (checked per episode and
BC epoch; CANCEL_GRACE s at most). Result: ``checkpoint_path``
(``<run_dir>/train_NNN/checkpoint/``, loads with core/policies/policy.py alone; the stage's
manifest.json records inputs, parameters, timings and sha256 of the files) and
``twin_result`` (TaskResult, system 'twin', ``eval_trials`` trials).

Action ``~/evaluate`` (Evaluate.action): loads ``checkpoint_path`` (INVALID_CHECKPOINT naming
the file), rebuilds the twin it was trained in (the train stage's manifest: scene, starting
and identified values; without one, the current scene and the nominal twin), runs ``trials``
episodes (0 = ``eval_trials``; more than MAX_EVAL_TRIALS = 100000 is INVALID_GOAL) with the
training's evaluation seed, feedback per trial.

One goal at a time (a second one is rejected while one runs). Exit code 2 with one line on
stderr for unusable parameters.
"""
from __future__ import annotations

import json
import math
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from std_msgs.msg import String

from real2sim2real_msgs.action import Evaluate, Train
from real2sim2real_msgs.msg import Scene, TaskResult

from ..ros import qos
from ..ros.params import declare
from ..ros.ros_main import ConfigurationError, run_node

NODE_NAME = 'policy_trainer'
TR = Train.Result
ER = Evaluate.Result
MAX_EVAL_TRIALS = 100_000   # trials per evaluate goal (and the eval_trials parameter)
MAX_TRAIN_STEPS = 100_000_000   # total_steps per train goal
MAX_DEMO_BAGS = 1000        # demo_bags per train goal
CANCEL_GRACE = 5.0       # s the action waits for the worker after a cancel request
SCENE_GRACE = 3.0        # s after start-up during which a goal waits for a latched scene
STAGES = ('setup', 'demos', 'imitation', 'self_imitation', 'evaluate', 'ppo', 'done')


class _Fail(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message


class _Job:
    """One goal's worker: cancel flag in, outcome out."""

    def __init__(self, goal_handle):
        self.goal_handle = goal_handle
        self.cancel = threading.Event()
        self.done = threading.Event()
        self.code, self.message, self.result = 0, '', None


class PolicyTrainerNode(Node):
    def __init__(self):
        super().__init__(NODE_NAME)
        self._lock = threading.Lock()
        self._busy = threading.Lock()
        self._started = time.monotonic()
        self._job: _Job | None = None
        self._worker: threading.Thread | None = None
        self._read_parameters()
        self._robot = None
        self._robot_source = ''
        self._robot_error = 'waiting for robot_description'
        self._scene_msg: Scene | None = None
        if self.p_robot_urdf:
            self._load_robot(self.p_robot_urdf, fatal=True)
        else:
            self.create_subscription(String, 'robot_description', self._on_description,
                                     qos.LATCHED,
                                     callback_group=MutuallyExclusiveCallbackGroup())
        self.create_subscription(Scene, 'scene', self._on_scene, qos.LATCHED,
                                 callback_group=MutuallyExclusiveCallbackGroup())
        cb = ReentrantCallbackGroup()
        self._train_action = ActionServer(
            self, Train, '~/train', self._on_train, goal_callback=self._on_goal,
            cancel_callback=lambda _g: CancelResponse.ACCEPT, callback_group=cb)
        self._eval_action = ActionServer(
            self, Evaluate, '~/evaluate', self._on_evaluate, goal_callback=self._on_goal,
            cancel_callback=lambda _g: CancelResponse.ACCEPT, callback_group=cb)
        self.get_logger().info(
            f'policy_trainer ready: robot from {self.p_robot_urdf or "robot_description"}, '
            f'scene from {self._param("scene_path") or "the scene topic / the task default"}, '
            f'starting values {self.p_twin_parameters_file}')

    # ------------------------------------------------------------------ setup
    def _read_parameters(self):
        try:
            self.p_robot_urdf = declare(
                self, 'robot_urdf', '', "URDF (path or XML) of the robot; '' = the latched "
                "robot_description topic.", read_only=True)
            self.p_twin_parameters_file = declare(
                self, 'twin_parameters_file', '',
                "Starting values of the twin: an identification config (known controller "
                "gains + priors, what sim_server starts from) or a parameter set; '' = the "
                "package's config/identification.yaml.", read_only=True)
            if not self.p_twin_parameters_file:
                from ament_index_python.packages import get_package_share_directory
                self.p_twin_parameters_file = str(Path(get_package_share_directory(
                    'real2sim2real_ros')) / 'config' / 'identification.yaml')
            from ..core.sysid.config import load_parameter_values
            self._start_values = load_parameter_values(self.p_twin_parameters_file)
            declare(self, 'scene_path', '', "Scene MJCF (scene_reconstruction's scene.xml); "
                    "'' = the latched scene topic, else the task's own scene.")
            declare(self, 'object_id', '', "The scene object the task manipulates; '' = the "
                    "scene's first box.")
            declare(self, 'object_friction_prior', 0.5,
                    'Sliding friction of the object before identification (reconstruction '
                    'measures geometry only); identified values override it.', lo=0.01, hi=3.0)
            declare(self, 'object_mass_prior', 0.2, "kg, the object's mass in the task's "
                    'own scene (a reconstructed scene carries its mass prior).',
                    lo=0.001, hi=50.0)
            declare(self, 'timestep', 0.001, 'Twin physics step (s).', lo=0.0001, hi=0.01)
            declare(self, 'demos', 80, 'Scripted demonstrations replayed in the twin.',
                    lo=1, hi=100000)
            declare(self, 'bc_epochs', 1000, 'Behaviour-cloning epochs (self-imitation refits '
                    'use half).', lo=1, hi=100000)
            declare(self, 'self_imitation_rounds', 3, 'Hindsight self-imitation rounds '
                    '(one-shot tasks).', lo=0, hi=1000)
            declare(self, 'self_imitation_episodes', 40, 'Episodes per self-imitation round.',
                    lo=1, hi=100000)
            declare(self, 'ppo_iterations', 12, 'PPO iterations (one-shot tasks; 0 = '
                    'imitation only).', lo=0, hi=100000)
            declare(self, 'ppo_batch_size', 32, 'Episodes per PPO iteration.', lo=2, hi=100000)
            declare(self, 'ppo_lr', 1e-3, 'PPO policy learning rate.', lo=1e-6, hi=1.0)
            declare(self, 'randomization_widen', 1.0, 'Randomisation range: value +- this x '
                    'the 95% half-width.', lo=0.0, hi=100.0)
            declare(self, 'randomization_min_relative', 0.0, 'At least this fraction of the '
                    'value as randomisation half-width.', lo=0.0, hi=10.0)
            declare(self, 'eval_trials', 20, 'Twin evaluation trials (training result; '
                    'evaluate goals with trials=0).', lo=1, hi=MAX_EVAL_TRIALS)
            declare(self, 'seed', 0, 'Training seed (evaluation episodes use seed + 1000).',
                    lo=0, hi=2 ** 31 - 1)
            declare(self, 'torch_threads', 2, 'torch threads while training.', lo=1, hi=64)
            declare(self, 'feedback_period', 0.25, 'Minimum seconds between training '
                    'feedback messages (stage changes are always sent).', lo=0.0, hi=10.0)
            declare(self, 'run_dir', '', "Run directory for train_NNN; '' = a temporary one.")
        except Exception as exc:  # noqa: BLE001 - rclpy range/type errors, unreadable files
            err = ConfigurationError(f'policy_trainer parameters: {exc}')
            err.node_name = NODE_NAME
            raise err from None

    def _param(self, name):
        # Re-read per goal: `ros2 param set` between goals takes effect.
        return self.get_parameter(name).value

    def _train_config(self):
        from ..core.policies.pipeline import TrainConfig
        from ..core.policies.ppo import PPOConfig
        p = self._param
        base = TrainConfig()
        return TrainConfig(
            demos=p('demos'), bc_epochs=p('bc_epochs'),
            self_imitation_rounds=p('self_imitation_rounds'),
            self_imitation_episodes=p('self_imitation_episodes'),
            ppo=PPOConfig(**{**asdict(base.ppo), 'iterations': p('ppo_iterations'),
                             'batch_size': p('ppo_batch_size'), 'lr': p('ppo_lr')}),
            randomization_widen=p('randomization_widen'),
            randomization_min_relative=p('randomization_min_relative'),
            eval_trials=p('eval_trials'), seed=p('seed'))

    def _load_robot(self, source: str, fatal: bool):
        from ..core.robot_description import load_robot
        try:
            robot = load_robot(source)
        except Exception as exc:  # noqa: BLE001 - any unusable URDF
            text = f'robot description unusable: {str(exc).splitlines()[0]}'
            if fatal:
                err = ConfigurationError(text)
                err.node_name = NODE_NAME
                raise err from None
            self.get_logger().error(text)
            with self._lock:
                self._robot_error = text
            return
        with self._lock:
            self._robot, self._robot_error = robot, ''
            self._robot_source = source if fatal else 'robot_description topic'

    def _on_description(self, msg: String):
        self._load_robot(msg.data, fatal=False)

    def _on_scene(self, msg: Scene):
        with self._lock:
            self._scene_msg = msg
        self.get_logger().info(f'scene: {msg.mjcf_path} ({len(msg.objects)} objects)')

    def _wait_robot(self, code: int):
        deadline = time.monotonic() + 10.0   # a goal right after start-up: the latched topic
        while True:
            with self._lock:
                robot, why = self._robot, self._robot_error
            if robot is not None:
                return robot
            if time.monotonic() > deadline:
                raise _Fail(code, f'no robot model: {why}')
            time.sleep(0.1)

    def _current_scene(self):
        """SceneInfo of scene_path / the scene topic, or None (the task's own scene)."""
        from ..core.training_setup import SceneInfo, SceneObject, scene_info_from_mjcf
        path = self._param('scene_path')
        if path:
            return scene_info_from_mjcf(path, 'scene_path parameter')
        wait = self._started + SCENE_GRACE - time.monotonic()
        if wait > 0 and self._scene_msg is None:
            time.sleep(wait)
        with self._lock:
            msg = self._scene_msg
        if msg is None:
            return None
        objects = [SceneObject(o.id, o.shape, (o.extents.x, o.extents.y, o.extents.z), o.mass)
                   for o in msg.objects]
        return SceneInfo(msg.mjcf_path, float(msg.table_height), objects, 'scene topic')

    # ------------------------------------------------------------------ goal plumbing
    def _stopping(self) -> bool:
        """The node is shutting down: the executor's shutdown (run_node, on SIGTERM) waits for
        every running callback, so a goal's wait must end then. Its node list empties first."""
        if not self.context.ok():
            return True
        executor = self.executor
        return executor is not None and self not in executor.get_nodes()

    def _on_goal(self, _goal):
        return GoalResponse.REJECT if self._busy.locked() else GoalResponse.ACCEPT

    def _run(self, goal_handle, work, result, canceled_code: int, failed_code: int,
             what: str):
        """Run ``work(job)`` on a worker thread; relay cancel; fill result's error fields."""
        if not self._busy.acquire(blocking=False):
            result.error_code, result.error_msg = failed_code, 'busy with another goal'
            goal_handle.abort()
            return result
        job = _Job(goal_handle)

        def target():
            try:
                job.result = work(job)
            except _Fail as exc:
                job.code, job.message = exc.code, exc.message
            except Exception as exc:  # noqa: BLE001 - never crash the node; report it
                job.code, job.message = failed_code, f'{type(exc).__name__}: {exc}'
                self.get_logger().error(f'{what} failed: {job.message}')
            finally:
                self._busy.release()
                job.done.set()
        worker = threading.Thread(target=target, name=what, daemon=True)
        self._job, self._worker = job, worker
        worker.start()
        canceled_at = None
        while not job.done.wait(0.05):
            if self._stopping():               # shutting down: stop the worker and return
                job.cancel.set()
                result.error_code, result.error_msg = canceled_code, 'node shutting down'
                return result
            if goal_handle.is_cancel_requested and canceled_at is None:
                job.cancel.set()
                canceled_at = time.monotonic()
            if canceled_at is not None and time.monotonic() - canceled_at > CANCEL_GRACE:
                job.code, job.message = canceled_code, f'{what} canceled (still stopping)'
                break
        if job.code == 0 and job.result is not None:
            result = job.result
        result.error_code, result.error_msg = job.code, job.message
        if job.code == 0:
            goal_handle.succeed()
        elif job.code == canceled_code and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        else:
            goal_handle.abort()
            self.get_logger().warning(f'{what} failed ({job.code}): {job.message}')
        return result

    # ------------------------------------------------------------------ train
    def _on_train(self, goal_handle):
        return self._run(goal_handle, self._train, TR(), TR.CANCELED, TR.TRAINING_FAILED,
                         'train')

    def _train(self, job: _Job):
        import torch

        from ..core.parameters import ParameterError
        from ..core.policies.pipeline import NoDemonstrationsError, TrainingCanceled
        from ..core.policies.stage import train_stage
        from ..core.tasks import task_names
        from ..core.training_setup import budget_config, load_parameter_set, steps_per_episode
        from ..core.twin import UnstableTwinError
        goal = job.goal_handle.request
        if int(goal.total_steps) > MAX_TRAIN_STEPS:
            raise _Fail(TR.TRAINING_FAILED, f'total_steps {goal.total_steps} is more than the '
                        f'{MAX_TRAIN_STEPS} allowed (a negative count sent as uint32 wraps to '
                        f'4294967295)')
        if len(goal.demo_bags) > MAX_DEMO_BAGS:
            raise _Fail(TR.INVALID_DEMOS, f'{len(goal.demo_bags)} demo_bags is more than the '
                        f'{MAX_DEMO_BAGS} allowed')
        if goal.task not in task_names():
            raise _Fail(TR.UNKNOWN_TASK, f'unknown task {goal.task!r}; known tasks: '
                        f'{task_names()}')
        parameters = None
        if goal.parameters_path:
            try:
                parameters = load_parameter_set(goal.parameters_path)
            except ParameterError as exc:
                raise _Fail(TR.INVALID_PARAMETERS, str(exc)) from None
        self._feedback_train(job, 'setup', 0.0, math.nan, force=True)
        robot = self._wait_robot(TR.TRAINING_FAILED)
        task, twin, inputs = self._build(
            robot, goal.task, TR, scene=self._scene_or_fail(TR.TRAINING_FAILED),
            parameters=parameters, parameters_path=goal.parameters_path)
        try:
            demos = self._read_demos(list(goal.demo_bags), task)
        except _Fail:
            twin.close()
            raise
        spe = steps_per_episode(task)
        cfg = budget_config(self._train_config(), int(goal.total_steps), task.one_shot, spe)
        run_dir = goal.run_dir or self._param('run_dir') or tempfile.mkdtemp(
            prefix='r2s2r_train_')
        threads = int(self._param('torch_threads'))
        stage_at = ['setup']

        def progress(name, fraction, success):
            if job.cancel.is_set():
                return False
            stage_at[0] = name
            self._feedback_train(job, name, fraction, success)
            return True
        previous = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            out = train_stage(task, twin, inputs, run_dir, cfg, parameters=parameters,
                              randomize=bool(goal.randomize), demos=demos, progress=progress,
                              inputs={'parameters_path': goal.parameters_path,
                                      'total_steps': int(goal.total_steps),
                                      'demo_bags': list(goal.demo_bags),
                                      'robot': self._robot_source,
                                      'twin_parameters_file': self.p_twin_parameters_file},
                              parameters_record={'torch_threads': threads})
        except TrainingCanceled:
            raise _Fail(TR.CANCELED, f'canceled during {stage_at[0]}') from None
        except NoDemonstrationsError as exc:
            read = (f'{len(goal.demo_bags)} demo bag(s) read, {len(demos)} demonstration(s): '
                    if demos is not None else '')
            raise _Fail(TR.NO_DEMOS, read + str(exc)) from None
        except UnstableTwinError as exc:
            raise _Fail(TR.UNSTABLE_TWIN, f'the twin diverged during {stage_at[0]}: {exc}') \
                from None
        except Exception as exc:  # noqa: BLE001 - unstable twin, IK, ... : a result, no crash
            raise _Fail(TR.TRAINING_FAILED, f'{type(exc).__name__}: {exc}') from None
        finally:
            torch.set_num_threads(previous)
            twin.close()
        res, wall, ckpt = out.result, out.wall_s, out.checkpoint
        ev = res.twin_eval
        self._feedback_train(job, 'done', 1.0, ev.success_rate, force=True)
        if demos is not None:
            self.get_logger().info(f'train {goal.task}: {res.demos_kept} of {res.demos_tried} '
                                   f'recorded demonstrations succeeded in the twin')
        self.get_logger().info(
            f'train {goal.task}: {wall:.1f} s, twin success {ev.success_rate:.0%} '
            f'({ev.successes}/{ev.n_trials}, imitation alone {res.twin_eval_bc.success_rate:.0%})'
            f', checkpoint {ckpt}')
        return TR(checkpoint_path=str(ckpt), twin_result=TaskResult(
            system='twin', trials=ev.n_trials, successes=ev.successes,
            success_rate=float(ev.success_rate)))

    def _read_demos(self, bags: list, task):
        """The demonstrations of ``bags`` for ``task`` (None without bags); INVALID_DEMOS
        naming the first bag that cannot be used."""
        if not bags:
            return None
        from ..core.policies.demo_bags import DemoBagError, read_demo_bags
        try:
            demos = read_demo_bags(bags, task)
        except DemoBagError as exc:
            raise _Fail(TR.INVALID_DEMOS, f'{exc} ({exc.kind})') from None
        self.get_logger().info(f'{len(bags)} demo bag(s): {len(demos)} {task.name} '
                               f'demonstration(s), {sum(d.steps for d in demos)} action(s)')
        return demos

    def _feedback_train(self, job: _Job, stage: str, progress: float, success: float,
                        force: bool = False):
        now = time.monotonic()
        last = getattr(job, 'last_feedback', None)
        if last is None:
            job.period = float(self._param('feedback_period'))
        elif not force and last[0] == stage and now - last[1] < job.period:
            return
        job.last_feedback = (stage, now)
        if job.cancel.is_set():
            return
        job.goal_handle.publish_feedback(Train.Feedback(
            stage=stage, progress=float(progress), twin_success_rate=float(success)))

    def _scene_or_fail(self, code: int):
        from ..core.training_setup import SceneError
        try:
            return self._current_scene()
        except SceneError as exc:
            raise _Fail(code, str(exc)) from None

    def _start_values_for(self, robot) -> dict:
        """The twin's starting values, the config's joint templates expanded for ``robot``."""
        from ..core.sysid.config import load_parameter_values
        return load_parameter_values(self.p_twin_parameters_file, robot)

    def _build(self, robot, task_name, codes, *, scene, parameters=None, parameters_path='',
               task_config=None, start_values=None, friction_prior=None,
               invalid_code=None, failed_code=None):
        """build_task_and_twin with the node's parameters; core errors -> codes."""
        from ..core.parameters import ParameterError
        from ..core.tasks import TaskError
        from ..core.training_setup import SceneError, build_task_and_twin
        from ..core.twin import TwinError, UnstableTwinError
        invalid = codes.INVALID_PARAMETERS if invalid_code is None else invalid_code
        failed = codes.TRAINING_FAILED if failed_code is None else failed_code
        unstable = getattr(codes, 'UNSTABLE_TWIN', failed)   # Train has its own code
        try:
            return build_task_and_twin(
                robot, task_name, scene=scene, object_id=self._param('object_id'),
                task_config=task_config,
                start_values=(self._start_values_for(robot) if start_values is None
                              else start_values),
                parameters=parameters, parameters_path=parameters_path,
                timestep=self._param('timestep'),
                object_friction_prior=(self._param('object_friction_prior')
                                       if friction_prior is None else friction_prior),
                object_mass_prior=self._param('object_mass_prior'))
        except ParameterError as exc:
            raise _Fail(invalid, f'parameter set {parameters_path}: {exc}' if parameters_path
                        else str(exc)) from None
        except UnstableTwinError as exc:
            where = f'parameter set {parameters_path}' if parameters_path else 'the twin'
            raise _Fail(unstable, f'{where} makes the twin diverge in a small move of the arm: '
                        f'{exc}') from None
        except (TaskError, SceneError, TwinError) as exc:
            raise _Fail(failed, str(exc)) from None

    # ------------------------------------------------------------------ evaluate
    def _on_evaluate(self, goal_handle):
        return self._run(goal_handle, self._evaluate, ER(), ER.CANCELED, ER.INVALID_CHECKPOINT,
                         'evaluate')

    def _evaluate(self, job: _Job):
        from ..core.policies import CheckpointError, load_checkpoint
        from ..core.policies.evaluate import evaluate
        from ..core.tasks import task_names
        from ..core.tasks.worlds import TwinWorld
        from ..core.training_setup import scene_info_from_mjcf
        goal = job.goal_handle.request
        if int(goal.trials) > MAX_EVAL_TRIALS:
            raise _Fail(ER.INVALID_GOAL, f'trials {goal.trials} is more than the '
                        f'{MAX_EVAL_TRIALS} allowed (a negative count sent as uint32 wraps to '
                        f'4294967295)')
        path = goal.checkpoint_path
        if not path:
            raise _Fail(ER.INVALID_CHECKPOINT, 'checkpoint_path is empty')
        try:
            policy, config = load_checkpoint(path)
        except CheckpointError as exc:
            raise _Fail(ER.INVALID_CHECKPOINT, str(exc)) from None
        task_config = dict(config.get('task') or {})
        trained_for = task_config.get('task', '')
        name = goal.task or trained_for
        if name not in task_names():
            raise _Fail(ER.UNKNOWN_TASK, f'unknown task {name!r}; known tasks: {task_names()}')
        if trained_for and name != trained_for:
            raise _Fail(ER.INVALID_CHECKPOINT, f'checkpoint {path} holds a {trained_for} '
                        f'policy, not {name}')
        manifest = _training_manifest(path)
        robot = self._wait_robot(ER.INVALID_CHECKPOINT)
        scene, start, values, friction, seed = None, None, None, None, self._param('seed')
        if manifest is not None:
            rec = manifest['inputs'].get('scene', {})
            friction = rec.get('object_friction_prior')
            if rec.get('mjcf_path'):
                from ..core.training_setup import SceneError
                try:
                    scene = scene_info_from_mjcf(rec['mjcf_path'], rec.get('source', ''))
                except SceneError as exc:
                    raise _Fail(ER.INVALID_CHECKPOINT, f'the twin of {path} cannot be rebuilt: '
                                f'{exc}') from None
            pars = manifest['parameters']
            start, values = pars.get('start_values'), pars.get('parameter_values')
            seed = pars.get('train_config', {}).get('seed', seed)
        else:
            scene = self._scene_or_fail(ER.INVALID_CHECKPOINT)
            self.get_logger().info(f'{path}: no train manifest beside it; evaluating in the '
                                   f'current twin (nominal values)')
        task, twin, _ = self._build(
            robot, name, ER, scene=scene, task_config=task_config or None, start_values=start,
            parameters=values, friction_prior=friction,
            invalid_code=ER.INVALID_CHECKPOINT, failed_code=ER.INVALID_CHECKPOINT)
        if (policy.obs_dim, policy.action_dim) != (task.observation_dim, task.action_dim):
            raise _Fail(ER.INVALID_CHECKPOINT, f'checkpoint {path}: observation/action sizes '
                        f'{policy.obs_dim}/{policy.action_dim} do not fit {name} '
                        f'({task.observation_dim}/{task.action_dim})')
        n = int(goal.trials) or int(self._param('eval_trials'))

        def progress(fraction, success):
            if job.cancel.is_set():
                raise _Fail(ER.CANCELED, f'canceled after {round(fraction * n)} of {n} trials')
            job.goal_handle.publish_feedback(Evaluate.Feedback(
                trials_done=int(round(fraction * n)), success_rate=float(success)))
        try:
            res = evaluate(task, TwinWorld(twin, task.object_id), policy.as_function(), n,
                           int(seed) + 1000, progress=progress)
        finally:
            twin.close()
        self.get_logger().info(f'evaluate {path}: twin success {res.success_rate:.0%} '
                               f'({res.successes}/{n}), mean error {res.mean_error:.3f} m')
        return ER(result=TaskResult(system='twin', trials=res.n_trials,
                                    successes=res.successes,
                                    success_rate=float(res.success_rate)))

    def close(self):
        # A worker still in MuJoCo / torch when the interpreter exits crashes it: stop it first.
        if self._worker is not None and self._worker.is_alive():
            self._job.cancel.set()
            self._worker.join(timeout=CANCEL_GRACE)
        self._train_action.destroy()
        self._eval_action.destroy()


def _training_manifest(checkpoint_path) -> dict | None:
    """The train stage's manifest.json beside a checkpoint folder, if it is one."""
    p = Path(checkpoint_path).parent / 'manifest.json'
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return data if data.get('stage') == 'train' else None


def main(args=None):
    return run_node(PolicyTrainerNode, args=args)


if __name__ == '__main__':
    raise SystemExit(main())
