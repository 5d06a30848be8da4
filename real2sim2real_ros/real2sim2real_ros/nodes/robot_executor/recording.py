"""The executor's artifacts: one run-directory stage per goal, its manifest, and its bag.

Every goal gets ``<run_dir>/<kind>_<n>/manifest.json`` (inputs, the limits and parameters
it ran with, results) when ``run_dir`` is set; when recording, a rosbag2 MCAP folder with
the commands and joint states (and, for policies, tracked objects and PolicyStep messages).
A broken recorder never stops a motion: its problem lands in ``ex.bag_error`` and the
manifest's ``recording_problem``. The manifest also says how many joint states the bag holds
and how many the cell's stream lost before they reached the executor (gaps in the header
stamps: a reliable keep-last-10 writer drops what a starved reader has not acknowledged;
measured at load 5 on 2 cores: 46 of 453 in 6 gaps). Consumers cut at those gaps
(core/sysid/regression.py).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from rclpy.serialization import serialize_message

from .supervision import Execution

# The parameters every manifest records (the policy goal's adds its own).
_MANIFEST_PARAMETERS = (
    'controller_name', 'velocity_limit_scale', 'max_tracking_error', 'goal_tolerance',
    'start_tolerance', 'goal_timeout_margin', 'stop_decel_time', 'control_period',
    'start_delay')


class Recorder:
    """Stages, manifests and bags of ``node``'s goals."""

    def __init__(self, node):
        self.node = node

    def new_stage(self, kind: str, inputs: dict, parameters: dict | None = None):
        """A new ``<run_dir>/<kind>_<n>`` stage (None without ``run_dir``)."""
        n = self.node
        if not n.p.run_dir:
            return None
        from ...core.artifacts import RunDirectory
        with n.lock:
            robot, limits = n.robot, n.limits
            n.executions += 1
        params = {name: getattr(n.p, name) for name in _MANIFEST_PARAMETERS}
        params.update({
            'backend': n.backend.name,
            'limits': limits.as_dict() if limits is not None else None,
            'workspace_min': n.workspace.minimum.tolist(),
            'workspace_max': n.workspace.maximum.tolist(),
            'tip_link': robot.tip_link if robot is not None else '',
            **(parameters or {})})
        return RunDirectory(n.p.run_dir).new_stage(kind, inputs=inputs, parameters=params)

    def finish(self, stage, results: dict, bag_path: str) -> None:
        """Write the stage's manifest with ``results`` and the bag's files as outputs."""
        stage.results = results
        if bag_path:
            stage.add_output('bag', bag_path)
            for i, f in enumerate(sorted(Path(bag_path).glob('*.mcap'))):
                stage.add_output(f'bag_file_{i}', f)
        try:
            stage.finish()
        except (OSError, TypeError, ValueError) as exc:
            self.node.get_logger().error(f'writing {stage.folder}/manifest.json failed: {exc}')

    def open_bag(self, ex: Execution, stage, name: str = 'trajectory', extra_topics=()):
        """Start recording ``ex`` into ``<stage>/<name>`` (commands + joint states + extra)."""
        from ...core.bag_io import BagWriter
        n = self.node
        try:
            bag = BagWriter(stage.folder / name).open()
            bag.add_topic(n.backend.record_topic, n.backend.record_type)
            bag.add_topic(n.joint_states_topic(), 'sensor_msgs/msg/JointState')
            for topic, msgtype in extra_topics:
                bag.add_topic(topic, msgtype)
        except Exception as exc:  # noqa: BLE001 - a broken recorder must not stop the motion
            ex.bag_error = f'recording disabled: {exc}'
            n.get_logger().error(ex.bag_error)
            return
        ex.bag = bag

    def record(self, ex: Execution, topic: str, msg, t: float, stamp: float | None = None
               ) -> None:
        """Write ``msg`` at node-clock time ``t`` into ``ex``'s bag, if it records; a joint
        state's header ``stamp`` joins ``ex.state_stamps`` under the same lock as its write,
        so the manifest counts exactly what the bag holds (checked apart, a state that came
        in as the bag closed was counted and not written: 353 counted, 352 in the bag)."""
        try:
            data = serialize_message(msg)
            with self.node.lock:
                if ex.bag is not None:
                    ex.bag.write_raw(topic, int(t * 1e9), data)
                    if stamp is not None:
                        ex.state_stamps.append(stamp)
        except Exception as exc:  # noqa: BLE001 - a recorder fault must not stop the motion
            ex.bag_error = f'recording failed: {exc}'

    @staticmethod
    def state_summary(ex: Execution) -> dict:
        """Recorded joint states and those lost upstream (core.bag_io.stream_gaps, each gap
        counted in median spacings) for the manifest."""
        from ...core.bag_io import stream_gaps
        stamps = np.asarray(ex.state_stamps, float)
        dt, at = stream_gaps(stamps)
        gaps = np.diff(stamps)[at]
        return {'joint_states_recorded': int(stamps.size),
                'joint_states_lost': int(np.sum(np.round(gaps / dt) - 1)) if gaps.size else 0,
                'joint_state_gaps': int(gaps.size)}

    def close_bag(self, ex: Execution, result) -> None:
        """Close ``ex``'s bag; its folder goes to ``result.bag_path``."""
        with self.node.lock:
            bag, ex.bag = ex.bag, None
        if bag is None:
            return
        try:
            result.bag_path = str(bag.close())
        except Exception as exc:  # noqa: BLE001 - the manifest says the bag is incomplete
            ex.bag_error = f'closing the bag failed: {exc}'
