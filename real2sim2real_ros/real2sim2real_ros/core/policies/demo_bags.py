"""Demonstrations recorded on the cell, read from rosbag2 bags (ROS-free).

A demonstration is an episode run through the robot_executor's ``~/execute_policy`` with
recording on (the task's scripted demonstrator through a scripted checkpoint, ``r2s2r
record-demos``, or an operator's actions): its bag holds one real2sim2real_msgs/PolicyStep per
action on ``policy_steps`` (observation, action, resolved goal, the tracked object pose
behind it, the tool's start, the task and its config) beside the joint states, commands and
tracked objects. :func:`read_demo_bags` turns bags into :class:`DemoEpisode` s: the episode's
start (object pose, goal, tool start) as a core/tasks ResetSample and the action sequence,
which the trainer replays in the twin (core/policies/imitation.replay_demos: RialTo's
"inverse distillation", only what succeeds in the twin is imitated).

Bags are read with core/bag_io (the message definitions embedded in the MCAP), so no ROS is
needed. A bag that cannot be used is a :class:`DemoBagError` naming the bag and why (kind
``unreadable``, ``no_steps``, ``wrong_task`` or ``malformed``); the node maps it onto a result
error code.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..geometry import quat_yaw
from ..tasks.base import ResetSample

POLICY_STEP_TYPE = 'real2sim2real_msgs/msg/PolicyStep'
TRACKED_OBJECTS_TYPE = 'real2sim2real_msgs/msg/TrackedObjects'
EPISODE_BAG = 'episode'      # the executor's bag folder inside execute_policy_<n>/

UNREADABLE, NO_STEPS, WRONG_TASK, MALFORMED = 'unreadable', 'no_steps', 'wrong_task', 'malformed'


class DemoBagError(ValueError):
    """A demo bag cannot be used; ``kind`` says why (see the module docstring)."""

    def __init__(self, kind: str, path, message: str):
        super().__init__(f'demo bag {path}: {message}')
        self.kind, self.path = kind, str(path)


@dataclass
class DemoEpisode:
    """One recorded episode: where it started and what was done."""
    bag: str
    task: str
    object_id: str
    reset: ResetSample
    actions: np.ndarray                 # (n, action_dim)
    observations: np.ndarray            # (n, obs_dim) as observed on the cell
    task_config: dict = field(default_factory=dict)

    @property
    def steps(self) -> int:
        """Number of recorded steps (actions) in the episode."""
        return len(self.actions)


def resolve_bag_path(path) -> Path:
    """The rosbag2 folder (or lone .mcap) for ``path``: the bag itself, or an
    ``execute_policy_<n>/`` folder holding the executor's ``episode`` bag."""
    p = Path(path).expanduser()
    if p.is_dir() and not (p / 'metadata.yaml').is_file() and \
            (p / EPISODE_BAG / 'metadata.yaml').is_file():
        return p / EPISODE_BAG
    return p


def read_demo_bag(path, task_name: str = '') -> list[DemoEpisode]:
    """The episodes of one bag (a bag normally holds one; a new one starts where ``step``
    goes back to 0). ``task_name``: the task they must be for ('' = any)."""
    from ..bag_io import BagError, BagReader
    bag_path = resolve_bag_path(path)
    if not bag_path.exists():
        raise DemoBagError(UNREADABLE, path, 'does not exist')
    try:
        reader = BagReader(bag_path)
    except BagError as exc:
        raise DemoBagError(UNREADABLE, path, f'not a readable rosbag2 bag: {exc}') from None
    except Exception as exc:  # noqa: BLE001 - rosbags / mcap raise many kinds on bad files
        raise DemoBagError(UNREADABLE, path, f'not a readable rosbag2 bag: '
                           f'{type(exc).__name__}: {exc}') from None
    with reader:
        topics = reader.topics
        steps_topics = [t for t, s in topics.items() if s.msgtype == POLICY_STEP_TYPE]
        if not steps_topics or not sum(topics[t].count for t in steps_topics):
            raise DemoBagError(NO_STEPS, path, (
                f'no {POLICY_STEP_TYPE} messages (topics: {sorted(topics)}); record the '
                f'episode with the robot_executor\'s ~/execute_policy (record: true)'))
        tracked = [t for t, s in topics.items() if s.msgtype == TRACKED_OBJECTS_TYPE]
        steps, first_tracked = [], None
        try:
            for _topic, msgtype, _t_ns, raw in reader.messages(steps_topics + tracked):
                if msgtype == POLICY_STEP_TYPE:
                    steps.append(reader.deserialize(raw, msgtype))
                elif not steps:
                    first_tracked = (raw, msgtype)   # the latest pose before the first action
            if first_tracked is not None:
                first_tracked = reader.deserialize(*first_tracked)
        except Exception as exc:  # noqa: BLE001 - truncated chunks, bad CDR
            raise DemoBagError(UNREADABLE, path, f'cannot read its messages: '
                               f'{type(exc).__name__}: {exc}') from None
    episodes, current = [], []
    for msg in steps:
        if current and int(msg.step) <= int(current[-1].step):
            episodes.append(current)
            current = []
        current.append(msg)
    if current:
        episodes.append(current)
    return [_episode(path, ep, first_tracked if i == 0 else None, task_name)
            for i, ep in enumerate(episodes)]


