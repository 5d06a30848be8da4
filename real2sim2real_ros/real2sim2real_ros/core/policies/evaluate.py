"""Success rate of a policy on a backend (a twin or an emulated cell) over a task's resets.

The resets come from ``task.sample_reset`` with a fixed seed, so a twin evaluation and a
cell evaluation with the same seed see the same episodes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class EvaluationResult:
    """An evaluation's figures: task, backend, trials, successes and rate, the final errors
    (m), and each episode's reset and result (not in :meth:`to_dict`)."""
    task: str
    backend: str
    n_trials: int
    successes: int
    success_rate: float
    mean_error: float          # m, mean final distance to the goal
    errors: list = field(default_factory=list)
    episodes: list = field(default_factory=list, repr=False)   # (reset, EpisodeResult)

    def to_dict(self) -> dict:
        """The result as a JSON-ready dict."""
        return {'task': self.task, 'backend': self.backend, 'n_trials': self.n_trials,
                'successes': self.successes, 'success_rate': self.success_rate,
                'mean_error': self.mean_error, 'errors': [float(e) for e in self.errors]}


def evaluate(task, world, policy, n_trials: int = 20, seed: int = 0,
             progress=None) -> EvaluationResult:
    """Run ``n_trials`` episodes of ``policy`` (observation -> action) on ``world``.
    ``progress(fraction, success rate so far)`` after each trial (it may raise to stop)."""
    if n_trials < 1:
        raise ValueError(f'n_trials must be >= 1, got {n_trials}')
    rng = np.random.default_rng(seed)
    ok, errors, episodes = 0, [], []
    for i in range(n_trials):
        reset = task.sample_reset(rng)
        result = task.run_episode(world, reset, policy)
        ok += int(result.success)
        errors.append(result.final_error)
        episodes.append((reset, result))
        if progress is not None:
            progress((i + 1) / n_trials, ok / (i + 1))
    return EvaluationResult(task.name, getattr(world, 'kind', type(world).__name__), n_trials,
                            ok, ok / n_trials, float(np.mean(errors)), errors, episodes)
