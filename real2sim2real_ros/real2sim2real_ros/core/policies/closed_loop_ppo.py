"""Multi-step PPO for closed-loop tasks (ROS-free, torch): fine-tunes an imitation policy on
whole episodes in the twin, every episode with its own domain-randomised parameters.

Per iteration: ``episodes`` episodes of the stochastic policy (Gaussian in the pre-squash
space, :class:`~.policy.MLPPolicy`), run by the EpisodeRunner's workers; advantages by GAE
(Schulman et al., 2016) from a separate value network, bootstrapping from the value of the
last state when the step cap cut an episode short (not when it ended by success); then
``epochs`` passes of minibatch Adam on the clipped surrogate (Schulman et al., 2017),
stopped early when the approximate KL to the batch's policy passes ``target_kl``. The value
network fits the returns (scaled by the first batch's return spread) and is warmed up on the
first batch before the policy moves: fine-tuning a good imitation policy against an untrained
critic's advantages would first undo it.

The policy stays an MLPPolicy, so its checkpoint loads with core/policies/policy.py alone.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .policy import MLPPolicy
from .ppo import PPOHistory
from .rollouts import Episode, EpisodeJob, EpisodeRunner


@dataclass
class ClosedLoopPPOConfig:
    """Multi-step PPO settings: iterations, episodes and epochs per batch, learning
    rates, discount."""
    iterations: int = 12
    episodes: int = 32              # per iteration
    epochs: int = 8                 # passes over each batch
    minibatch: int = 256
    gamma: float = 0.98
    lam: float = 0.95
    clip: float = 0.2
    lr: float = 1e-4
    value_lr: float = 1e-3
    value_hidden: tuple = (128, 128)
    value_warmup_epochs: int = 40   # critic-only passes over the first batch
    entropy_coef: float = 0.0
    init_log_std: float = -1.6      # exploration at the start (pre-squash std ~0.2)
    min_log_std: float = -3.0
    target_kl: float = 0.02
    max_grad_norm: float = 0.5
    seed: int = 0


# ------------------------------------------------------------------------ PPO step math
def gae(rewards, values, last_value: float, terminal: bool, gamma: float,
        lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(advantages, returns) of one episode by generalised advantage estimation.

    rewards[t], values[t] = V(s_t) for t < T; ``last_value`` = V(s_T), used unless the
    episode ended in a terminal state (success: nothing follows). returns = advantages +
    values (the critic's targets)."""
    r = np.asarray(rewards, float)
    v = np.asarray(values, float)
    T = len(r)
    next_v = np.append(v[1:], 0.0 if terminal else float(last_value))
    delta = r + gamma * next_v - v
    adv = np.zeros(T)
    acc = 0.0
    for t in range(T - 1, -1, -1):
        acc = delta[t] + gamma * lam * acc
        adv[t] = acc
    return adv, adv + v


def clipped_surrogate(logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor,
                      clip: float) -> torch.Tensor:
    """PPO's loss: -mean(min(ratio A, clip(ratio, 1 - clip, 1 + clip) A)),
    ratio = exp(logp_new - logp_old)."""
    ratio = torch.exp(logp_new - logp_old)
    return -torch.min(ratio * advantages,
                      ratio.clamp(1.0 - clip, 1.0 + clip) * advantages).mean()


def _value_net(obs_dim: int, hidden) -> nn.Module:
    layers, width = [], obs_dim
    for h in hidden:
        layers += [nn.Linear(width, h), nn.Tanh()]
        width = h
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


def _batch(episodes: list[Episode], policy: MLPPolicy, value: nn.Module, cfg, scale: float):
    obs = np.concatenate([e.observations for e in episodes])
    z = np.concatenate([e.z for e in episodes])
    x = torch.as_tensor(obs, dtype=torch.float32)
    finals = torch.as_tensor(np.array([e.final_observation for e in episodes]),
                             dtype=torch.float32)
    with torch.no_grad():
        v = value((x - policy.obs_mean) / policy.obs_std)[:, 0].numpy() * scale
        v_last = value((finals - policy.obs_mean) / policy.obs_std)[:, 0].numpy() * scale
    adv, ret, i = [], [], 0
    for k, e in enumerate(episodes):
        a, r = gae(e.rewards, v[i:i + e.steps], v_last[k], e.terminal, cfg.gamma, cfg.lam)
        adv.append(a)
        ret.append(r)
        i += e.steps
    return x, torch.as_tensor(z, dtype=torch.float32), \
        torch.as_tensor(np.concatenate(adv), dtype=torch.float32), \
        torch.as_tensor(np.concatenate(ret), dtype=torch.float32)


