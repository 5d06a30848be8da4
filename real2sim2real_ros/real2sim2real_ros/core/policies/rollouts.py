"""Closed-loop episodes in the twin, run by worker processes (ROS-free).

A closed-loop episode (push_to_pose) is tens of control ticks of Python-stepped physics, so
the learner's episodes (DAgger, PPO) and the twin evaluations of a closed-loop training run
go to ``workers`` processes forked from the trainer: each inherits its own copy of the task
and the twin, the policy travels to them as numpy arrays (:class:`PolicySnapshot`) and runs
in numpy (no torch in the workers). Every episode carries its own reset, twin parameters
(domain randomisation) and seed, so a batch's result does not depend on how many workers ran
it or in which order. ``workers=1`` (or a platform without ``fork``) runs in process.
"""
from __future__ import annotations

import itertools
import multiprocessing
import time
from dataclasses import dataclass, field

import numpy as np

from ..tasks.base import ResetSample
from ..tasks.worlds import TwinWorld
from .evaluate import EvaluationResult
from .policy import MLPPolicy

# Contexts (task, twin, world) by runner id: set in the parent before its pool forks, so the
# workers inherit them; the in-process path reads them too.
_CONTEXTS: dict[int, dict] = {}
_IDS = itertools.count()


@dataclass
class PolicySnapshot:
    """An MLPPolicy's weights as numpy arrays: the same deterministic mean (to float32
    rounding) and the same Gaussian exploration in the pre-squash space."""

    weights: list            # [(W (out, in), b (out,)), ...], tanh between layers
    obs_mean: np.ndarray
    obs_std: np.ndarray
    low: np.ndarray
    high: np.ndarray
    log_std: np.ndarray

    @classmethod
    def of(cls, policy: MLPPolicy) -> PolicySnapshot:
        """A numpy copy of ``policy``'s weights, normalisation and action bounds (for worker
        processes)."""
        linears = [m for m in policy.net if hasattr(m, 'weight')]
        as_np = lambda t: t.detach().cpu().numpy().astype(float)   # noqa: E731
        return cls([(as_np(m.weight), as_np(m.bias)) for m in linears],
                   as_np(policy.obs_mean), as_np(policy.obs_std), as_np(policy.action_low),
                   as_np(policy.action_high), as_np(policy.log_std))

    def mean_z(self, obs) -> np.ndarray:
        """Pre-squash mean action for observation ``obs`` (numpy forward pass)."""
        x = (np.asarray(obs, float) - self.obs_mean) / self.obs_std
        for W, b in self.weights[:-1]:
            x = np.tanh(W @ x + b)
        W, b = self.weights[-1]
        return W @ x + b

    def squash(self, z) -> np.ndarray:
        """Map pre-squash values ``z`` into the action bounds (tanh)."""
        return self.low + (self.high - self.low) * (np.tanh(z) + 1) / 2

    def sample_z(self, obs, rng: np.random.Generator | None, noise: float | None = None):
        """Pre-squash action: the mean (rng None or noise 0), a sample from the policy's own
        distribution (noise None) or the mean plus N(0, noise^2)."""
        z = self.mean_z(obs)
        if rng is None or noise == 0:
            return z
        std = np.exp(self.log_std) if noise is None else float(noise)
        return z + std * rng.standard_normal(z.shape)


@dataclass
class EpisodeJob:
    """One episode to run: where it starts, the twin's parameters, who acts.

    actor 'expert': the task's scripted demonstrator (per-episode speed gain from seed);
    'learner': the snapshot, with ``noise`` (see PolicySnapshot.sample_z) and, per tick with
    chance ``beta``, the expert instead (the DAgger mixture). ``label``: record the expert's
    action (task.expert_action) for every visited observation."""

    reset: ResetSample
    params: dict = field(default_factory=dict)
    seed: int = 0
    actor: str = 'learner'
    noise: float | None = 0.0
    beta: float = 0.0
    label: bool = False


@dataclass
class Episode:
    """One rollout: observations, executed actions, pre-squash samples, rewards and its outcome."""
    observations: np.ndarray      # (T, obs_dim)
    actions: np.ndarray           # (T, action_dim), as executed (clipped)
    z: np.ndarray                 # (T, action_dim) the learner's pre-squash samples (NaN: expert)
    rewards: np.ndarray           # (T,)
    labels: np.ndarray | None     # (T, action_dim) expert actions, when asked for
    final_observation: np.ndarray
    success: bool
    terminal: bool                # ended by success or a diverged twin (no bootstrap)
    final_error: float
    yaw_error: float

    @property
    def steps(self) -> int:
        """Number of steps in the episode."""
        return len(self.observations)


