"""DAgger for closed-loop tasks (ROS-free): the task's scripted expert labels the states the
learner itself visits, and behaviour cloning refits on the aggregate.

Plain behaviour cloning only sees the expert's own states; a cloned policy drifts off them
(a few mm of lateral error, a kick the expert would have taken out) into states nobody showed
it what to do in, and its errors compound over tens of ticks. DAgger (Ross et al., 2011) rolls
the current policy out (per tick, with chance ``beta``, the expert acts instead; ``beta``
halves every round), asks the expert (``task.expert_action``: a function of the observation
alone) what it would have done in every visited state, adds those labels to the data set and
refits. Rollouts run in the twin with domain randomisation and the task's kicks.

Measured on push_to_pose (twin, 24-30 fixed episodes): from the same 8 demonstrations, three
rounds of 8 learner episodes lifted BC's 0.38-0.54 success to 0.67-0.71 (seeds 0-2). At an
equal number of EPISODES, though, plain BC on that many expert demonstrations did as well or
better (120 expert episodes: 0.97-1.0; 20 + 5 x 20 DAgger: 0.83-0.93): the expert is cheap
here and its own episodes already include recoveries from kicks; the learner's episodes add
states near the expert's sharp decisions (which leg, back off or push) that a small MLP
blurs. The training pipeline therefore starts DAgger from plenty of demonstrations.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .policy import MLPPolicy
from .rollouts import Episode, EpisodeJob, EpisodeRunner


@dataclass
class DaggerConfig:
    """DAgger settings: rounds, learner episodes per round, expert share beta and
    exploration noise."""
    rounds: int = 6
    episodes: int = 40            # learner episodes per round
    beta: float = 0.5             # expert share of the first round's ticks; halves each round
    noise: float = 0.3            # pre-squash exploration std in every other learner episode
    expert_share: float = 0.0     # fraction of each round's episodes the expert runs alone
    initial_updates: int = 2000   # minibatch BC steps on the expert demonstrations
    updates: int = 1000           # minibatch BC steps on the aggregate, per round
    batch_size: int = 256
    lr: float = 2e-3
    episode_weights: bool = True  # every episode weighs the same in the fit (a long failing
    #                                episode would otherwise outweigh two successes)
    stall_distance: float = 0.002  # learner ticks that moved the observation less than this
    #                                since the last kept one add no new sample (a stalled
    #                                learner would otherwise flood the aggregate with one state)


@dataclass
class DaggerHistory:
    """Per-round DAgger figures: learner success rate, aggregate size, BC loss, and episodes run."""
    learner_success: list = field(default_factory=list)   # per round, the rollouts' rate
    samples: list = field(default_factory=list)           # aggregate size after each round
    bc_loss: list = field(default_factory=list)
    episodes: int = 0


def fit_bc(policy: MLPPolicy, observations, labels, updates: int, batch_size: int = 256,
           lr: float = 2e-3, seed: int = 0, progress=None, weights=None) -> float:
    """Behaviour cloning of the policy's mean action onto ``labels`` (MSE in units of the
    action range): ``updates`` Adam steps on minibatches drawn uniformly, from the policy's
    current weights and normalisation. Returns the final loss over all samples.
    ``progress(fraction)`` every 100 steps. ``weights``: sampling weights per sample
    (default uniform)."""
    x = torch.as_tensor(np.asarray(observations, float), dtype=torch.float32)
    y = torch.as_tensor(np.asarray(labels, float), dtype=torch.float32)
    if len(x) == 0:
        raise ValueError('behaviour cloning needs at least one labelled observation')
    span = policy.action_high - policy.action_low
    w = None if weights is None else torch.as_tensor(np.asarray(weights, float),
                                                      dtype=torch.float32)
    gen = torch.Generator().manual_seed(int(seed))
    opt = torch.optim.Adam(policy.net.parameters(), lr=lr)
    policy.train()
    for k in range(updates):
        if progress is not None and k % 100 == 0:
            progress(k / max(updates, 1))
        if w is None:
            idx = torch.randint(len(x), (min(batch_size, len(x)),), generator=gen)
        else:
            idx = torch.multinomial(w, min(batch_size, len(x)), replacement=True, generator=gen)
        loss = (((policy.squash(policy(x[idx])) - y[idx]) / span) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    policy.eval()
    with torch.no_grad():
        return float((((policy.squash(policy(x)) - y) / span) ** 2).mean())


def _moving(observations: np.ndarray, distance: float) -> np.ndarray:
    """Mask of the observations at least ``distance`` (Euclidean, observation units) from
    the last kept one (the first is kept)."""
    keep = np.zeros(len(observations), bool)
    last = None
    for i, o in enumerate(observations):
        if last is None or np.linalg.norm(o - last) >= distance:
            keep[i] = True
            last = o
    return keep


def expert_jobs(task, n: int, rng: np.random.Generator, randomization=None) -> list[EpisodeJob]:
    """``n`` expert episode jobs with resets (and randomised parameters) drawn from ``rng``."""
    return [EpisodeJob(task.sample_reset(rng),
                       randomization.sample(rng) if randomization is not None else {},
                       int(rng.integers(2 ** 31)), actor='expert', label=True)
            for _ in range(n)]


def dagger(policy: MLPPolicy, task, runner: EpisodeRunner, demos: list[Episode],
           config: DaggerConfig | None = None, randomization=None, seed: int = 0,
           progress=None) -> tuple[list[np.ndarray], list[np.ndarray], DaggerHistory]:
    """Fit ``policy`` to the expert-labelled ``demos`` (episodes with labels), then run
    ``config.rounds`` DAgger rounds. Returns (observations, labels, history): the aggregate
    (lists of per-episode arrays). ``progress(fraction[, learner success])`` (it may raise
    to stop)."""
    cfg = config or DaggerConfig()
    rng = np.random.default_rng(seed)
    obs = [e.observations for e in demos if e.steps]
    lab = [e.labels for e in demos if e.steps]
    hist = DaggerHistory()
    # Work units: an episode ~ 1, 100 BC steps ~ 1.
    fit_cost = [cfg.initial_updates / 100] + [cfg.updates / 100] * cfg.rounds
    total = sum(fit_cost) + cfg.rounds * cfg.episodes
    done = [0.0]

    def tick(units):
        def f(frac, *_):
            if progress is not None:
                progress((done[0] + frac * units) / total)
        return f

    def finish(units, success=None):
        done[0] += units
        if progress is not None:
            progress(done[0] / total, *(() if success is None else (success,)))

    policy.fit_normalisation(np.concatenate(obs))
    hist.bc_loss.append(fit_bc(policy, np.concatenate(obs), np.concatenate(lab),
                               cfg.initial_updates, cfg.batch_size, cfg.lr, seed,
                               tick(fit_cost[0])))
    finish(fit_cost[0])
    for k in range(cfg.rounds):
        beta = cfg.beta * 0.5 ** k
        jobs = []
        n_expert = int(round(cfg.expert_share * cfg.episodes))
        for i in range(cfg.episodes):
            jobs.append(EpisodeJob(
                task.sample_reset(rng),
                randomization.sample(rng) if randomization is not None else {},
                int(rng.integers(2 ** 31)), actor='expert' if i < n_expert else 'learner',
                noise=cfg.noise if i % 2 else 0.0, beta=beta, label=True))
        eps = runner.run(jobs, policy, progress=tick(cfg.episodes))
        finish(cfg.episodes)
        hist.episodes += len(eps)
        hist.learner_success.append(float(np.mean([e.success for e in eps])))
        for e in eps:
            keep = _moving(e.observations, cfg.stall_distance)
            if keep.any():
                obs.append(e.observations[keep])
                lab.append(e.labels[keep])
        x, y = np.concatenate(obs), np.concatenate(lab)
        w = np.concatenate([np.full(len(o), 1.0 / len(o)) for o in obs]) \
            if cfg.episode_weights else None
        hist.samples.append(len(x))
        hist.bc_loss.append(fit_bc(policy, x, y, cfg.updates, cfg.batch_size, cfg.lr,
                                   seed + k + 1, tick(fit_cost[k + 1]), w))
        finish(fit_cost[k + 1], hist.learner_success[-1])
    return obs, lab, hist
