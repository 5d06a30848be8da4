"""Twin.set_parameters is all or nothing, and every field has a documented upper bound."""
import numpy as np
import pytest

from real2sim2real_ros.core.twin import PARAMETER_UPPER_BOUNDS, Twin

SCENE = """<mujoco>
  <worldbody>
    <body name="object/box_0" pos="0.55 0.12 0.05">
      <freejoint name="object/box_0"/>
      <geom name="object/box_0" type="box" size="0.04 0.03 0.025" mass="0.2"
            friction="0.6 0.005 0.0001"/>
    </body>
  </worldbody>
</mujoco>"""


@pytest.fixture(scope='module')
def twin(robot):
    return Twin(robot, scene=SCENE)


def test_a_batch_with_one_bad_value_changes_nothing(twin):
    names = ['joint/elbow_joint/damping', 'geom/box_0/friction', 'body/box_0/mass',
             'global/command_latency']
    before = twin.get_parameters(names)
    model_before = twin.snapshot()
    # Valid values first (written before the bad one is reached), then a negative damping.
    with pytest.raises(ValueError, match='wrist_1_joint'):
        twin.set_parameters({'joint/elbow_joint/damping': 3.0, 'geom/box_0/friction': 0.9,
                             'body/box_0/mass': 0.5, 'global/command_latency': 0.05,
                             'joint/wrist_1_joint/damping': -1.0})
    assert twin.get_parameters(names) == before
    after = twin.snapshot()            # every model array set_parameters writes, bit for bit
    for field, value in model_before.items():
        np.testing.assert_array_equal(after[field], value, err_msg=field)


@pytest.mark.parametrize('name,value', [('geom/box_0/friction', 1e9),
                                        ('joint/elbow_joint/damping', 1e7),
                                        ('actuator/elbow_joint/kp', 1e12),
                                        ('body/box_0/mass', 1e6),
                                        ('body/box_0/com_offset_x', -5.0),
                                        ('global/command_latency', 30.0)])
def test_absurd_values_are_refused_by_the_bounds(twin, name, value):
    before = twin.get_parameter(name)
    with pytest.raises(ValueError, match='above the bound') as err:
        twin.set_parameters({name: value})
    assert name in str(err.value)
    assert twin.get_parameter(name) == before
    # The bound itself is accepted (then put back).
    bound = PARAMETER_UPPER_BOUNDS[name.split('/')[-1]]
    twin.set_parameters({name: -bound if value < 0 else bound})
    twin.set_parameters({name: before})
    assert twin.get_parameter(name) == pytest.approx(before)
