"""Joint trajectories as YAML files, for operators and tests.

    joint_names: [shoulder_pan_joint, ...]
    points:
      - {t: 0.0, q: [0, -1.2, 1.5, ...]}
      - {t: 2.0, q: [...]}
"""
from __future__ import annotations

import math
from pathlib import Path

import yaml

from .execution_safety import MAX_TRAJECTORY_POINTS


def load_trajectory_file(path: str | Path) -> tuple[list[str], list[tuple[float, list[float]]]]:
    """(joint names, [(t, q), ...]) from a trajectory YAML. OSError when the file cannot be
    read, ValueError (one line naming the file and what is wrong) for anything else: not YAML,
    not text, missing keys, non-numeric or non-finite values, wrong lengths, more than
    MAX_TRAJECTORY_POINTS points."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f'{path}: is a directory, not a trajectory YAML file')
    try:
        data = yaml.safe_load(path.read_text())
    except UnicodeDecodeError:
        raise ValueError(f'{path}: not a text (YAML) file') from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, 'problem_mark', None)
        where = f' at line {mark.line + 1}, column {mark.column + 1}' if mark else ''
        problem = getattr(exc, 'problem', None) or type(exc).__name__
        raise ValueError(f'{path}: malformed YAML{where}: {problem}') from None
    if not isinstance(data, dict) or 'joint_names' not in data or 'points' not in data:
        raise ValueError(f'{path}: needs keys joint_names and points')
    if not isinstance(data['joint_names'], list) or not isinstance(data['points'], list):
        raise ValueError(f'{path}: joint_names and points must be lists')
    names = [str(n) for n in data['joint_names']]
    if len(data['points']) > MAX_TRAJECTORY_POINTS:
        raise ValueError(f'{path}: {len(data["points"])} points is more than the '
                         f'{MAX_TRAJECTORY_POINTS} allowed')
    points = []
    for i, p in enumerate(data['points']):
        try:
            t, q = float(p['t']), [float(v) for v in p['q']]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f'{path}: points[{i}] needs t (s) and q (list of rad): {exc}') from None
        if len(q) != len(names):
            raise ValueError(f'{path}: points[{i}].q has {len(q)} values for {len(names)} joints')
        if not math.isfinite(t) or not all(math.isfinite(v) for v in q):
            raise ValueError(f'{path}: points[{i}] holds a NaN or infinite value')
        points.append((t, q))
    return names, points
