"""The policy_trainer's two goals: ``~/train`` and ``~/evaluate`` (the package docstring has
their contract). Both run on the node's worker thread (node.py ``_run``); a
:class:`GoalFailed` ends the goal with its code."""
from __future__ import annotations

import math
import tempfile
import time

from real2sim2real_msgs.action import Evaluate, Train
from real2sim2real_msgs.msg import TaskResult

from .job import MAX_DEMO_BAGS, MAX_EVAL_TRIALS, MAX_TRAIN_STEPS, GoalFailed, Job

TrainResult = Train.Result
EvaluateResult = Evaluate.Result


class TrainGoal:
    """PolicyTrainerNode's ``~/train`` (a mixin: ``self`` is the node)."""

    def _train(self, job: Job):
        from ...core.training_setup import budget_config, steps_per_episode, train_config_from
        goal = job.goal_handle.request
        parameters = self._train_goal_parameters(goal)
        self._feedback_train(job, 'setup', 0.0, math.nan, force=True)
        robot = self._wait_robot(TrainResult.TRAINING_FAILED)
        task, twin, inputs = self._build(
            robot, goal.task, TrainResult,
            scene=self._scene_or_fail(TrainResult.TRAINING_FAILED),
            parameters=parameters, parameters_path=goal.parameters_path)
        try:
            demos = self._read_demos(list(goal.demo_bags), task)
        except GoalFailed:
            twin.close()
            raise
        cfg = budget_config(train_config_from(self.p), int(goal.total_steps), task.one_shot,
                            steps_per_episode(task))
        run_dir = goal.run_dir or self.p.run_dir or tempfile.mkdtemp(prefix='r2s2r_train_')
        out = self._train_in_twin(job, task, twin, inputs, run_dir, cfg, parameters, demos)
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
        return TrainResult(checkpoint_path=str(ckpt), twin_result=TaskResult(
            system='twin', trials=ev.n_trials, successes=ev.successes,
            success_rate=float(ev.success_rate)))

    def _train_goal_parameters(self, goal):
        """Checks the goal's counts and task; its identified ParameterSet (None: nominal)."""
        from ...core.parameters import ParameterError
        from ...core.tasks import task_names
        from ...core.training_setup import load_parameter_set
        if int(goal.total_steps) > MAX_TRAIN_STEPS:
            raise GoalFailed(TrainResult.TRAINING_FAILED, f'total_steps {goal.total_steps} is '
                             f'more than the {MAX_TRAIN_STEPS} allowed (a negative count sent '
                             f'as uint32 wraps to 4294967295)')
        if len(goal.demo_bags) > MAX_DEMO_BAGS:
            raise GoalFailed(TrainResult.INVALID_DEMOS, f'{len(goal.demo_bags)} demo_bags is '
                             f'more than the {MAX_DEMO_BAGS} allowed')
        if goal.task not in task_names():
            raise GoalFailed(TrainResult.UNKNOWN_TASK, f'unknown task {goal.task!r}; known '
                             f'tasks: {task_names()}')
        if not goal.parameters_path:
            return None
        try:
            return load_parameter_set(goal.parameters_path)
        except ParameterError as exc:
            raise GoalFailed(TrainResult.INVALID_PARAMETERS, str(exc)) from None

    def _train_in_twin(self, job: Job, task, twin, inputs, run_dir, cfg, parameters, demos):
        """core/policies/stage.train_stage on ``torch_threads`` threads; its errors -> codes.
        Closes the twin."""
        import torch

        from ...core.policies.pipeline import NoDemonstrationsError, TrainingCanceled
        from ...core.policies.stage import train_stage
        from ...core.twin import UnstableTwinError
        goal = job.goal_handle.request
        threads = int(self.p.torch_threads)
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
            return train_stage(
                task, twin, inputs, run_dir, cfg, parameters=parameters,
                randomize=bool(goal.randomize), demos=demos, progress=progress,
                inputs={'parameters_path': goal.parameters_path,
                        'total_steps': int(goal.total_steps), 'demo_bags': list(goal.demo_bags),
                        'robot': self._robot_source,
                        'twin_parameters_file': self._twin_parameters_file},
                parameters_record={'torch_threads': threads})
        except TrainingCanceled:
            raise GoalFailed(TrainResult.CANCELED, f'canceled during {stage_at[0]}') from None
        except NoDemonstrationsError as exc:
            read = (f'{len(goal.demo_bags)} demo bag(s) read, {len(demos)} demonstration(s): '
                    if demos is not None else '')
            raise GoalFailed(TrainResult.NO_DEMOS, read + str(exc)) from None
        except UnstableTwinError as exc:
            raise GoalFailed(TrainResult.UNSTABLE_TWIN,
                             f'the twin diverged during {stage_at[0]}: {exc}') from None
        except Exception as exc:  # noqa: BLE001 - unstable twin, IK, ... : a result, no crash
            raise GoalFailed(TrainResult.TRAINING_FAILED,
                             f'{type(exc).__name__}: {exc}') from None
        finally:
            torch.set_num_threads(previous)
            twin.close()

    def _read_demos(self, bags: list, task):
        """The demonstrations of ``bags`` for ``task`` (None without bags); INVALID_DEMOS
        naming the first bag that cannot be used."""
        if not bags:
            return None
        from ...core.policies.demo_bags import DemoBagError, read_demo_bags
        try:
            demos = read_demo_bags(bags, task)
        except DemoBagError as exc:
            raise GoalFailed(TrainResult.INVALID_DEMOS, f'{exc} ({exc.kind})') from None
        self.get_logger().info(f'{len(bags)} demo bag(s): {len(demos)} {task.name} '
                               f'demonstration(s), {sum(d.steps for d in demos)} action(s)')
        return demos

    def _feedback_train(self, job: Job, stage: str, progress: float, success: float,
                        force: bool = False):
        now = time.monotonic()
        last = getattr(job, 'last_feedback', None)
        if last is None:
            job.period = float(self.p.feedback_period)
        elif not force and last[0] == stage and now - last[1] < job.period:
            return
        job.last_feedback = (stage, now)
        if job.cancel.is_set():
            return
        job.goal_handle.publish_feedback(Train.Feedback(
            stage=stage, progress=float(progress), twin_success_rate=float(success)))


