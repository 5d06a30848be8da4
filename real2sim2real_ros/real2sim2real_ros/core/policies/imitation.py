"""Demonstrations into the twin, and behaviour cloning (torch).

Demonstrations (a task's scripted demonstrator, or recorded episodes: a reset plus the
actions taken) are *replayed in the twin* and only the episodes that succeed there are kept:
a demo that worked on the cell but fails in the twin teaches the twin's policy nothing, and
one that fails everywhere teaches the wrong thing. Behaviour cloning then regresses the
policy's mean action on the kept (observation, action) pairs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .policy import MLPPolicy


@dataclass
class DemoSet:
    """Demonstrations for behaviour cloning: observation and action arrays, episodes tried
    and kept."""
    observations: np.ndarray     # (n, obs_dim)
    actions: np.ndarray          # (n, action_dim)
    episodes_tried: int
    episodes_kept: int
    details: list = field(default_factory=list)   # replayed demos: one dict per episode

    @property
    def kept_fraction(self) -> float:
        """Episodes kept over episodes tried (0..1)."""
        return self.episodes_kept / max(self.episodes_tried, 1)


def _replay_policy(actions, hold=None):
    """A policy that plays back recorded actions in order; past their end ``hold`` (a
    closed-loop task's zero velocity: the tool stays), or the last one again when None."""
    actions = np.atleast_2d(np.asarray(actions, float))
    state = {'k': 0}

    def policy(_obs):
        k = state['k']
        state['k'] += 1
        if k < len(actions):
            return actions[k]
        return actions[-1] if hold is None else hold
    return policy


def replay_episode(task, world, reset, actions):
    """One recorded episode replayed open loop on ``world`` from its ``reset``: the
    EpisodeResult, its logs cut to the recorded actions (a closed-loop task's tool holds
    still after them until the episode ends, so the outcome includes the object coming to
    rest, but those held ticks are nobody's demonstration)."""
    actions = np.atleast_2d(np.asarray(actions, float))
    hold = None if getattr(task, 'one_shot', False) else np.zeros(task.action_dim)
    result = task.run_episode(world, reset, _replay_policy(actions, hold))
    n = min(len(actions), len(result.actions))
    result.observations, result.actions = result.observations[:n], result.actions[:n]
    return result


def replay_demos(task, world, episodes, keep_failures: bool = False,
                 progress=None) -> DemoSet:
    """Replay recorded episodes [(ResetSample, actions), ...] on ``world``; keep successes
    (RialTo's inverse distillation: the twin replay's (observation, action) pairs are the
    imitation data). ``details``: per episode, success and final error in the twin.
    ``progress(fraction)`` before each episode (it may raise to stop)."""
    obs, act, kept, details = [], [], 0, []
    for k, (reset, actions) in enumerate(episodes):
        if progress is not None:
            progress(k / max(len(episodes), 1))
        result = replay_episode(task, world, reset, actions)
        details.append({'success': bool(result.success),
                        'final_error': float(result.final_error),
                        'steps': int(len(result.actions)),
                        **({'yaw_error': float(result.info['yaw_error'])}
                           if 'yaw_error' in result.info else {})})
        if result.success or keep_failures:
            kept += int(result.success)
            obs.append(result.observations)
            act.append(result.actions)
    out = _demo_set(task, obs, act, len(episodes), kept)
    out.details = details
    return out


def collect_scripted_demos(task, world, n_episodes: int, seed: int = 0,
                           hindsight: bool = False, progress=None) -> DemoSet:
    """Run the task's scripted demonstrator ``n_episodes`` times on ``world``; keep successes.

    hindsight=True (one-shot tasks with ``hindsight_relabel``): a miss is kept too, relabelled
    with the goal it did reach (exact in a deterministic twin; more data per rollout).
    ``progress(fraction)`` is called before each episode (it may raise to stop).
    """
    if hindsight and not hasattr(task, 'hindsight_relabel'):
        raise ValueError(f'{task.name} has no hindsight_relabel; use hindsight=False')
    rng = np.random.default_rng(seed)
    obs, act, kept = [], [], 0
    for k in range(n_episodes):
        if progress is not None:
            progress(k / n_episodes)
        reset = task.sample_reset(rng)
        result = task.run_episode(world, reset, task.scripted_demo_policy(reset, rng))
        if result.success and not hindsight:
            kept += 1
            obs.append(result.observations)
            act.append(result.actions)
        elif hindsight:
            pair = task.hindsight_relabel(reset, result)
            if pair is not None:
                kept += 1
                obs.append(pair[0][None])
                act.append(pair[1][None])
    return _demo_set(task, obs, act, n_episodes, kept)


def _demo_set(task, obs, act, tried, kept) -> DemoSet:
    if not obs:
        return DemoSet(np.zeros((0, task.observation_dim)), np.zeros((0, task.action_dim)),
                       tried, kept)
    return DemoSet(np.concatenate(obs), np.concatenate(act), tried, kept)


def behaviour_cloning(policy: MLPPolicy, demos: DemoSet, epochs: int = 300, lr: float = 3e-3,
                      seed: int = 0, fit_normalisation: bool = True, progress=None) -> dict:
    """Fit the policy's mean action to the demos (MSE in units of the action range).
    ``progress(fraction)`` is called before each epoch (it may raise to stop)."""
    if len(demos.observations) == 0:
        raise ValueError('behaviour cloning needs at least one kept demonstration; '
                         f'0 of {demos.episodes_tried} episodes succeeded in the twin')
    torch.manual_seed(seed)
    if fit_normalisation:
        policy.fit_normalisation(demos.observations)
    x = torch.as_tensor(demos.observations, dtype=torch.float32)
    y = torch.as_tensor(demos.actions, dtype=torch.float32)
    span = policy.action_high - policy.action_low
    opt = torch.optim.Adam(policy.net.parameters(), lr=lr)
    policy.train()
    loss = torch.tensor(0.0)
    for e in range(epochs):
        if progress is not None:
            progress(e / epochs)
        opt.zero_grad()
        loss = (((policy.squash(policy(x)) - y) / span) ** 2).mean()
        loss.backward()
        opt.step()
    policy.eval()
    return {'bc_loss': float(loss.detach()), 'n_samples': int(len(x))}


def hindsight_self_imitation(policy: MLPPolicy, task, twin, demos: DemoSet, rounds: int = 3,
                             episodes: int = 40, randomization=None, seed: int = 0,
                             epochs: int = 500, progress=None) -> DemoSet:
    """Goal-relabelled self-imitation (GCSL-style) for one-shot tasks: run the policy with its
    exploration noise in the twin (one randomised parameter draw per episode), relabel every
    strike with the goal it reached, add it to the demos and refit. Widens the demos'
    coverage where the demonstrator never went (e.g. long slides on a grippy table).
    ``progress(fraction)`` is called before each episode (it may raise to stop)."""
    from ..tasks.worlds import TwinWorld, applied_parameters
    if not hasattr(task, 'hindsight_relabel'):
        raise ValueError(f'{task.name} has no hindsight_relabel')
    rng = np.random.default_rng(seed)
    obs, act = list(demos.observations), list(demos.actions)
    tried, kept = demos.episodes_tried, demos.episodes_kept
    world = TwinWorld(twin, task.object_id)
    for r in range(rounds):
        for k in range(episodes):
            if progress is not None:
                progress((r * episodes + k) / (rounds * episodes))
            reset = task.sample_reset(rng)
            params = randomization.sample(rng) if randomization is not None else {}
            with applied_parameters(twin, params):
                result = task.run_episode(world, reset, policy.as_function(rng))
            pair = task.hindsight_relabel(reset, result)
            tried += 1
            if pair is not None:
                kept += 1
                obs.append(pair[0])
                act.append(pair[1])
        demos = DemoSet(np.array(obs), np.array(act), tried, kept)
        behaviour_cloning(policy, demos, epochs=epochs, seed=seed)
    return demos
