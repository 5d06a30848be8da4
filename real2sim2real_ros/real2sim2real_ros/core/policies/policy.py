"""A small Gaussian MLP policy with input normalisation and bounded actions, and its checkpoint.

The checkpoint is a directory with ``policy.pt`` (the torch state_dict) and ``policy.json``
(architecture, normalisation, action bounds, the task's config and free-form metadata). It
loads with this module alone (torch + numpy): no trainer, no task code, no ROS.

Actions: ``low + (high - low) * (tanh(mlp(x)) + 1) / 2`` for the mean, so a policy can never
command outside the task's action box; exploration noise is Gaussian in the pre-squash space
with a learned per-dimension log std.
"""
from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import numpy as np
import torch
from torch import nn

CHECKPOINT_FORMAT = 'real2sim2real_ros/mlp_policy/1'
WEIGHTS_FILE = 'policy.pt'
CONFIG_FILE = 'policy.json'


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete or of another format (message names the file)."""


class MLPPolicy(nn.Module):
    """Gaussian MLP policy: normalised observation -> tanh-squashed action in [action_low,
    action_high]."""
    def __init__(self, obs_dim: int, action_low, action_high, hidden=(64, 64),
                 init_log_std: float = -1.0):
        super().__init__()
        low = torch.as_tensor(np.asarray(action_low, float), dtype=torch.float32).reshape(-1)
        high = torch.as_tensor(np.asarray(action_high, float), dtype=torch.float32).reshape(-1)
        if low.shape != high.shape or not bool(torch.all(high > low)):
            raise ValueError(f'action bounds must satisfy low < high, got {low} / {high}')
        if obs_dim < 1:
            raise ValueError(f'obs_dim must be >= 1, got {obs_dim}')
        self.obs_dim, self.action_dim, self.hidden = int(obs_dim), int(low.numel()), tuple(hidden)
        layers, width = [], self.obs_dim
        for h in self.hidden:
            layers += [nn.Linear(width, h), nn.Tanh()]
            width = h
        layers.append(nn.Linear(width, self.action_dim))
        self.net = nn.Sequential(*layers)
        self.log_std = nn.Parameter(torch.full((self.action_dim,), float(init_log_std)))
        self.register_buffer('obs_mean', torch.zeros(self.obs_dim))
        self.register_buffer('obs_std', torch.ones(self.obs_dim))
        self.register_buffer('action_low', low)
        self.register_buffer('action_high', high)

    # ---------------------------------------------------------------- normalisation
    def fit_normalisation(self, observations) -> None:
        """Set the observation normalisation from the mean and std of ``observations``."""
        obs = torch.as_tensor(np.asarray(observations, float), dtype=torch.float32)
        self.obs_mean.copy_(obs.mean(0))
        self.obs_std.copy_(obs.std(0).clamp_min(1e-3) if len(obs) > 1 else torch.ones(
            self.obs_dim))

    def squash(self, z: torch.Tensor) -> torch.Tensor:
        """Map pre-squash values ``z`` into [action_low, action_high] (tanh)."""
        return self.action_low + (self.action_high - self.action_low) * (torch.tanh(z) + 1) / 2

    def unsquash(self, action: torch.Tensor) -> torch.Tensor:
        """The pre-squash value of an action (clipped just inside the bounds)."""
        u = 2 * (action - self.action_low) / (self.action_high - self.action_low) - 1
        return torch.atanh(u.clamp(-0.999, 0.999))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Pre-squash mean for observations (batch, obs_dim)."""
        return self.net((obs - self.obs_mean) / self.obs_std)

    def distribution(self, obs: torch.Tensor) -> torch.distributions.Normal:
        """Pre-squash action distribution (Normal) for the observations ``obs``."""
        return torch.distributions.Normal(self(obs), self.log_std.exp())

    # ---------------------------------------------------------------- acting
    def act(self, observation, rng: np.random.Generator | None = None) -> np.ndarray:
        """The action for one observation: the mean, or a sample when ``rng`` is given."""
        obs = torch.as_tensor(np.asarray(observation, float), dtype=torch.float32).reshape(
            1, self.obs_dim)
        with torch.no_grad():
            z = self(obs)[0]
            if rng is not None:
                z = z + self.log_std.exp() * torch.as_tensor(
                    rng.standard_normal(self.action_dim), dtype=torch.float32)
            return self.squash(z).numpy().astype(float)

    def as_function(self, rng: np.random.Generator | None = None):
        """observation -> action, for a task's run_episode."""
        return lambda obs: self.act(obs, rng)

    def architecture(self) -> dict:
        """The network's shape and action bounds, as stored in a checkpoint."""
        return {'obs_dim': self.obs_dim, 'action_dim': self.action_dim,
                'hidden': list(self.hidden),
                'action_low': self.action_low.tolist(), 'action_high': self.action_high.tolist()}


def save_checkpoint(policy: MLPPolicy, directory, task_config: dict | None = None,
                    metadata: dict | None = None) -> Path:
    """Write ``policy.pt`` + ``policy.json`` into ``directory`` (created); returns it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    torch.save(policy.state_dict(), directory / (WEIGHTS_FILE + '.tmp'))
    (directory / (WEIGHTS_FILE + '.tmp')).replace(directory / WEIGHTS_FILE)
    config = {'format': CHECKPOINT_FORMAT, 'architecture': policy.architecture(),
              'task': _jsonable(task_config or {}), 'metadata': _jsonable(metadata or {})}
    tmp = directory / (CONFIG_FILE + '.tmp')
    tmp.write_text(json.dumps(config, indent=2))
    tmp.replace(directory / CONFIG_FILE)
    return directory


def load_checkpoint(directory) -> tuple[MLPPolicy, dict]:
    """(policy in eval mode, the JSON config) from a checkpoint directory."""
    directory = Path(directory)
    cfg_path, w_path = directory / CONFIG_FILE, directory / WEIGHTS_FILE
    for p in (cfg_path, w_path):
        if not p.is_file():
            raise CheckpointError(f'checkpoint {directory}: {p.name} is missing')
    try:
        config = json.loads(cfg_path.read_text())
    except UnicodeDecodeError:
        raise CheckpointError(f'{cfg_path}: not a text (JSON) file') from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(f'{cfg_path}: not valid JSON: {exc}') from None
    if not isinstance(config, dict):
        raise CheckpointError(f'{cfg_path}: must be a JSON object, not {type(config).__name__}')
    if config.get('format') != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{cfg_path}: format {config.get('format')!r} is not "
                              f'{CHECKPOINT_FORMAT!r}')
    a = config.get('architecture', {})
    try:
        policy = MLPPolicy(a['obs_dim'], a['action_low'], a['action_high'], a['hidden'])
        state = torch.load(w_path, map_location='cpu', weights_only=True)
        policy.load_state_dict(state)
    except (KeyError, TypeError, RuntimeError, ValueError, EOFError, OSError,
            pickle.UnpicklingError) as exc:
        raise CheckpointError(f'checkpoint {directory}: cannot restore the policy from '
                              f'{w_path.name}: {str(exc).splitlines()[0] if str(exc) else exc!r}'
                              ) from None
    policy.eval()
    return policy, config


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else str(value)
    if isinstance(value, np.integer):
        return int(value)
    return value