class EvaluateGoal:
    """PolicyTrainerNode's ``~/evaluate`` (a mixin: ``self`` is the node)."""

    def _evaluate(self, job: Job):
        from ...core.policies.evaluate import evaluate
        from ...core.tasks.worlds import TwinWorld
        goal = job.goal_handle.request
        if int(goal.trials) > MAX_EVAL_TRIALS:
            raise GoalFailed(EvaluateResult.INVALID_GOAL, f'trials {goal.trials} is more than '
                             f'the {MAX_EVAL_TRIALS} allowed (a negative count sent as uint32 '
                             f'wraps to 4294967295)')
        path = goal.checkpoint_path
        policy, task_config, name = self._checkpoint_for(goal)
        task, twin, seed = self._trained_twin(path, name, task_config)
        if (policy.obs_dim, policy.action_dim) != (task.observation_dim, task.action_dim):
            twin.close()
            raise GoalFailed(EvaluateResult.INVALID_CHECKPOINT, f'checkpoint {path}: '
                             f'observation/action sizes {policy.obs_dim}/{policy.action_dim} '
                             f'do not fit {name} ({task.observation_dim}/{task.action_dim})')
        n = int(goal.trials) or int(self.p.eval_trials)

        def progress(fraction, success):
            if job.cancel.is_set():
                raise GoalFailed(EvaluateResult.CANCELED,
                                 f'canceled after {round(fraction * n)} of {n} trials')
            job.goal_handle.publish_feedback(Evaluate.Feedback(
                trials_done=int(round(fraction * n)), success_rate=float(success)))
        try:
            res = evaluate(task, TwinWorld(twin, task.object_id), policy.as_function(), n,
                           int(seed) + 1000, progress=progress)
        finally:
            twin.close()
        self.get_logger().info(f'evaluate {path}: twin success {res.success_rate:.0%} '
                               f'({res.successes}/{n}), mean error {res.mean_error:.3f} m')
        return EvaluateResult(result=TaskResult(system='twin', trials=res.n_trials,
                                                successes=res.successes,
                                                success_rate=float(res.success_rate)))

    def _checkpoint_for(self, goal):
        """(policy, its task config, the task's name) of the goal's checkpoint."""
        from ...core.policies import CheckpointError, load_checkpoint
        from ...core.tasks import task_names
        path = goal.checkpoint_path
        if not path:
            raise GoalFailed(EvaluateResult.INVALID_CHECKPOINT, 'checkpoint_path is empty')
        try:
            policy, config = load_checkpoint(path)
        except CheckpointError as exc:
            raise GoalFailed(EvaluateResult.INVALID_CHECKPOINT, str(exc)) from None
        task_config = dict(config.get('task') or {})
        trained_for = task_config.get('task', '')
        name = goal.task or trained_for
        if name not in task_names():
            raise GoalFailed(EvaluateResult.UNKNOWN_TASK,
                             f'unknown task {name!r}; known tasks: {task_names()}')
        if trained_for and name != trained_for:
            raise GoalFailed(EvaluateResult.INVALID_CHECKPOINT, f'checkpoint {path} holds a '
                             f'{trained_for} policy, not {name}')
        return policy, task_config, name

    def _trained_twin(self, path: str, name: str, task_config: dict):
        """(task, twin, training seed): the twin the checkpoint was trained in (its train
        manifest), else the current scene and the nominal twin."""
        from ...core.training_setup import (
            SceneError,
            scene_info_from_mjcf,
            trained_twin_inputs,
            training_manifest,
        )
        robot = self._wait_robot(EvaluateResult.INVALID_CHECKPOINT)
        manifest = training_manifest(path)
        if manifest is None:
            scene = self._scene_or_fail(EvaluateResult.INVALID_CHECKPOINT)
            self.get_logger().info(f'{path}: no train manifest beside it; evaluating in the '
                                   f'current twin (nominal values)')
            rec = {'start_values': None, 'parameter_values': None, 'friction_prior': None,
                   'seed': self.p.seed}
        else:
            rec = trained_twin_inputs(manifest, self.p.seed)
            scene = None
            if rec['scene_mjcf']:
                try:
                    scene = scene_info_from_mjcf(rec['scene_mjcf'], rec['scene_source'])
                except SceneError as exc:
                    raise GoalFailed(EvaluateResult.INVALID_CHECKPOINT, f'the twin of {path} '
                                     f'cannot be rebuilt: {exc}') from None
        task, twin, _ = self._build(
            robot, name, EvaluateResult, scene=scene, task_config=task_config or None,
            start_values=rec['start_values'], parameters=rec['parameter_values'],
            friction_prior=rec['friction_prior'],
            invalid_code=EvaluateResult.INVALID_CHECKPOINT,
            failed_code=EvaluateResult.INVALID_CHECKPOINT)
        return task, twin, rec['seed']
