"""Training a closed-loop task (push_to_pose) in the twin: expert demonstrations -> DAgger ->
multi-step PPO with domain randomisation -> model selection -> checkpoint (ROS-free).

Called by :func:`~.pipeline.train_policy` for tasks that are not one-shot (same inputs, same
TrainResult, same progress stages). The task must provide ``expert_action(obs)`` (its
scripted expert as a function of the observation, to label the learner's states). Episodes
run in ``workers`` processes (core/policies/rollouts.py); the evaluations that decide between
the imitation and the PPO policy run the same twin episodes (``eval_trials``, fixed seed).

Recorded demonstrations (``demos``: core/policies/demo_bags.DemoEpisode s, e.g. pushes
recorded on the cell) replace the expert's demo episodes: each is replayed open loop in the
twin from its recorded start (box pose, goal, tool start; no kick), the successes are kept
and their twin replay's (observation, action) pairs are what DAgger's first fit imitates.
DAgger's later rounds still label the learner's states with the task's scripted expert
(``expert_action``): a recording only says what to do in the states it visited.
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
from .rollouts import Episode, EpisodeRunner


@dataclass
class ClosedLoopConfig:
    """Closed-loop training settings: network size, DAgger and PPO settings, episode workers."""
    hidden: tuple = (256, 256)
    dagger: DaggerConfig = field(default_factory=DaggerConfig)
    ppo: ClosedLoopPPOConfig = field(default_factory=ClosedLoopPPOConfig)
    workers: int = 2                  # episode worker processes (1: in process)
    randomize_imitation: bool = True  # demos and DAgger rollouts with randomised twins too


def _better(a, b) -> bool:
    """Evaluation ``a`` beats ``b``: more successes, or as many and a smaller mean error."""
    return (a.success_rate, -a.mean_error) > (b.success_rate, -b.mean_error)


def _recorded_episodes(task, twin, recorded, progress):
    """Recorded demos replayed in the twin (in process: a handful of episodes) as Episodes
    labelled with their own actions; (successful episodes, per-demo details)."""
    from ..tasks.worlds import TwinWorld
    from .imitation import replay_episode
    world = TwinWorld(twin, task.object_id)
    kept, details = [], []
    for k, d in enumerate(recorded):
        progress(k / max(len(recorded), 1))
        r = replay_episode(task, world, d.reset, d.actions)
        details.append({'success': bool(r.success), 'final_error': float(r.final_error),
                        'yaw_error': float(r.info.get('yaw_error', float('nan'))),
                        'steps': int(len(r.actions))})
        if r.success and len(r.actions):
            n = len(r.actions)
            kept.append(Episode(r.observations, r.actions, np.full((n, task.action_dim), np.nan),
                                np.asarray(r.info.get('rewards', [0.0] * n), float)[:n],
                                r.actions.copy(), r.info['final_observation'], True, True,
                                float(r.final_error), float(r.info.get('yaw_error', 0.0))))
    return kept, details


def train_closed_loop(task, twin, parameters, cfg, checkpoint_dir=None, progress=None,
                      demos=None):
    """The closed-loop branch of train_policy (``cfg``: a pipeline.TrainConfig; ``demos``:
    recorded DemoEpisode s instead of the expert's demo episodes)."""
    from .pipeline import (
        _COST,
        NoDemonstrationsError,
        TrainResult,
        _plain,
        _Progress,
        describe_replays,
    )
    cl: ClosedLoopConfig = getattr(cfg, 'closed_loop', None) or ClosedLoopConfig()
    if not hasattr(task, 'expert_action'):
        raise ValueError(f'{task.name}: closed-loop training needs the task\'s expert_action')
    t0 = time.process_time()
    torch.manual_seed(cfg.seed)
    ep = _COST['closed_loop_episode']
    d, p = cl.dagger, cl.ppo
    do_ppo = p.iterations > 0 and p.episodes > 0
    recorded = demos
    report = _Progress(progress, [
        ('demos', (cfg.demos if recorded is None else len(recorded)) * ep),
        ('imitation', d.rounds * d.episodes * ep + (d.initial_updates + d.rounds * d.updates)
         * _COST['epoch'] / 4),
        ('evaluate', cfg.eval_trials * ep),
        ('ppo', do_ppo * p.iterations * (p.episodes * ep + p.epochs * 2)),
        ('evaluate', do_ppo * cfg.eval_trials * ep)])
    dr = DomainRandomization(parameters, cfg.randomization_widen,
                             cfg.randomization_min_relative)
    rng = np.random.default_rng(cfg.seed + 1)
    demo_info = None
    if recorded is not None:
        # Before the runner forks: the replays run in this process, on the unrandomised twin.
        demos, details = _recorded_episodes(task, twin, recorded, report.stage(0))
        tried, kept = len(recorded), len(demos)
        demo_info = {'source': 'recorded', 'tried': tried, 'kept': kept,
                     'per_demo': [{'bag': d.bag, **r} for d, r in zip(recorded, details)]}
        if kept == 0:
            raise NoDemonstrationsError(
                f'no demonstration to imitate: 0 of {tried} recorded demonstrations of '
                f'{task.name} succeeded when replayed in the twin ({task.name} success rule); '
                + describe_replays(recorded, details))
    with EpisodeRunner(task, twin, cl.workers) as runner:
        if recorded is None:
            demos = runner.run(expert_jobs(task, cfg.demos, rng,
                                           dr if cl.randomize_imitation else None),
                               progress=report.stage(0))
            tried, kept = len(demos), sum(e.success for e in demos)
            demo_info = {'source': 'scripted', 'tried': tried, 'kept': kept}
            if kept == 0:
                raise NoDemonstrationsError(
                    f'no demonstration to imitate: 0 of {len(demos)} scripted demonstrations '
                    f'of {task.name} succeeded in the twin')
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
        meta = {'demos_tried': tried, 'demos_kept': kept, 'demos': demo_info,
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
    return TrainResult(path, policy, tried, kept, dhist.bc_loss[-1], eval_bc,
                       eval_final, list(per_iter), dr.describe(),
                       time.process_time() - t0 + worker_cpu,
                       {'dagger': asdict(dhist), 'ppo_kept': ppo_kept, 'demos': demo_info,
                        'twin_eval_ppo': eval_ppo, 'workers': runner.workers})
