"""Domain randomisation around identified parameters: ranges from their 95% intervals.

Each identified parameter is drawn uniformly from ``value +- widen * half_width`` of its
95% interval (at least ``min_relative`` of the value, so a too-confident fit still gets some
spread); parameters that were not identified are left at the twin's value unless
``include_unidentified``. Draws are clipped to stay physical (>= 0, masses > 0).
"""
from __future__ import annotations

import numpy as np

from ..parameters import ParameterSet


class DomainRandomization:
    """Uniform ranges per twin parameter, from identified intervals widened by ``widen``."""
    def __init__(self, parameters: ParameterSet | None, widen: float = 1.0,
                 min_relative: float = 0.0, include_unidentified: bool = False,
                 names=None):
        self.ranges: dict[str, tuple[float, float]] = {}
        if widen < 0 or min_relative < 0:
            raise ValueError('widen and min_relative must be >= 0')
        for est in (parameters or ParameterSet()):
            if names is not None and est.name not in names:
                continue
            if not (est.identified or include_unidentified):
                continue
            half = max(widen * est.half_width, min_relative * abs(est.value))
            lo, hi = est.value - half, est.value + half
            if est.name.endswith('/mass'):
                lo = max(lo, 1e-3)
            elif not est.name.split('/')[-1].startswith('com_offset'):
                lo = max(lo, 0.0)
            self.ranges[est.name] = (lo, max(hi, lo))

    def sample(self, rng: np.random.Generator) -> dict[str, float]:
        """Parameter name -> a value drawn uniformly from its range."""
        return {n: float(rng.uniform(lo, hi)) for n, (lo, hi) in self.ranges.items()}

    def nominal(self) -> dict[str, float]:
        """Parameter name -> the midpoint of its range."""
        return {n: 0.5 * (lo + hi) for n, (lo, hi) in self.ranges.items()}

    def describe(self) -> dict:
        """Parameter name -> [low, high]."""
        return {n: [lo, hi] for n, (lo, hi) in self.ranges.items()}
