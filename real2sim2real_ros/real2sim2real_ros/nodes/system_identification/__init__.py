"""system_identification: probe motions (through the executor) or recorded bags -> the twin's
physical parameters with 95% intervals.

Action ``~/identify`` (real2sim2real_msgs/action/Identify):

* live (no bag_paths): moves the arm to ``probe_center`` (current position when empty), then
  runs ``num_probes`` multi-sine probes (inside the joint limits, ``probe_velocity_fraction``
  of the velocity limits) through the executor's ``execute_trajectory`` action with
  record=true, and reads the bags it returns. The node never arms the executor: the operator
  does; a disarmed executor gives EXECUTION_FAILED with the executor's message;
* objects: when ``parameters_file`` declares ``objects:`` templates and a scene is known
  (``scene_file``, else the latched ``scene`` topic of scene_reconstruction), each box or
  cylinder of the scene gets ``geom/<id>/friction`` and ``body/<id>/mass``. Live, after the
  arm probes, ``strike_probes`` strike probes (core/sysid/object_probes.py: each strikes every
  object once, planned from the poses on ``tracked_objects_topic``, the friction bounds from
  the fit of the probes before) run through the same executor action; the arm gets
  ``max_probes`` - strike probes. Each strike probe's bag (``<execute_n>/strike_probe``) holds
  the executor's recording, the tracked poses received meanwhile and the plan, so the bags
  alone reproduce the fit. No tracked poses: MISSING_TOPICS; an object that left the table or
  the camera's view: EXECUTION_FAILED naming it;
* the slip probe (grip_probe.py; a robot with a parallel-jaw gripper): for a goal naming
  ``global/finger_friction`` (alone: only it), or every live goal when ``grip_task`` is set.
  On the cell after the arm probes, before the strikes: the object grasped at its tracked
  pose through the executor's ``grip`` and ``execute_trajectory``, lifted, the closing effort
  lowered until it slips; the held mass from the arm's efforts; then the finger friction fit
  in the twin with the goal's estimates and the held mass. Its folder
  ``<run_dir>/identify_grip_<n>/``; the goal's ``identify_<n>/parameters.yaml`` takes both
  estimates (the manifest amended). Not offline: with ``bag_paths`` it is INVALID_BOUNDS;
* offline: the given bags (any executor recording: commanded JointTrajectory + JointState;
  strike probe bags are recognised by their plan);
* fit (core.sysid.fit.identify: regression + one rollout polish for the arm, see there; its
  warnings -- estimates pinned at a bound, residual above the joint-state noise, contact
  spikes -- are logged and written to the manifest, and such estimates come back with
  identified=false) of the parameters declared in ``parameters_file`` (or the
  goal's subset) on all recordings but the last, which is held out to score the fit (with
  strike probes: on all arm probes, scored on the held-out strike probe's joints); then the
  objects (core.sysid.object_fit.final_object_fits) on a fresh twin with the arm's estimates,
  validated by their fit without the last strike (made once, before the last strike);
* writes ``<run_dir>/identify_<n>/`` (parameters.yaml, report.png, objects.png with tracked
  vs simulated object paths, manifest.json), publishes the latched ``physical_parameters`` and
  pushes them to ``<sim_server>/set_physical_parameters`` when that service is up (the arm's
  and the objects' in two calls: a twin without the scene still takes the arm's).

The twin's servo gains are the controller configuration the lab knows (the parameters file's
``controller_config``, a ros2_control YAML: core/controller_config.py), not identified. The
stage itself (probes, fits, the folder) is core/sysid/stage.py, which the evaluation harness
runs too; the manifest's results carry its per-sub-stage wall times (``profile``). Error
codes map one to one onto the core's exceptions (:func:`error_code_for`). Exit code 2 with
one line on stderr for unusable parameters.

Layout: ``node.py`` (parameters, robot model, scene, the identify action), ``probes.py``
(probes through the executor, the strike probes' cell), ``grip_probe.py`` (the slip probe),
``report.py`` (publishing the result) and ``failure.py`` (GoalFailed).
"""
