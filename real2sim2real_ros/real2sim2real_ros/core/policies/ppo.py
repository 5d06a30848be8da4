"""RL fine-tuning in the twin: PPO for one-shot tasks (horizon 1, i.e. a contextual bandit).

For a one-shot task an episode is one (observation, action, reward) triple, so PPO reduces to
its clipped surrogate with advantage ``A = r - V(obs)`` (no bootstrapping, no GAE); that is
exactly what this module implements, with a small value network as the baseline. Every
episode draws its own physical parameters from a :class:`DomainRandomization` (ranges from
the identified 95% intervals), so the policy learns a strike that works across what the
identification could not rule out.

Closed-loop tasks (push_to_pose) are trained by core/policies/closed_loop.py (DAgger, then
the multi-step PPO with GAE of core/policies/closed_loop_ppo.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from ..tasks.worlds import TwinWorld, applied_parameters
from .policy import MLPPolicy
from .randomization import DomainRandomization


@dataclass
class PPOConfig:
    """One-step PPO settings: iterations, episodes per batch, epochs, learning rates."""
    iterations: int = 20
    batch_size: int = 48               # episodes per iteration
    epochs: int = 8                    # gradient passes over each batch
    lr: float = 3e-3
    value_lr: float = 1e-2
    clip: float = 0.2
    entropy_coef: float = 0.0
    min_log_std: float = -3.0          # keep some exploration
    reward_floor: float = -3.0         # an object knocked off the table is not worse than this
    seed: int = 0


@dataclass
class PPOHistory:
    """Per-iteration PPO figures: mean reward and success rate, and episodes run."""
    mean_reward: list = field(default_factory=list)
    success_rate: list = field(default_factory=list)
    episodes: int = 0


def episode_outcome(task, twin, reset, action, params: dict) -> tuple[float, bool]:
    """(reward, success) of one action in the twin with ``params`` applied for this episode."""
    if hasattr(task, 'twin_outcomes'):   # batched rollout fast path (one-shot tasks)
        state = task.twin_outcomes(twin, reset, action, [params] if params else None)[0]
        return task.reward(state, action), task.success(state)
    with applied_parameters(twin, params):
        result = task.run_episode(TwinWorld(twin, task.object_id), reset, lambda _o: action)
    return result.reward, result.success


def train_bandit_ppo(policy: MLPPolicy, task, twin, randomization: DomainRandomization | None,
                     config: PPOConfig | None = None, progress=None) -> PPOHistory:
    """Fine-tune ``policy`` on a one-shot ``task`` in ``twin`` (see the module docstring).
    ``progress(fraction[, batch success rate])`` is called before each episode and after each
    batch (it may raise to stop)."""
    cfg = config or PPOConfig()
    if not getattr(task, 'one_shot', False):
        raise ValueError(f'{task.name} is closed-loop; train_bandit_ppo handles one-shot tasks')
    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    value = nn.Sequential(nn.Linear(policy.obs_dim, 64), nn.Tanh(), nn.Linear(64, 1))
    opt_pi = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    opt_v = torch.optim.Adam(value.parameters(), lr=cfg.value_lr)
    hist = PPOHistory()
    for it in range(cfg.iterations):
        obs, z, rewards, wins = [], [], [], []
        for k in range(cfg.batch_size):
            if progress is not None:
                progress((it * cfg.batch_size + k) / (cfg.iterations * cfg.batch_size))
            reset = task.sample_reset(rng)
            o = task.observation(task.initial_state(reset))
            with torch.no_grad():
                dist = policy.distribution(torch.as_tensor(o, dtype=torch.float32)[None])
                zi = dist.sample()[0]
            action = policy.squash(zi).numpy().astype(float)
            params = randomization.sample(rng) if randomization else {}
            r, ok = episode_outcome(task, twin, reset, action, params)
            obs.append(o)
            z.append(zi.numpy())
            rewards.append(max(r, cfg.reward_floor))
            wins.append(ok)
        hist.episodes += cfg.batch_size
        hist.mean_reward.append(float(np.mean(rewards)))
        hist.success_rate.append(float(np.mean(wins)))
        if progress is not None:
            progress((it + 1) / cfg.iterations, hist.success_rate[-1])
        x = torch.as_tensor(np.array(obs), dtype=torch.float32)
        zt = torch.as_tensor(np.array(z), dtype=torch.float32)
        r = torch.as_tensor(rewards, dtype=torch.float32)
        xn = (x - policy.obs_mean) / policy.obs_std
        with torch.no_grad():
            old_logp = policy.distribution(x).log_prob(zt).sum(-1)
            adv = r - value(xn)[:, 0]
            adv = (adv - adv.mean()) / (adv.std() + 1e-6)
        policy.train()
        for _ in range(cfg.epochs):
            dist = policy.distribution(x)
            ratio = torch.exp(dist.log_prob(zt).sum(-1) - old_logp)
            surrogate = torch.min(ratio * adv, ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * adv)
            loss = -surrogate.mean() - cfg.entropy_coef * dist.entropy().sum(-1).mean()
            opt_pi.zero_grad()
            loss.backward()
            opt_pi.step()
            with torch.no_grad():
                policy.log_std.clamp_(min=cfg.min_log_std)
            v_loss = ((value(xn)[:, 0] - r) ** 2).mean()
            opt_v.zero_grad()
            v_loss.backward()
            opt_v.step()
        policy.eval()
    return hist
