"""What an identify goal ends with: the estimates published on ``physical_parameters``,
pushed to the twin (sim_server's ``set_physical_parameters``) and in the goal's result."""
from __future__ import annotations

import math
import threading

from real2sim2real_msgs.msg import PhysicalParameter, PhysicalParameterSet
from real2sim2real_msgs.srv import SetPhysicalParameters


class IdentifyReport:
    """SystemIdentificationNode's end of a goal (a mixin: ``self`` is the node)."""

    def _report(self, goal_handle, result, out, grip=None):
        """Publish the estimates (``out``'s, the slip probe's ``grip`` = (estimates, folder,
        record) in place of any of the same name), push them to the twin, fill the result."""
        fit, ofit = (out.fit, out.object_fit) if out is not None else (None, None)
        if fit is not None:
            with self._lock:
                self._arm_values = fit.parameters.values()
        estimates = {e.name: e for e in (out.estimates if out is not None else [])}
        estimates.update({e.name: e for e in (grip[0] if grip else [])})
        msg = PhysicalParameterSet(artifact_dir=str(out.folder if out else grip[1]))
        msg.header.stamp = self.get_clock().now().to_msg()
        for e in estimates.values():
            msg.parameters.append(PhysicalParameter(
                name=e.name, value=e.value, lower_95=e.lower_95, upper_95=e.upper_95,
                prior=e.prior, unit=e.unit, identified=e.identified))
        self.pub_params.publish(msg)
        objects = [e.name for e in (ofit.parameters if ofit else [])]
        self._push_to_sim(msg, objects + [e.name for e in (grip[0] if grip else [])
                                          if e.name.startswith('body/')])
        result.parameters = msg
        if out is None:     # the slip probe only: no trajectory residuals
            result.residual_before = result.residual_after = math.nan
            result.heldout_error_before = result.heldout_error_after = math.nan
            result.report_path = str(grip[1] / 'grip_probe.json')
            self._feedback(goal_handle, 'done', 1.0)
            return
        first = fit if fit is not None else ofit
        result.residual_before, result.residual_after = (first.residual_before,
                                                         first.residual_after)
        if out.heldout_arm or ofit is None:
            result.heldout_error_before = fit.heldout_error_before
            result.heldout_error_after = fit.heldout_error_after
        else:   # the arm (and objects) scored on the held-out strike probe's joints
            result.heldout_error_before = ofit.heldout_joint_before
            result.heldout_error_after = ofit.heldout_joint_after
        result.report_path = str(out.report_path)
        self.get_logger().info('identify profile (s): ' + ', '.join(
            f'{k} {v:.1f}' for k, v in out.timings['seconds'].items()))
        self._feedback(goal_handle, 'done', 1.0, result.residual_after)

    def _push_to_sim(self, msg: PhysicalParameterSet, object_names=()):
        """Arm and object parameters in two calls: a twin without the scene's objects still
        takes the arm's."""
        if not self._sim_client.service_is_ready():
            self.get_logger().info('sim_server not up: parameters not pushed to the twin')
            return
        objects = set(object_names)
        for part in ([p for p in msg.parameters if p.name not in objects],
                     [p for p in msg.parameters if p.name in objects]):
            if not part:
                continue
            done = threading.Event()
            future = self._sim_client.call_async(SetPhysicalParameters.Request(parameters=part))
            future.add_done_callback(lambda _f, d=done: d.set())
            if not done.wait(5.0) or not future.result().success:
                why = 'no answer' if not done.is_set() else future.result().message
                self.get_logger().warning(f'pushing parameters to the twin failed: {why}')