def _run_job(ctx: dict, job: EpisodeJob, snap: PolicySnapshot | None) -> Episode:
    task, twin, world = ctx['task'], ctx['twin'], ctx['world']
    rng = np.random.default_rng(job.seed)
    zs: list = []
    if job.actor == 'expert':
        expert = task.scripted_demo_policy(job.reset, rng)

        def policy(obs):
            zs.append(np.full(task.action_dim, np.nan))
            return expert(obs)
    else:
        gain = 1.0

        def policy(obs):
            if job.beta > 0 and rng.random() < job.beta:
                zs.append(np.full(task.action_dim, np.nan))
                return task.expert_action(obs, gain)
            z = snap.sample_z(obs, rng, job.noise)
            zs.append(z)
            return snap.squash(z)
    try:
        if job.params:
            twin.set_parameters(job.params)
        res = task.run_episode(world, job.reset, policy)
    finally:
        twin.restore(ctx['pristine'])
    n = len(res.observations)
    labels = None
    if job.label:
        labels = np.array([task.expert_action(o) for o in res.observations]).reshape(
            n, task.action_dim)
    info = res.info
    rewards = np.asarray(info.get('rewards', [res.reward] + [0.0] * (n - 1)), float)[:n]
    final_obs = np.asarray(info.get('final_observation', res.observations[-1] if n else
                                    np.zeros(task.observation_dim)), float)
    return Episode(res.observations, res.actions, np.array(zs[:n]).reshape(n, task.action_dim),
                   rewards, labels, final_obs, bool(res.success),
                   bool(res.success or info.get('unstable', False)), float(res.final_error),
                   float(info.get('yaw_error', np.nan)))


def _run_chunk(args) -> tuple[list[Episode], float]:
    key, snap, jobs = args
    t = time.process_time()
    ctx = _CONTEXTS[key]
    return [_run_job(ctx, j, snap) for j in jobs], time.process_time() - t


class EpisodeRunner:
    """Runs EpisodeJobs on a task in a twin, in ``workers`` forked processes (context
    manager: the pool is closed on exit). ``worker_cpu_seconds``: CPU time spent in them."""

    def __init__(self, task, twin, workers: int = 2, chunk: int = 4):
        self.key = next(_IDS)
        _CONTEXTS[self.key] = {'task': task, 'twin': twin, 'pristine': twin.snapshot(),
                               'world': TwinWorld(twin, task.object_id)}
        self.task, self.chunk = task, max(1, int(chunk))
        self.worker_cpu_seconds = 0.0
        self.pool = None
        # A daemonic process (a worker of another pool, e.g. the evaluation harness's cells)
        # may not have children: run in process there.
        if workers > 1 and 'fork' in multiprocessing.get_all_start_methods() and \
                not multiprocessing.current_process().daemon:
            try:
                self.pool = multiprocessing.get_context('fork').Pool(int(workers))
            except (OSError, AssertionError):
                self.pool = None
        self.workers = int(workers) if self.pool is not None else 1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Stop the worker pool (a no-op when there is none)."""
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None
        _CONTEXTS.pop(self.key, None)

    def run(self, jobs: list[EpisodeJob], policy: MLPPolicy | PolicySnapshot | None = None,
            progress=None) -> list[Episode]:
        """The episodes of ``jobs`` (in order). ``progress(fraction)`` after each chunk (it may
        raise to stop)."""
        snap = PolicySnapshot.of(policy) if isinstance(policy, MLPPolicy) else policy
        chunks = [(self.key, snap, jobs[i:i + self.chunk])
                  for i in range(0, len(jobs), self.chunk)]
        out: list[Episode] = []
        results = (self.pool.imap(_run_chunk, chunks) if self.pool is not None
                   else map(_run_chunk, chunks))
        for episodes, cpu in results:
            out.extend(episodes)
            if self.pool is not None:
                self.worker_cpu_seconds += cpu
            if progress is not None:
                progress(len(out) / max(len(jobs), 1))
        return out

    def evaluate(self, policy, n_trials: int, seed: int, progress=None) -> EvaluationResult:
        """Deterministic policy on ``n_trials`` resets drawn as core/policies/evaluate does
        (``task.sample_reset`` from ``default_rng(seed)``): the same episodes, in parallel."""
        if n_trials < 1:
            raise ValueError(f'n_trials must be >= 1, got {n_trials}')
        rng = np.random.default_rng(seed)
        jobs = [EpisodeJob(self.task.sample_reset(rng), noise=0.0) for _ in range(n_trials)]
        eps = self.run(jobs, policy, progress=None if progress is None else
                       (lambda f: progress(f, None)))
        ok = sum(e.success for e in eps)
        errors = [e.final_error for e in eps]
        result = EvaluationResult(self.task.name, 'twin', n_trials, ok, ok / n_trials,
                                  float(np.mean(errors)), errors)
        if progress is not None:
            progress(1.0, result.success_rate)
        return result