def _episode(path, msgs, tracked, task_name: str) -> DemoEpisode:
    first = msgs[0]
    task = str(first.task)
    if task_name and task != task_name:
        raise DemoBagError(WRONG_TASK, path, f'records a {task!r} episode, not {task_name!r}')
    if any(str(m.task) != task for m in msgs):
        raise DemoBagError(MALFORMED, path, 'its steps name different tasks')
    object_id = str(first.object_id)
    pose = np.asarray(first.object_pose, float)
    if pose.size != 7:
        pose = _tracked_pose(tracked, object_id)
        if pose is None:
            raise DemoBagError(MALFORMED, path, (
                f'step 0 has no object_pose and no tracked pose of {object_id!r} precedes it: '
                f'the episode\'s start is unknown'))
    goal = np.asarray(first.task_goal, float)
    if goal.size not in (2, 3) or not np.all(np.isfinite(goal)):
        raise DemoBagError(MALFORMED, path, f'task_goal {goal.tolist()} is not x y [yaw]')
    try:
        actions = np.array([np.asarray(m.action, float) for m in msgs])
        observations = np.array([np.asarray(m.observation, float) for m in msgs])
    except ValueError:
        raise DemoBagError(MALFORMED, path, 'actions or observations change size within '
                           'the episode') from None
    if actions.ndim != 2 or actions.shape[1] == 0 or not np.all(np.isfinite(actions)):
        raise DemoBagError(MALFORMED, path, 'actions are empty or not finite')
    yaw = quat_yaw(pose[3:7])
    extra = {'kick_step': -1}          # the cell gave no kick the twin should replay
    tool = np.asarray(first.tool_start, float)
    if tool.size == 2:
        extra['tip_start_xy'] = tool.tolist()
    reset = ResetSample(pose[:2].copy(), float(yaw), goal[:2].copy(),
                        float(goal[2]) if goal.size == 3 else float(yaw), extra)
    try:
        config = json.loads(first.task_config) if first.task_config else {}
    except ValueError:
        config = {}
    return DemoEpisode(str(path), task, object_id, reset, actions, observations,
                       config if isinstance(config, dict) else {})


def _tracked_pose(msg, object_id: str):
    if msg is None:
        return None
    for oid, p in zip(msg.ids, msg.poses):
        if oid == object_id:
            o = p.orientation
            return np.array([p.position.x, p.position.y, p.position.z, o.w, o.x, o.y, o.z])
    return None


def read_demo_bags(paths, task) -> list[DemoEpisode]:
    """Every episode of ``paths`` for ``task`` (a core/tasks Task): DemoBagError on the first
    bag that cannot be used, also for actions or observations of another size than the
    task's."""
    out = []
    for path in paths:
        for ep in read_demo_bag(path, task.name):
            if ep.actions.shape[1] != task.action_dim:
                raise DemoBagError(MALFORMED, path, f'actions have {ep.actions.shape[1]} '
                                   f'values, {task.name} takes {task.action_dim}')
            if ep.observations.shape[1] != task.observation_dim:
                raise DemoBagError(MALFORMED, path, f'observations have '
                                   f'{ep.observations.shape[1]} values, {task.name} has '
                                   f'{task.observation_dim}')
            out.append(ep)
    return out


def write_demo_bag(path, task, episodes, types=None) -> Path:
    """Write ``episodes`` [(ResetSample, observations, actions), ...] of ``task`` as a demo
    bag (PolicyStep messages on /policy_steps), the way the executor records them: for
    offline tools and tests. Returns the bag folder."""
    from ..bag_io import BagWriter
    topic = '/policy_steps'
    config = json.dumps(task.config(), default=str)
    t_ns = 1_000_000_000
    with BagWriter(path, types=types) as bag:
        bag.add_topic(topic, POLICY_STEP_TYPE)
        for reset, observations, actions in episodes:
            goal = [*map(float, reset.goal_xy)] + (
                [] if getattr(task, 'one_shot', True) else [float(reset.goal_yaw)])
            c, s = np.cos(reset.object_yaw / 2), np.sin(reset.object_yaw / 2)
            pose = [float(reset.object_xy[0]), float(reset.object_xy[1]),
                    float(task.object_z), float(c), 0.0, 0.0, float(s)]
            tool = reset.extra.get('tip_start_xy', []) if not getattr(task, 'one_shot', True) \
                else []
            for k, (o, a) in enumerate(zip(np.atleast_2d(observations),
                                           np.atleast_2d(actions))):
                bag.write(topic, t_ns, {
                    'header': {'stamp': {'sec': t_ns // 1_000_000_000, 'nanosec': 0},
                               'frame_id': 'world'},
                    'task': task.name, 'object_id': task.object_id, 'step': k,
                    'observation': list(map(float, o)), 'action': list(map(float, a)),
                    'task_goal': goal, 'object_pose': pose,
                    'tool_start': list(map(float, tool)), 'task_config': config})
                t_ns += 100_000_000
    return Path(path)
