"""Training a closed-loop task (push_to_pose) in the twin: expert demonstrations -> DAgger ->
multi-step PPO with domain randomisation -> model selection -> checkpoint (ROS-free).

Called by :func:`~.pipeline.train_policy` for tasks that are not one-shot (same inputs, same
TrainResult, same progress stages). The task must provide ``expert_action(obs)`` (its
scripted expert as a function of the observation, to label the learner's states). Episodes
run in ``workers`` processes (core/policies/rollouts.py); the evaluations that decide between
the imitation and the PPO policy run the same twin episodes (``eval_trials``, fixed seed).
"""
from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from .closed_loop_ppo import ClosedLoopPPOConfig, train_closed_loop_ppo
from .dagger import DaggerConfig, dagger, expert_jobs
from .policy import MLPPolicy, save_checkpoint
from .randomization import DomainRandomization
from .rollouts import EpisodeRunner


@dataclass
class ClosedLoopConfig:
    hidden: tuple = (256, 256)
    dagger: DaggerConfig = field(default_factory=DaggerConfig)
    ppo: ClosedLoopPPOConfig = field(default_factory=ClosedLoopPPOConfig)
    workers: int = 2                  # episode worker processes (1: in process)
    randomize_imitation: bool = True  # demos and DAgger rollouts with randomised twins too


def _better(a, b) -> bool:
    """Evaluation ``a`` beats ``b``: more successes, or as many and a smaller mean error."""
    return (a.success_rate, -a.mean_error) > (b.success_rate, -b.mean_error)


def train_closed_loop(task, twin, parameters, cfg, checkpoint_dir=None, progress=None):
    """The closed-loop branch of train_policy (``cfg``: a pipeline.TrainConfig)."""
    from .pipeline import _COST, NoDemonstrationsError, TrainResult, _plain, _Progress
    cl: ClosedLoopConfig = getattr(cfg, 'closed_loop', None) or ClosedLoopConfig()
    if not hasattr(task, 'expert_action'):
        raise ValueError(f'{task.name}: closed-loop training needs the task\'s expert_action')
    t0 = time.process_time()
    torch.manual_seed(cfg.seed)
    ep = _COST['closed_loop_episode']
    d, p = cl.dagger, cl.ppo
    do_ppo = p.iterations > 0 and p.episodes > 0
    report = _Progress(progress, [
        ('demos', cfg.demos * ep),
        ('imitation', d.rounds * d.episodes * ep + (d.initial_updates + d.rounds * d.updates)
         * _COST['epoch'] / 4),
        ('evaluate', cfg.eval_trials * ep),
        ('ppo', do_ppo * p.iterations * (p.episodes * ep + p.epochs * 2)),
        ('evaluate', do_ppo * cfg.eval_trials * ep)])
    dr = DomainRandomization(parameters, cfg.randomization_widen,
                             cfg.randomization_min_relative)
    rng = np.random.default_rng(cfg.seed + 1)
    with EpisodeRunner(task, twin, cl.workers) as runner:
        demos = runner.run(expert_jobs(task, cfg.demos, rng,
                                       dr if cl.randomize_imitation else None),
                           progress=report.stage(0))
        kept = sum(e.success for e in demos)
        if kept == 0:
            raise NoDemonstrationsError(
                f'no demonstration to imitate: 0 of {len(demos)} scripted demonstrations of '
                f'{task.name} succeeded in the twin')
        policy = MLPPolicy(task.observation_dim, task.action_low, task.action_high, cl.hidden,
                           init_log_std=cfg.init_log_std)
        _, _, dhist = dagger(policy, task, runner, demos, d,
                             dr if cl.randomize_imitation else None, cfg.seed + 2,
                             progress=report.stage(1))
        eval_seed = cfg.seed + 1000
        eval_bc = runner.evaluate(policy, cfg.eval_trials, eval_seed, report.stage(2))
        per_iter: list = []
        ppo_kept = False
        eval_ppo = None
        if do_ppo:
            before = copy.deepcopy(policy.state_dict())
            pcfg = ClosedLoopPPOConfig(**{**asdict(p), 'seed': cfg.seed + 3})
            per_iter = train_closed_loop_ppo(policy, task, runner, dr, pcfg,
                                             progress=report.stage(3)).success_rate
            eval_ppo = runner.evaluate(policy, cfg.eval_trials, eval_seed, report.stage(4))
            ppo_kept = _better(eval_ppo, eval_bc)
            if not ppo_kept:   # model selection in the twin: keep the imitation policy
                policy.load_state_dict(before)
        eval_final = eval_ppo if ppo_kept else eval_bc
        report.stage(4)(1.0, eval_final.success_rate)
        worker_cpu = runner.worker_cpu_seconds
    path = None
    if checkpoint_dir is not None:
        meta = {'demos_tried': len(demos), 'demos_kept': kept,
                'bc_loss': dhist.bc_loss[-1], 'dagger_learner_success': dhist.learner_success,
                'dagger_samples': dhist.samples,
                'twin_success_rate_bc': eval_bc.success_rate,
                'twin_success_rate_ppo': None if eval_ppo is None else eval_ppo.success_rate,
                'ppo_kept': ppo_kept, 'ppo_success_per_iteration': list(per_iter),
                'twin_success_rate': eval_final.success_rate,
                'twin_mean_error': eval_final.mean_error,
                'randomization': dr.describe(), 'train_config': _plain(asdict(cfg)),
                'trained_at_unix': time.time()}
        path = save_checkpoint(policy, checkpoint_dir, task.config(), meta)
    return TrainResult(path, policy, len(demos), kept, dhist.bc_loss[-1], eval_bc,
                       eval_final, list(per_iter), dr.describe(),
                       time.process_time() - t0 + worker_cpu,
                       {'dagger': asdict(dhist), 'ppo_kept': ppo_kept,
                        'twin_eval_ppo': eval_ppo, 'workers': runner.workers})
