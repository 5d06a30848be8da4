"""params.bind: one table of Param declares a node's parameters, checks sets, applies them."""
import pytest
import rclpy
from rclpy.parameter import Parameter

from real2sim2real_ros.ros.params import Param, bind

SPECS = (
    Param('mode', 'a', 'A choice.', choices=('a', 'b'), read_only=True),
    Param('gain', 1.5, 'A tunable in a range.', lo=0.0, hi=10.0),
    Param('low', 0.0, 'Must stay below high.'),
    Param('high', 1.0, 'Must stay above low.'),
    Param('names', [], 'A list.', type_='string_array'),
)


@pytest.fixture
def node():
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    n = rclpy.create_node('params_bind_test', context=ctx)
    try:
        yield n
    finally:
        n.destroy_node()
        rclpy.try_shutdown(context=ctx)


def _order(values):
    return None if values['low'] < values['high'] else (
        f"low {values['low']} must be below high {values['high']}")


def test_bind_declares_checks_and_applies(node):
    seen = []
    p = bind(node, SPECS, check=_order, on_change=lambda params: seen.append(params.gain))
    assert (p.mode, p.gain, p.low, p.high, p.names) == ('a', 1.5, 0.0, 1.0, [])
    desc = node.describe_parameter('gain')
    assert desc.description == 'A tunable in a range.'
    assert desc.floating_point_range[0].to_value == 10.0
    assert 'one of: a, b' in node.describe_parameter('mode').additional_constraints
    # An accepted set changes the value and runs on_change once.
    assert node.set_parameters([Parameter('gain', value=2.5)])[0].successful
    assert p.gain == 2.5 and seen == [2.5]
    # rclpy's range check, the read-only flag and the node's own check each refuse a set;
    # a refused set changes nothing.
    assert not node.set_parameters([Parameter('gain', value=11.0)])[0].successful
    assert not node.set_parameters([Parameter('mode', value='b')])[0].successful
    bad = node.set_parameters_atomically([Parameter('low', value=2.0)])
    assert not bad.successful and 'must be below high' in bad.reason
    assert (p.gain, p.mode, p.low) == (2.5, 'a', 0.0) and seen == [2.5]
    # Both sides of a relation set together pass the check on the values they leave.
    ok = node.set_parameters_atomically([Parameter('low', value=2.0),
                                         Parameter('high', value=3.0)])
    assert ok.successful and (p.low, p.high) == (2.0, 3.0)
    with pytest.raises(AttributeError, match='ros2 param set'):
        p.gain = 3.0


def test_a_value_outside_its_choices_is_refused_at_declaration(node):
    specs = (Param('mode', 'c', 'A choice.', choices=('a', 'b')),)
    with pytest.raises(ValueError, match=r"mode='c' is not one of \['a', 'b'\]"):
        bind(node, specs)
