"""The policy_trainer node: parameters, the robot and scene it trains with, the goal worker.

The goals themselves are goals.py; the package docstring has the whole contract.
"""
from __future__ import annotations

import threading
import time

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from std_msgs.msg import String

from real2sim2real_msgs.action import Evaluate, Train
from real2sim2real_msgs.msg import Scene

from ...ros import qos
from ...ros.params import CONTROLLER_CONFIG, Param, bind_checked, shipped_config
from ...ros.ros_main import ConfigurationError, run_node
from .goals import EvaluateGoal, EvaluateResult, TrainGoal, TrainResult
from .job import CANCEL_GRACE, MAX_EVAL_TRIALS, SCENE_GRACE, GoalFailed, Job

NODE_NAME = 'policy_trainer'
STAGES = ('setup', 'demos', 'imitation', 'self_imitation', 'evaluate', 'ppo', 'done')
PARAMETERS = (
    Param('robot_urdf', '',
          "URDF (path or XML) of the robot; '' = the latched robot_description topic.",
          read_only=True),
    Param('twin_parameters_file', '',
          'Starting values of the twin: an identification config (known controller gains + '
          "priors, what sim_server starts from) or a parameter set; '' = the package's "
          'config/identification.yaml.', read_only=True),
    CONTROLLER_CONFIG,
    Param('scene_path', '',
          "Scene MJCF (scene_reconstruction's scene.xml); '' = the latched scene topic, else "
          "the task's own scene."),
    Param('object_id', '', "The scene object the task manipulates; '' = the scene's first box."),
    Param('object_friction_prior', 0.5,
          'Sliding friction of the object before identification (reconstruction measures '
          'geometry only); identified values override it.', lo=0.01, hi=3.0),
    Param('object_mass_prior', 0.2,
          "kg, the object's mass in the task's own scene (a reconstructed scene carries its "
          'mass prior).', lo=0.001, hi=50.0),
    Param('timestep', 0.001, 'Twin physics step (s).', lo=0.0001, hi=0.01),
    Param('demos', 80, 'Scripted demonstrations replayed in the twin.', lo=1, hi=100000),
    Param('bc_epochs', 1000, 'Behaviour-cloning epochs (self-imitation refits use half).',
          lo=1, hi=100000),
    Param('self_imitation_rounds', 3, 'Hindsight self-imitation rounds (one-shot tasks).',
          lo=0, hi=1000),
    Param('self_imitation_episodes', 40, 'Episodes per self-imitation round.',
          lo=1, hi=100000),
    Param('ppo_iterations', 12, 'PPO iterations (one-shot tasks; 0 = imitation only).',
          lo=0, hi=100000),
    Param('ppo_batch_size', 32, 'Episodes per PPO iteration.', lo=2, hi=100000),
    Param('ppo_lr', 1e-3, 'PPO policy learning rate.', lo=1e-6, hi=1.0),
    Param('randomization_widen', 1.0,
          'Randomisation range: value +- this x the 95% half-width.', lo=0.0, hi=100.0),
    Param('randomization_min_relative', 0.0,
          'At least this fraction of the value as randomisation half-width.', lo=0.0, hi=10.0),
    Param('eval_trials', 20,
          'Twin evaluation trials (training result; evaluate goals with trials=0).',
          lo=1, hi=MAX_EVAL_TRIALS),
    Param('seed', 0, 'Training seed (evaluation episodes use seed + 1000).',
          lo=0, hi=2 ** 31 - 1),
    Param('torch_threads', 2, 'torch threads while training.', lo=1, hi=64),
    Param('feedback_period', 0.25,
          'Minimum seconds between training feedback messages (stage changes are always '
          'sent).', lo=0.0, hi=10.0),
    Param('run_dir', '', "Run directory for train_NNN; '' = a temporary one."),
)


