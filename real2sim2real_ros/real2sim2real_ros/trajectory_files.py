"""Joint trajectories as YAML files, for operators and tests.

    joint_names: [shoulder_pan_joint, ...]
    points:
      - {t: 0.0, q: [0, -1.2, 1.5, ...]}
      - {t: 2.0, q: [...]}
"""
from __future__ import annotations

from pathlib import Path

import yaml


def load_trajectory_file(path: str | Path) -> tuple[list[str], list[tuple[float, list[float]]]]:
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict) or 'joint_names' not in data or 'points' not in data:
        raise ValueError(f'{path}: needs keys joint_names and points')
    names = [str(n) for n in data['joint_names']]
    points = []
    for i, p in enumerate(data['points']):
        try:
            t, q = float(p['t']), [float(v) for v in p['q']]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f'{path}: points[{i}] needs t (s) and q (list of rad): {exc}') from None
        if len(q) != len(names):
            raise ValueError(f'{path}: points[{i}].q has {len(q)} values for {len(names)} joints')
        points.append((t, q))
    return names, points
