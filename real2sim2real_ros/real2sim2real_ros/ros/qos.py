"""Named QoS profiles: every publisher and subscriber in the package picks one of these.

Choices follow REP 2003 (sensor data and maps) and what was measured on this stack:
640x480 rgb8 at 30 Hz lost 97% of frames over best-effort Fast DDS but 1% over reliable
(depth 10), so camera *images* default to reliable; a lab can switch them to the
REP 2003 SensorDataQoS with the nodes' `image_qos` parameter.
"""
from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_action_status_default,
    qos_profile_sensor_data,
)

# REP 2003 sensor data: best effort, keep last 5. Right for small, high-rate streams.
SENSOR_DATA = qos_profile_sensor_data

# Camera images and clouds: reliable keep-last-10. Large frames over best effort drop.
IMAGES = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=10,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)

# Images a slow consumer processes one at a time (the object tracker): reliable keep-last-1.
# With keep-last-10 a consumer that falls behind under load works through a queue of old
# frames (measured in the loop demo: tracked poses 1.5-2 s old); with one slot it always gets
# the newest frame and the older ones are dropped.
LATEST_IMAGES = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=1,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)

# /joint_states, controller state: reliable keep-last-10, as robot_state_publisher expects.
# The writer stays keep-last-10 although a loaded PC then loses samples (load 4: 23 in a row):
# with a deep writer queue the lost ones are repaired in order, and the readers' streams then
# stalled for 1.01-1.04 s (4 of 4 runs at load 4; the executor aborts after 1 s without states).
# Consumers cope with lost samples instead (core/sysid/regression.py cuts at gaps).
STATE = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=10,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)

# Recorders of /joint_states (executor, capture, identification): same offer-compatibility as
# STATE but a deep reader queue, so a burst of CPU load delays samples instead of dropping them.
STATE_RECORDING = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=200,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)

# Commands (joint_trajectory): reliable, keep only the newest; a stale command must not queue.
COMMAND = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=1,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)

# Latched: /robot_description, scene, physical_parameters, markers. Late joiners get the last one.
LATCHED = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=1,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)

# /clock: reliable keep-last-1 is what rclpy's time source subscribes with... it uses
# its own profile; publishers match it with this one.
CLOCK = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=1,
    reliability=ReliabilityPolicy.BEST_EFFORT, durability=DurabilityPolicy.VOLATILE)

# An action's goal status array, as its server offers it (reliable, transient local, keep last
# 1): goal_client.GoalClient reads the goals a server has accepted from it.
ACTION_STATUS = qos_profile_action_status_default

PROFILES = {
    'sensor_data': SENSOR_DATA,
    'images': IMAGES,
    'latest_images': LATEST_IMAGES,
    'state': STATE,
    'state_recording': STATE_RECORDING,
    'command': COMMAND,
    'latched': LATCHED,
    'clock': CLOCK,
}


def by_name(name: str) -> QoSProfile:
    """Profile for a parameter value such as ``image_qos: sensor_data``."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f'unknown QoS profile {name!r}; known: {sorted(PROFILES)}') from None
