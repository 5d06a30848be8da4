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


def test_strikes_plan_on_the_capped_range_while_the_fit_may_leave_it():
    """StrikeConfig.plan_friction_upper: the strikes are planned on the fit's friction range
    with its upper bound capped (a wider fit bound must not make every object tall at the
    first strike); a fit that leaves the capped range unidentified raises the plan's upper
    bound to its value; an identified fit plans on its interval. Off (0), the fit's bounds."""
    from types import SimpleNamespace

    from real2sim2real_ros.core.parameters import ParameterEstimate, ParameterSet
    from real2sim2real_ros.core.sysid.object_probes import StrikeConfig
    from real2sim2real_ros.core.sysid.stage import _friction_update, _StrikeRounds
    wide = ParameterSpec('geom/box_0/friction', 0.5, 0.2, 1.5, '1')

    def priors(cfg):
        return _StrikeRounds(None, None, None, [wide], cfg, *([None] * 10)).priors
    assert priors(StrikeConfig())['box_0'] == (0.2, 0.5, 1.5)
    capped = priors(StrikeConfig.from_dict({'plan_friction_upper': 1.0}))
    assert capped['box_0'] == (0.2, 0.5, 1.0)

    def planned(value, lo, hi, identified):
        estimates = ParameterSet()
        estimates.add(ParameterEstimate(wide.name, value, lo, hi, 0.5, '1', identified))
        fit = SimpleNamespace(parameters=estimates)
        friction = dict(capped)
        _friction_update(friction, fit, [wide], capped)
        return friction['box_0']
    assert planned(1.3, 0.2, 1.5, False) == (0.2, 1.3, 1.3)
    assert planned(0.7, 0.2, 1.5, False) == (0.2, 0.7, 1.0)
    assert planned(1.24, 1.03, 1.45, True) == (1.03, 1.24, 1.45)
    with pytest.raises(ValueError, match='plan_friction_upper'):
        StrikeConfig.from_dict({'plan_friction_upper': -1.0})
