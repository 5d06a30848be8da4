"""loop_coordinator: the whole real-to-sim-to-real loop as one action, resumable from artifacts.

Action ``~/run_loop`` (real2sim2real_msgs/action/RunLoop) runs capture -> reconstruct ->
identify -> train -> execute -> evaluate by sending goals to the other nodes' actions (it is
their client; the clients live in a callback group of their own and the goal waits on
futures, so it never blocks the executor threads their answers need):

* **capture**: ``camera_capture/capture`` (``capture_views`` views, 0 = its default);
* **reconstruct**: ``scene_reconstruction/reconstruct`` of that capture set. The chosen scene
  (new or a skipped stage's) is then published on the latched ``scene`` topic from its
  manifest, so the trainer and the object tracker hold the scene the loop uses even when
  reconstruction was skipped in this bringup;
* **identify**: arms the executor, ``system_identification/identify`` with live probes
  (``identify_probes``, 0 = its default), disarms;
* **train**: ``policy_trainer/train`` of the task with the identified ``parameters.yaml``
  (``train_total_steps``, 0 = the trainer's budget; ``train_randomize``: domain randomisation
  over the 95% intervals) and the goal's ``demo_bags`` (demonstrations recorded on the cell
  with ``r2s2r record-demos``; none: the task's scripted demonstrator in the twin);
* **execute**: arms the executor and runs the checkpoint ``execute_trials`` times through
  ``robot_executor/execute_policy``. Between trials, where the emulated cell's
  ``emulated_cell/reset_objects`` service exists, the objects are put back (and
  ``object_tracker/reset`` forgets the track); a trial's goal is ``execute_goals`` (x y yaw
  triples, cycled) or is drawn like the task's reset distribution for the object where the
  tracker sees it (core/loop_plan.sample_goal). The executor is disarmed at the end, also on
  failure and cancel. A trial the executor ends with a safety or timeout error counts as a
  failed trial. When the executor's observation window after a motion saw no object pose
  (OBSERVATION_UNAVAILABLE after the episode ran: a tracker stall), the loop judges the
  outcome with the task's own success rule on the next tracked pose measured after the
  executor's answer (the object is at rest by then; ``outcome_from`` in the trial record);
  with none within ``observation_wait`` the trial is ``unobserved`` and left out of the
  success rate. A trial refused for want of an object pose before anything moved is sent
  again (``observation_retries``). Errors that say the stage cannot work (NOT_ARMED, BUSY,
  INVALID_CHECKPOINT, STOPPED, still no object pose after the retries) end the stage with
  STAGE_FAILED. Writes ``<run_dir>/execute_trials_NNN/manifest.json``;
* **evaluate**: ``policy_trainer/evaluate`` of the checkpoint in its twin (``twin_eval_trials``,
  0 = the trainer's eval_trials). Writes ``<run_dir>/evaluate_NNN/manifest.json``.

Goal: ``task`` ('' = parameter ``task``), ``run_dir`` ('' = parameter ``run_dir``),
``skip_stages`` and ``resume`` (core/loop_plan.py: an unknown stage name or a skipped stage
without an artifact -> INVALID_GOAL naming it; resume skips the leading stages whose
artifacts exist). Feedback: ``stage`` ("<stage>" or "<stage>: <detail>"; the stage name is
the text before the first colon) and overall ``progress`` 0..1. Cancel cancels the running
child goal, waits for it and ends CANCELED. A child that fails -> STAGE_FAILED with
``failed_stage`` and the child's error code name and text; a child whose action server
goes away mid-goal (its node killed; with the launch files' ``respawn:=true`` it is started
again) -> STAGE_FAILED naming the gone server within SERVER_CHECK_PERIOD plus DDS's notice of
the dead process, and ``resume`` then redoes that stage only. Every planned goal writes
``<run_dir>/loop_NNN/`` (summary.json, stage_times.png, parameters.png, success.png,
manifest.json; core/loop_report.py), also when it fails or is canceled; ``summary_path``
names it. One goal at a time (another is rejected while one runs).

Layout: ``node.py`` (parameters, child-goal plumbing, the action), ``stages.py`` (the
one-goal stages and the republished scene), ``execute.py`` (the cell trials) and ``run.py``
(one goal's book-keeping, StageFailed / Canceled).
"""
