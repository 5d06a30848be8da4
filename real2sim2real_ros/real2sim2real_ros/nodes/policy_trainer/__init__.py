"""policy_trainer: train a task policy in the twin, and evaluate checkpoints in the twin.

Action ``~/train`` (real2sim2real_msgs/action/Train):

* ``task``: a name of the core/tasks registry (UNKNOWN_TASK lists the known ones);
* ``parameters_path``: an identified ParameterSet (system_identification's
  ``identify_NNN/parameters.yaml``, or that folder); empty = the nominal twin. Unreadable, or
  naming elements the twin lacks, or invalid values: INVALID_PARAMETERS with the reason;
  values that make the twin diverge (core.twin.Twin.check_stable: a small move of the arm),
  or a twin that diverges during training: UNSTABLE_TWIN naming the set or the stage;
* ``randomize``: domain randomisation from the parameters' 95% intervals during
  self-imitation and PPO (core/policies/randomization.py; nothing to randomise without
  identified parameters);
* ``total_steps``: environment steps of training in the twin; 0 = the node's parameters
  (demos + self_imitation_rounds x self_imitation_episodes + ppo_iterations x ppo_batch_size
  episodes = 584 by default). One step is one episode of a one-shot task (slide_to_target)
  and one control tick of a closed-loop task (push_to_pose, up to max_steps per episode).
  Demos, self-imitation episodes and PPO iterations are scaled together
  (core/training_setup.budget_config); BC epochs and evaluation trials are not steps;
* ``demo_bags``: demonstrations recorded on the cell instead of the task's scripted
  demonstrator: the robot_executor's ``~/execute_policy`` bags (a bag folder, or its
  ``execute_policy_<n>/`` folder) with real2sim2real_msgs/PolicyStep on ``policy_steps``,
  e.g. from ``r2s2r record-demos`` (the scripted demonstrator on the cell) or an operator's
  actions (core/policies/demo_bags.py). Each demo is replayed in the twin from its recorded
  start (object pose, goal, tool start; slide_to_target: its one action, push_to_pose: its
  action sequence, open loop), only those that succeed there are kept (RialTo's inverse
  distillation) and the twin replay's (observation, action) pairs are the imitation data;
  self-imitation / DAgger / PPO / evaluation follow as without bags (push_to_pose's DAgger
  still labels the learner's states with the task's scripted expert). The ``demos``
  parameter and the demo share of ``total_steps`` do not apply. A bag that does not exist,
  cannot be read, has no policy_steps or records another task -> INVALID_DEMOS naming it;
  none of the demos succeeding in the twin -> NO_DEMOS with each demo's twin outcome. The
  manifest's results carry ``demos`` (source, tried, kept, per demo). Without bags, NO_DEMOS
  when no scripted demonstration succeeds;
* ``run_dir``: empty = parameter ``run_dir``.

The twin: the robot from ``robot_urdf`` or the latched ``robot_description``; the scene from
``scene_path``, else the latched ``scene`` topic (scene_reconstruction: its mjcf_path, the
object's id and size and the table height go into the task config), else the task's own scene
(core/tasks/worlds.task_scene_xml); starting values from ``twin_parameters_file`` (the
controller gains the lab knows + priors: what sim_server starts from), then the identified
values. Training (core/policies/pipeline.train_policy) runs on a worker thread with
``torch_threads`` threads (the core's rollouts are one parameter sample at a time, so there
is no mujoco.rollout nthread to set). Feedback: stage (setup, demos, imitation,
self_imitation, evaluate, ppo, done), progress 0..1 (monotonic), the latest twin success rate
(NaN before the first evaluation; during ppo the latest batch's, with exploration and
randomisation; during an evaluation the running rate), at most every ``feedback_period`` s
plus at each stage change. Cancel -> CANCELED within about a second (checked per episode and
BC epoch; CANCEL_GRACE s at most). Result: ``checkpoint_path``
(``<run_dir>/train_NNN/checkpoint/``, loads with core/policies/policy.py alone; the stage's
manifest.json records inputs, parameters, timings and sha256 of the files) and
``twin_result`` (TaskResult, system 'twin', ``eval_trials`` trials).

Action ``~/evaluate`` (Evaluate.action): loads ``checkpoint_path`` (INVALID_CHECKPOINT naming
the file), rebuilds the twin it was trained in (the train stage's manifest: scene, starting
and identified values; without one, the current scene and the nominal twin), runs ``trials``
episodes (0 = ``eval_trials``; more than MAX_EVAL_TRIALS = 100000 is INVALID_GOAL) with the
training's evaluation seed, feedback per trial.

One goal at a time (a second one is rejected while one runs). Exit code 2 with one line on
stderr for unusable parameters.

Layout: ``node.py`` (parameters, robot and scene, the goal worker), ``goals.py`` (``~/train``
and ``~/evaluate``) and ``job.py`` (a goal's worker state, GoalFailed, the goal limits).
"""