class PolicyTrainerNode(TrainGoal, EvaluateGoal, Node):
    def __init__(self):
        super().__init__(NODE_NAME)
        self._lock = threading.Lock()
        self._busy = threading.Lock()
        self._started = time.monotonic()
        self._job: Job | None = None
        self._worker: threading.Thread | None = None
        self._read_parameters()
        self._robot = None
        self._robot_source = ''
        self._robot_error = 'waiting for robot_description'
        self._scene_msg: Scene | None = None
        if self.p.robot_urdf:
            self._load_robot(self.p.robot_urdf, fatal=True)
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
            f'policy_trainer ready: robot from {self.p.robot_urdf or "robot_description"}, '
            f'scene from {self.p.scene_path or "the scene topic / the task default"}, '
            f'starting values {self._twin_parameters_file}')

    # ------------------------------------------------------------------ setup
    def _read_parameters(self):
        # Tunables follow `ros2 param set` between goals (a running goal copied its values).
        self.p = bind_checked(self, PARAMETERS, NODE_NAME)
        self._twin_parameters_file = (self.p.twin_parameters_file
                                      or shipped_config('identification.yaml'))
        from ...core.sysid.config import load_parameter_values
        try:
            self._start_values = load_parameter_values(
                self._twin_parameters_file, None, self.p.controller_config or None)
        except Exception as exc:  # noqa: BLE001 - any unreadable or invalid file
            raise ConfigurationError(f'policy_trainer parameters: {exc}', NODE_NAME) from None

    def _load_robot(self, source: str, fatal: bool):
        from ...core.robot_description import load_robot
        try:
            robot = load_robot(source)
        except Exception as exc:  # noqa: BLE001 - any unusable URDF
            text = f'robot description unusable: {str(exc).splitlines()[0]}'
            if fatal:
                raise ConfigurationError(text, NODE_NAME) from None
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
                raise GoalFailed(code, f'no robot model: {why}')
            time.sleep(0.1)

    def _current_scene(self):
        """SceneInfo of scene_path / the scene topic, or None (the task's own scene)."""
        from ...core.training_setup import SceneInfo, SceneObject, scene_info_from_mjcf
        path = self.p.scene_path
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
        job = Job(goal_handle)

        def target():
            try:
                job.result = work(job)
            except GoalFailed as exc:
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

    def _scene_or_fail(self, code: int):
        from ...core.training_setup import SceneError
        try:
            return self._current_scene()
        except SceneError as exc:
            raise GoalFailed(code, str(exc)) from None

    def _start_values_for(self, robot) -> dict:
        """The twin's starting values, the config's joint templates expanded for ``robot``."""
        from ...core.sysid.config import load_parameter_values
        return load_parameter_values(self._twin_parameters_file, robot,
                                     self.p.controller_config or None)

    def _build(self, robot, task_name, codes, *, scene, parameters=None, parameters_path='',
               task_config=None, start_values=None, friction_prior=None,
               invalid_code=None, failed_code=None):
        """build_task_and_twin with the node's parameters; core errors -> codes."""
        from ...core.parameters import ParameterError
        from ...core.tasks import TaskError
        from ...core.training_setup import SceneError, build_task_and_twin
        from ...core.twin import TwinError, UnstableTwinError
        invalid = codes.INVALID_PARAMETERS if invalid_code is None else invalid_code
        failed = codes.TRAINING_FAILED if failed_code is None else failed_code
        unstable = getattr(codes, 'UNSTABLE_TWIN', failed)   # Train has its own code
        try:
            return build_task_and_twin(
                robot, task_name, scene=scene, object_id=self.p.object_id,
                task_config=task_config,
                start_values=(self._start_values_for(robot) if start_values is None
                              else start_values),
                parameters=parameters, parameters_path=parameters_path,
                timestep=self.p.timestep,
                object_friction_prior=(self.p.object_friction_prior
                                       if friction_prior is None else friction_prior),
                object_mass_prior=self.p.object_mass_prior)
        except ParameterError as exc:
            raise GoalFailed(invalid, f'parameter set {parameters_path}: {exc}'
                             if parameters_path else str(exc)) from None
        except UnstableTwinError as exc:
            where = f'parameter set {parameters_path}' if parameters_path else 'the twin'
            raise GoalFailed(unstable, f'{where} makes the twin diverge in a small move of '
                             f'the arm: {exc}') from None
        except (TaskError, SceneError, TwinError) as exc:
            raise GoalFailed(failed, str(exc)) from None

    # ------------------------------------------------------------------ the actions
    def _on_train(self, goal_handle):
        return self._run(goal_handle, self._train, TrainResult(), TrainResult.CANCELED,
                         TrainResult.TRAINING_FAILED, 'train')

    def _on_evaluate(self, goal_handle):
        return self._run(goal_handle, self._evaluate, EvaluateResult(), EvaluateResult.CANCELED,
                         EvaluateResult.INVALID_CHECKPOINT, 'evaluate')

    def close(self):
        # A worker still in MuJoCo / torch when the interpreter exits crashes it: stop it first.
        if self._worker is not None and self._worker.is_alive():
            self._job.cancel.set()
            self._worker.join(timeout=CANCEL_GRACE)
        self._train_action.destroy()
        self._eval_action.destroy()


def main(args=None):
    return run_node(PolicyTrainerNode, args=args)


if __name__ == '__main__':
    raise SystemExit(main())