def train_closed_loop_ppo(policy: MLPPolicy, task, runner: EpisodeRunner, randomization=None,
                          config: ClosedLoopPPOConfig | None = None,
                          progress=None) -> PPOHistory:
    """Fine-tune ``policy`` on closed-loop ``task`` episodes in the runner's twin (see the
    module docstring). ``progress(fraction[, batch success rate])`` (it may raise to stop).
    Returns the per-iteration mean episode return and success rate of the batches."""
    cfg = config or ClosedLoopPPOConfig()
    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    value = _value_net(policy.obs_dim, cfg.value_hidden)
    with torch.no_grad():
        policy.log_std.fill_(cfg.init_log_std)
    opt_pi = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    opt_v = torch.optim.Adam(value.parameters(), lr=cfg.value_lr)
    hist = PPOHistory()
    scale = None
    n_it = max(cfg.iterations, 1)
    for it in range(cfg.iterations):
        jobs = [EpisodeJob(task.sample_reset(rng),
                           randomization.sample(rng) if randomization is not None else {},
                           int(rng.integers(2 ** 31)), actor='learner', noise=None)
                for _ in range(cfg.episodes)]
        base = it / n_it
        episodes = [e for e in runner.run(
            jobs, policy, progress=None if progress is None else
            (lambda f, b=base: progress(b + 0.8 * f / n_it))) if e.steps]
        hist.episodes += len(jobs)
        hist.mean_reward.append(float(np.mean([e.rewards.sum() for e in episodes])))
        hist.success_rate.append(float(np.mean([e.success for e in episodes])))
        if not episodes:
            continue
        if scale is None:   # the critic learns returns in units of the first batch's spread
            raw = np.concatenate([np.cumsum(e.rewards[::-1])[::-1] for e in episodes])
            scale = float(max(np.std(raw), 1e-3))
        x, z, adv, ret = _batch(episodes, policy, value, cfg, scale)
        xn = (x - policy.obs_mean) / policy.obs_std
        if it == 0:
            for _ in range(cfg.value_warmup_epochs):
                _fit_value(value, opt_v, xn, ret / scale, cfg.minibatch)
            x, z, adv, ret = _batch(episodes, policy, value, cfg, scale)
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        with torch.no_grad():
            logp_old = policy.distribution(x).log_prob(z).sum(-1)
        policy.train()
        for _ in range(cfg.epochs):
            perm = torch.randperm(len(x))
            for i in range(0, len(x), cfg.minibatch):
                idx = perm[i:i + cfg.minibatch]
                dist = policy.distribution(x[idx])
                logp = dist.log_prob(z[idx]).sum(-1)
                loss = clipped_surrogate(logp, logp_old[idx], adv[idx], cfg.clip)
                if cfg.entropy_coef:
                    loss = loss - cfg.entropy_coef * dist.entropy().sum(-1).mean()
                opt_pi.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
                opt_pi.step()
                with torch.no_grad():
                    policy.log_std.clamp_(min=cfg.min_log_std)
            _fit_value(value, opt_v, xn, ret / scale, cfg.minibatch)
            with torch.no_grad():
                log_ratio = policy.distribution(x).log_prob(z).sum(-1) - logp_old
                kl = float(((log_ratio.exp() - 1) - log_ratio).mean())
            if kl > cfg.target_kl:
                break
        policy.eval()
        if progress is not None:
            progress((it + 1) / n_it, hist.success_rate[-1])
    return hist


def _fit_value(value: nn.Module, opt: torch.optim.Optimizer, xn: torch.Tensor,
               target: torch.Tensor, minibatch: int) -> None:
    perm = torch.randperm(len(xn))
    for i in range(0, len(xn), minibatch):
        idx = perm[i:i + minibatch]
        loss = ((value(xn[idx])[:, 0] - target[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
