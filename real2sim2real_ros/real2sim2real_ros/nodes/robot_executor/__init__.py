"""robot_executor: safe execution of joint trajectories on a ros2_control-style robot.

Starts DISARMED. ``~/arm`` needs a robot model (``robot_description_file`` or the latched
``robot_description`` topic), fresh ``joint_states`` for every joint and a reachable
controller. ``~/execute_trajectory`` validates the whole trajectory (joint names, position,
velocity and workspace limits, timing; see core/execution_safety.py) BEFORE anything is sent;
a refused goal is accepted and then aborted with its error code, so the client learns why.
While it runs the executor compares ``joint_states`` with the commanded trajectory at each
state's measurement time (its header stamp, however late it arrives) and aborts, holding the
arm, on: TRACKING_ERROR (the arm does not follow), STALE_STATE (states arrive, but the latest
was more than 2 s old when it arrived: the executor's state is old, which says nothing about
the arm), BACKEND_UNAVAILABLE (the controller fails or joint_states stop arriving) or
TIMEOUT (counted on the measurements' clock); the last three disarm.
``~/stop`` brings the arm to rest at once (stop ramp), ends the goal with STOPPED and
disarms; ``~/disarm`` during a motion does the same.

Start-state semantics (ros2_control JTC): the current position is an implicit point at
t = 0; a first point with time_from_start > 0 is reached from it, one at t = 0 must be within
``start_tolerance`` of it. header.stamp is the start time, ``start_delay`` seconds after the
command is sent (JTC semantics: the controller holds until then, so the delivery delay does not
shift the motion and a recording knows its start on the controller's clock); a start_delay
of 0 sends header.stamp = 0 ("start now"). Stop ramps always start now.

Each execution gets ``<run_dir>/execute_<n>/manifest.json`` (inputs, limits used, results)
and, when recording, ``trajectory.mcap`` (rosbag2 MCAP folder: commands + joint states).

``~/execute_policy`` (real2sim2real_msgs/ExecutePolicy) runs a trained policy closed-loop with
the SAME safety rules (core/policy_execution.py does the planning): it refuses when DISARMED
(NOT_ARMED) or busy (BUSY), for a bad checkpoint or a task mismatch (INVALID_CHECKPOINT naming
the file; a task_goal that does not fit the task also gets INVALID_CHECKPOINT), and for a goal
outside the workspace (WORKSPACE_VIOLATION), all before anything moves. Observations: the
joint state above and the object's pose from ``tracked_objects_topic``
(real2sim2real_msgs/TrackedObjects from the object_tracker, subscribed only while a policy goal
runs; the lazy tracker starts when it sees the subscription); a pose older than
``observation_timeout`` is no observation, and none within ``observation_wait`` while the arm
is at rest (first observation, outcome; in the closed loop ``observation_timeout``) ->
OBSERVATION_UNAVAILABLE. Every
trajectory the policy produces is validated against the measured position before it is sent
(LIMIT_VIOLATION / WORKSPACE_VIOLATION: not sent, the arm holds); tracking, stop/disarm, cancel
and the goal's ``max_duration`` (else ``policy_max_duration``; TIMEOUT) are supervised as for
trajectories. slide_to_target: one observation -> one action -> approach + strike + retreat
(the tool straight up, out of the object's way, after the task's settle time), then the
outcome is observed. push_to_pose: one observation -> action ->
segment per control period until the task's success rule or its max_steps. task_success is
the task's rule on the last tracked pose; ``duration`` and the feedback's ``elapsed`` count
from the checkpoint being loaded. ``<run_dir>/execute_policy_<n>/`` holds the manifest (the
episode's observations, actions, goal, tracking statistics) and, when recording,
``episode`` (MCAP: joint states, every commanded trajectory, tracked objects, and one
real2sim2real_msgs/PolicyStep per action on ``policy_steps``: observation, action, resolved
goal, the tracked pose behind it, the task and its config; what makes the bag a demonstration
for the policy_trainer, core/policies/demo_bags.py).
``~/grip`` (real2sim2real_msgs/Grip: open, close, position) drives a parallel-jaw gripper
through its controller's ``<gripper_controller_name>/gripper_cmd`` (ros/gripper_backend.py),
armed and one goal at a time like the others, within ``gripper_max_effort`` /
``gripper_max_speed``; a stop or disarm cancels it and the jaw holds where it is (a stop
never opens a loaded gripper). See grip_goal.py.
Exit code 2 with one line on stderr for unusable parameters (ConfigurationError).

Layout: ``node.py`` (parameters, robot model, joint states, arm/disarm/stop/status),
``trajectory_goal.py`` (``~/execute_trajectory``), ``policy_goal.py`` (``~/execute_policy``),
``grip_goal.py`` (``~/grip``),
``supervision.py`` (what both goals check while the arm moves, their shared types) and
``recording.py`` (run-directory stages, manifests, bags).
"""
