"""The training stage, ROS-free: a task and its twin -> ``train_NNN/`` folder.

One code path for the policy_trainer node and the evaluation harness: the twin is built by
core/training_setup.build_task_and_twin (the robot, the reconstructed scene MJCF, the starting
values, the identified parameters), :func:`train_stage` trains in it
(core/policies/pipeline.train_policy) and writes::

    train_NNN/
      checkpoint/       policy weights + config (loads with core/policies/policy.py alone)
      manifest.json     inputs, parameters (train config, twin inputs), results, timings

A failed or canceled training leaves no folder behind (the exception propagates).
"""
from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

STAGE = 'train'

__all__ = ['STAGE', 'TrainOutput', 'train_stage']


@dataclass
class TrainOutput:
    """The training stage's outputs: the TrainResult, the stage folder, checkpoint and manifest
    paths, wall time (s)."""
    result: object                 # core/policies/pipeline.TrainResult
    folder: Path
    checkpoint: Path
    manifest_path: Path
    wall_s: float
    stage_seconds: dict


def train_stage(task, twin, twin_inputs, run_dir, config, *, parameters=None,
                randomize: bool = False, demos=None, progress=None, inputs: dict | None = None,
                parameters_record: dict | None = None) -> TrainOutput:
    """Train ``task`` in ``twin`` (from build_task_and_twin; ``twin_inputs`` its TwinInputs)
    with ``config`` (a TrainConfig); randomise over ``parameters``' intervals when
    ``randomize``. ``progress(stage, fraction, success) -> False`` cancels
    (TrainingCanceled). Raises what train_policy raises (NoDemonstrationsError, ...)."""
    from ..artifacts import RunDirectory
    from ..training_setup import steps_per_episode, training_steps
    from .pipeline import train_policy
    from .policy import CONFIG_FILE, WEIGHTS_FILE
    spe = steps_per_episode(task)
    stage = RunDirectory(run_dir).new_stage(STAGE, inputs={
        'task': task.name, 'randomize': bool(randomize),
        'parameters_path': twin_inputs.parameters_path, 'scene': twin_inputs.scene,
        **(inputs or {})}, parameters={
        'train_config': asdict(config), 'task_config': twin_inputs.task_config,
        'start_values': twin_inputs.start_values,
        'parameter_values': twin_inputs.parameter_values, 'timestep': twin_inputs.timestep,
        'training_steps': training_steps(config, task.one_shot, spe),
        **(parameters_record or {})})
    marks: list = []          # (stage, wall time it started)
    t0 = time.monotonic()

    def on_progress(name, fraction, success):
        if progress is not None and progress(name, fraction, success) is False:
            return False
        if not marks or marks[-1][0] != name:
            marks.append((name, time.monotonic()))
        return True
    try:
        res = train_policy(task, twin, parameters if randomize else None, config,
                           stage.folder / 'checkpoint', progress=on_progress, demos=demos)
    except BaseException:
        shutil.rmtree(stage.folder, ignore_errors=True)
        raise
    wall = time.monotonic() - t0
    ends = [m[1] for m in marks[1:]] + [time.monotonic()]
    stage_seconds: dict = {}
    for (name, start), end in zip(marks, ends):
        stage_seconds[name] = stage_seconds.get(name, 0.0) + end - start
    ckpt = Path(res.checkpoint)
    stage.add_output('policy_weights', ckpt / WEIGHTS_FILE)
    stage.add_output('policy_config', ckpt / CONFIG_FILE)
    stage.results = {
        'twin_eval': res.twin_eval.to_dict(), 'twin_eval_bc': res.twin_eval_bc.to_dict(),
        'demos_tried': res.demos_tried, 'demos_kept': res.demos_kept,
        'bc_loss': res.bc_loss, 'ppo_success_per_iteration': res.ppo_success_per_iteration,
        'randomization': res.randomization, 'wall_seconds': wall,
        'cpu_seconds': res.cpu_seconds, 'stage_seconds': stage_seconds,
        'demos': res.details.get('demos')}
    manifest = stage.finish()
    return TrainOutput(res, stage.folder, ckpt, manifest, wall, stage_seconds)
