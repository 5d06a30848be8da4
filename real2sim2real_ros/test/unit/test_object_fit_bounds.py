"""The object fit's pinned-estimate rule (core/sysid/object_fit.at_bound): an estimate the
search left at a bound is not identified, whatever its interval; estimates near but inside a
bound (a light object, a slippery one) stay eligible."""
import pytest

from real2sim2real_ros.core.parameters import ParameterSpec
from real2sim2real_ros.core.sysid.object_fit import BOUND_TOLERANCE, at_bound

FRICTION = ParameterSpec('geom/box_0/friction', 0.5, 0.2, 1.0, '1')
MASS = ParameterSpec('body/box_0/mass', 0.2, 0.02, 2.0, 'kg')
OFFSET = ParameterSpec('body/box_0/com_offset_x', 0.0, -0.015, 0.015, 'm')


@pytest.mark.parametrize('spec, value, pinned', [
    # The loaded live run's cylinder: 0.999 [0.761, 1.000] for a truth of 0.45.
    (FRICTION, 0.9990348033547659, True),
    (FRICTION, 1.0, True),
    (FRICTION, 0.2, True),
    (FRICTION, 0.2 * (1 + BOUND_TOLERANCE), True),
    (FRICTION, 0.98, False),
    (FRICTION, 0.21, False),
    (FRICTION, 0.45, False),
    # A 30 g object (the drawn cells' lightest) is not pinned at the 20 g bound.
    (MASS, 0.03, False),
    (MASS, 0.0201, True),
    (MASS, 1.5, False),
    (MASS, 1.99, True),
    # Offsets straddle zero: the tolerance is 1% of the width (0.3 mm).
    (OFFSET, 0.0, False),
    (OFFSET, 0.0146, False),
    (OFFSET, 0.0148, True),
    (OFFSET, -0.015, True),
])
def test_at_bound(spec, value, pinned):
    assert at_bound(spec, value) is pinned
