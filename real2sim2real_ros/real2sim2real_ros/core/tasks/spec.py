"""Task specs (ROS-free): a task declared in YAML (config/tasks/<name>.yaml), validated.

``load_task_spec(path or dict) -> TaskSpec``. Every error is a TaskError of one line that
names the source and the field path, e.g. ``config/tasks/x.yaml: success[1].radius: must be
a number > 0, got -0.1``. The schema (docs/tasks.md):

* ``task``: the task kind (a class in ``KINDS``) that runs it;
* ``object``: which object it acts on: ``shape`` and ``index`` (the index-th object of that
  shape among the reconstructed ones, in scene order) and ``id`` (the id without a scene);
* ``start``: ``xy: {center, half_width}`` (uniform square) and ``yaw: {about, jitter}``
  (uniform +-jitter about ``zero`` or about the ``goal_heading``);
* ``goal``: ``polar: {distance, heading}`` (ranges, from the start) or ``offset: {forward,
  lateral}`` (a range along +x, +-lateral along y), and optionally ``yaw: {about:
  start_yaw, jitter}``;
* ``horizon``: actions per episode (1: one-shot);
* ``expert``: ``name`` (one of the kind's ``EXPERTS``) and its ``params``;
* ``reward``: ``success_bonus``, ``distance_scale`` (m), ``yaw_weight`` (per rad);
* ``success``: a list of one-key maps ``{predicate: {params}}`` (predicates.PREDICATES),
  all of which must hold;
* ``config``: the kind's config values (fields of its config dataclass; omitted ones keep
  the dataclass's defaults).

Any number outside ``config`` may instead be the string ``config.<field>``: the task's
config value (after a caller's overrides), resolved and checked when the task is built
(:meth:`TaskSpec.resolve`). Draw order of :func:`sample_start_goal` (part of the contract:
same seed, same episodes): start xy (2), start yaw if about zero, goal (polar: heading then
distance; offset: forward then lateral), start yaw if about the goal heading, goal yaw.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from ..geometry import wrap_angle
from .base import TaskError, task_config
from .predicates import PARAM_CHECKS, PREDICATES, all_hold, yaw_gap

# kind -> (module, class, config module attribute)
KINDS = {
    'slide_to_target': ('.slide_to_target', 'SlideToTarget', 'SlideConfig'),
    'push_to_pose': ('.push_to_pose', 'PushToPose', 'PushConfig'),
    'pick_and_place': ('.pick_and_place', 'PickAndPlace', 'PickConfig'),
    'gentle_pick_and_place': ('.pick_and_place', 'GentlePickAndPlace', 'PickConfig'),
    'stack': ('.pick_and_place', 'Stack', 'StackConfig'),
}
# kind -> expert name -> its parameter names
EXPERTS = {
    'slide_to_target': {'friction_model_strike': ('friction', 'spread')},
    'push_to_pose': {'face_pushing': ('gain_spread',)},
    'pick_and_place': {'centre_grasp': ('noise',)},
    'gentle_pick_and_place': {
        'weight_sized_grasp': ('noise', 'mass', 'finger_friction', 'margin')},
    'stack': {'centre_grasp': ('noise',)},
}
TOP_KEYS = ('task', 'object', 'start', 'goal', 'horizon', 'expert', 'reward', 'success',
            'config')
REF = 'config.'


def tasks_dir() -> Path:
    """config/tasks in the source tree or the installed share directory."""
    here = Path(__file__).resolve().parents[3] / 'config' / 'tasks'
    if here.is_dir():
        return here
    try:
        from ament_index_python.packages import get_package_share_directory  # noqa: PLC0415
        return Path(get_package_share_directory('real2sim2real_ros')) / 'config' / 'tasks'
    except (ImportError, LookupError):   # no ament index: the source path
        return here


def shipped_task_names() -> list[str]:
    """The tasks declared in config/tasks (a file's stem is its name)."""
    return sorted(p.stem for p in tasks_dir().glob('*.yaml'))


@functools.cache
def shipped_spec(name: str) -> TaskSpec:
    """The spec of the shipped task ``name`` (config/tasks/<name>.yaml), loaded once."""
    return load_task_spec(tasks_dir() / f'{name}.yaml')


@dataclass
class TaskSpec:
    """A loaded, checked task YAML (``config.<field>`` references still unresolved)."""

    source: str
    task: str
    object: dict
    start: dict
    goal: dict
    horizon: object
    expert: dict
    reward: dict
    success: list            # [(predicate name, {param: value or 'config.<field>'})]
    config: dict = field(default_factory=dict)

    def fail(self, path: str, msg: str):
        """Raise the one-line TaskError for the field ``path``."""
        raise TaskError(f'{self.source}: {path}: {msg}')

    def resolve(self, cfg) -> dict:
        """Every ``config.<field>`` reference replaced by ``cfg``'s value and checked:
        {'start', 'goal', 'horizon', 'expert_params', 'reward', 'success'}."""
        def val(v, path, check=None):
            if isinstance(v, str) and v.startswith(REF):
                v = getattr(cfg, v[len(REF):])
            if check is not None and not check[0](v):
                self.fail(path, f'{check[1]}, got {v!r}')
            return v
        out = {'start': _resolve_tree(self.start, val, 'start'),
               'goal': _resolve_tree(self.goal, val, 'goal'),
               'horizon': val(self.horizon, 'horizon', _INT1),
               'expert_params': _resolve_tree(self.expert['params'], val, 'expert.params'),
               'reward': {k: val(v, f'reward.{k}', _NUM) for k, v in self.reward.items()}}
        out['success'] = [
            (name, {k: val(v, f'success[{i}].{k}', PARAM_CHECKS[k]) for k, v in p.items()})
            for i, (name, p) in enumerate(self.success)]
        return out

    def match_object(self, objects) -> str:
        """The id of the object this task acts on among ``objects`` ((id, shape) pairs, in
        scene order): the ``index``-th of ``shape``."""
        ids = [i for i, shape in objects if shape == self.object['shape']]
        k = self.object['index']
        if k >= len(ids):
            raise TaskError(f'{self.source}: object: wants {self.object["shape"]} #{k}, the '
                            f'scene has {len(ids)} ({[i for i, _ in objects]})')
        return ids[k]


def _resolve_tree(tree, val, path):
    if isinstance(tree, dict):
        return {k: _resolve_tree(v, val, f'{path}.{k}') for k, v in tree.items()}
    return val(tree, path)


_NUM = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), 'must be a number')
_INT1 = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
         'must be an integer >= 1')


def config_class(kind: str):
    """The config dataclass of the task kind ``kind``."""
    module, _, cfg_name = KINDS[kind]
    return getattr(importlib.import_module(module, __package__), cfg_name)


def has_base(kind: str) -> bool:
    """Whether the task kind sets its object on another object (its config has ``base_id``:
    stack)."""
    return 'base_id' in config_class(kind).__dataclass_fields__


def task_class(kind: str):
    """The class that runs the task kind ``kind``."""
    module, cls, _ = KINDS[kind]
    return getattr(importlib.import_module(module, __package__), cls)


def load_task_spec(source) -> TaskSpec:
    """A TaskSpec from a YAML path or a dict (TaskError naming the field otherwise)."""
    if isinstance(source, dict):
        name, data = '<dict>', source
    else:
        name = str(source)
        try:
            data = yaml.safe_load(Path(source).read_text())
        except OSError as exc:
            raise TaskError(f'{name}: cannot read: {exc.strerror}') from None
        except yaml.YAMLError as exc:
            raise TaskError(f'{name}: not YAML: {str(exc).splitlines()[0]}') from None
    return _Checker(name).spec(data)


class _Checker:
    """Walks a task YAML's tree; ``fail`` raises the one-line error for a field path."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, path: str, msg: str):
        """Raise the one-line TaskError for the field ``path``."""
        raise TaskError(f'{self.source}: {path}: {msg}')

    def mapping(self, v, path, required=(), optional=()) -> dict:
        if not isinstance(v, dict):
            self.fail(path or '(top)', f'must be a mapping, got {type(v).__name__}')
        for k in v:
            if k not in required and k not in optional:
                self.fail(f'{path}.{k}' if path else str(k),
                          f'unknown key; expected one of {[*required, *optional]}')
        for k in required:
            if k not in v:
                self.fail(f'{path}.{k}' if path else k, 'missing')
        return v

    def number(self, v, path, positive=False, ref=True):
        if ref and isinstance(v, str) and v.startswith(REF):
            return v      # checked against the config by _check_refs
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            self.fail(path, f'must be a number or config.<field>, got {v!r}')
        if positive and not v > 0:
            self.fail(path, f'must be > 0, got {v}')
        return v

    def pair(self, v, path):
        if isinstance(v, str) and v.startswith(REF):
            return v
        if not isinstance(v, list) or len(v) != 2:
            self.fail(path, f'must be [lo, hi] or config.<field>, got {v!r}')
        lo, hi = (self.number(x, f'{path}[{i}]', ref=False) for i, x in enumerate(v))
        if lo > hi:
            self.fail(path, f'must have lo <= hi, got {v!r}')
        return v

    def spec(self, data) -> TaskSpec:
        d = self.mapping(data, '', required=TOP_KEYS[:-1], optional=('config',))
        kind = d['task']
        if kind not in KINDS:
            self.fail('task', f'unknown task kind {kind!r}; known: {sorted(KINDS)}')
        obj = self.mapping(d['object'], 'object', required=('shape', 'index', 'id'))
        if obj['shape'] not in ('box', 'cylinder'):
            self.fail('object.shape', f"must be 'box' or 'cylinder', got {obj['shape']!r}")
        if not isinstance(obj['index'], int) or isinstance(obj['index'], bool) \
                or obj['index'] < 0:
            self.fail('object.index', f'must be an integer >= 0, got {obj["index"]!r}')
        if not isinstance(obj['id'], str) or not obj['id']:
            self.fail('object.id', f'must be a non-empty string, got {obj["id"]!r}')
        spec = TaskSpec(self.source, kind, obj, self.start(d['start']), self.goal(d['goal']),
                        self.horizon(d['horizon']), self.expert(kind, d['expert']),
                        self.reward(d['reward']), self.success(d['success']),
                        self.config(kind, d.get('config') or {}))
        if spec.start['yaw']['about'] == 'goal_heading' and 'polar' not in spec.goal:
            self.fail('start.yaw.about', "'goal_heading' needs a polar goal")
        self.check_refs(spec)
        return spec

    def start(self, v) -> dict:
        s = self.mapping(v, 'start', required=('xy', 'yaw'))
        xy = self.mapping(s['xy'], 'start.xy', required=('center', 'half_width'))
        if not (isinstance(xy['center'], str) or
                (isinstance(xy['center'], list) and len(xy['center']) == 2)):
            self.fail('start.xy.center', f'must be [x, y] or config.<field>, '
                                         f'got {xy["center"]!r}')
        if isinstance(xy['center'], list):
            for i, x in enumerate(xy['center']):
                self.number(x, f'start.xy.center[{i}]', ref=False)
        self.number(xy['half_width'], 'start.xy.half_width')
        yaw = self.mapping(s['yaw'], 'start.yaw', required=('about', 'jitter'))
        if yaw['about'] not in ('zero', 'goal_heading'):
            self.fail('start.yaw.about', f"must be 'zero' or 'goal_heading', "
                                         f"got {yaw['about']!r}")
        self.number(yaw['jitter'], 'start.yaw.jitter')
        return s

    def goal(self, v) -> dict:
        g = self.mapping(v, 'goal', optional=('polar', 'offset', 'yaw'))
        if ('polar' in g) == ('offset' in g):
            self.fail('goal', 'must have exactly one of polar, offset')
        if 'polar' in g:
            p = self.mapping(g['polar'], 'goal.polar', required=('distance', 'heading'))
            self.pair(p['distance'], 'goal.polar.distance')
            self.pair(p['heading'], 'goal.polar.heading')
        else:
            o = self.mapping(g['offset'], 'goal.offset', required=('forward', 'lateral'))
            self.pair(o['forward'], 'goal.offset.forward')
            self.number(o['lateral'], 'goal.offset.lateral')
        if 'yaw' in g:
            y = self.mapping(g['yaw'], 'goal.yaw', required=('about', 'jitter'))
            if y['about'] != 'start_yaw':
                self.fail('goal.yaw.about', f"must be 'start_yaw', got {y['about']!r}")
            self.number(y['jitter'], 'goal.yaw.jitter')
        return g

    def horizon(self, v):
        if isinstance(v, str) and v.startswith(REF):
            return v
        if not _INT1[0](v):
            self.fail('horizon', f'{_INT1[1]} or config.<field>, got {v!r}')
        return v

    def expert(self, kind, v) -> dict:
        e = self.mapping(v, 'expert', required=('name',), optional=('params',))
        known = EXPERTS[kind]
        if e['name'] not in known:
            self.fail('expert.name', f'unknown expert {e["name"]!r} for {kind}; known: '
                                     f'{sorted(known)}')
        params = self.mapping(e.get('params') or {}, 'expert.params',
                              required=known[e['name']])
        for k, x in params.items():
            self.number(x, f'expert.params.{k}')
        return {'name': e['name'], 'params': params}

    def reward(self, v) -> dict:
        r = self.mapping(v, 'reward', required=('success_bonus', 'distance_scale'),
                         optional=('yaw_weight', 'effort_scale'))
        self.number(r['success_bonus'], 'reward.success_bonus')
        self.number(r['distance_scale'], 'reward.distance_scale', positive=True)
        self.number(r.get('yaw_weight', 0.0), 'reward.yaw_weight')
        if 'effort_scale' in r:
            self.number(r['effort_scale'], 'reward.effort_scale', positive=True)
        return {'yaw_weight': 0.0, **r}

    def success(self, v) -> list:
        if not isinstance(v, list) or not v:
            self.fail('success', f'must be a non-empty list of predicates, got {v!r}')
        out = []
        for i, item in enumerate(v):
            path = f'success[{i}]'
            if isinstance(item, str):
                item = {item: {}}
            if not isinstance(item, dict) or len(item) != 1:
                self.fail(path, f'must be one {{predicate: {{params}}}}, got {item!r}')
            (name, params), = item.items()
            if name not in PREDICATES:
                self.fail(path, f'unknown predicate {name!r}; known: {sorted(PREDICATES)}')
            _, required, optional = PREDICATES[name]
            params = self.mapping(params or {}, f'{path}.{name}', required=required,
                                  optional=tuple(optional))
            full = {**optional, **params}
            for k, x in full.items():
                if not (isinstance(x, str) and x.startswith(REF)):
                    ok, what = PARAM_CHECKS[k]
                    if not ok(x):
                        self.fail(f'{path}.{k}', f'{what}, got {x!r}')
            out.append((name, full))
        return out

    def config(self, kind, v) -> dict:
        if not isinstance(v, dict):
            self.fail('config', f'must be a mapping, got {type(v).__name__}')
        fields = {f.name: f for f in dataclasses.fields(config_class(kind))}
        out = {}
        for k, x in v.items():
            if k not in fields:
                self.fail(f'config.{k}', f'unknown field of {kind}; known: {sorted(fields)}')
            out[k] = self.typed(x, fields[k], f'config.{k}')
        return out

    def typed(self, x, f, path):
        """``x`` in the type of the config field's default (a list becomes a tuple)."""
        default = f.default
        if isinstance(default, bool):
            ok = isinstance(x, bool)
        elif isinstance(default, (int, float)):
            ok = isinstance(x, (int, float)) and not isinstance(x, bool) and \
                (isinstance(x, int) or not isinstance(default, int))
        elif isinstance(default, tuple):
            ok = isinstance(x, list) and len(x) == len(default) and all(
                isinstance(e, (int, float)) and not isinstance(e, bool) for e in x)
            x = tuple(x) if ok else x
        else:
            ok = isinstance(x, type(default))
        if not ok:
            self.fail(path, f'must be like {default!r}, got {x!r}')
        return x

    def check_refs(self, spec: TaskSpec):
        fields = {f.name for f in dataclasses.fields(config_class(spec.task))}

        def walk(tree, path):
            if isinstance(tree, dict):
                for k, v in tree.items():
                    walk(v, f'{path}.{k}')
            elif isinstance(tree, str) and tree.startswith(REF) and \
                    tree[len(REF):] not in fields:
                self.fail(path, f'{tree!r} names no field of the {spec.task} config')
        for name in ('start', 'goal', 'horizon', 'reward'):
            walk(getattr(spec, name), name)
        walk(spec.expert['params'], 'expert.params')
        for i, (_, p) in enumerate(spec.success):
            walk(p, f'success[{i}]')


def sample_start_goal(r: dict, rng: np.random.Generator):
    """(object_xy, object_yaw, goal_xy, goal_yaw) from a resolved spec's start and goal (the
    draw order in the module docstring)."""
    s, g = r['start'], r['goal']
    hw = s['xy']['half_width']
    xy = np.asarray(s['xy']['center']) + rng.uniform(-hw, hw, 2)
    yj = s['yaw']['jitter']
    yaw = rng.uniform(-yj, yj) if s['yaw']['about'] == 'zero' else None
    if 'polar' in g:
        heading = rng.uniform(*g['polar']['heading'])
        dist = rng.uniform(*g['polar']['distance'])
        goal = xy + dist * np.array([np.cos(heading), np.sin(heading)])
    else:
        o = g['offset']
        heading = None
        goal = xy + np.array([rng.uniform(*o['forward']),
                              rng.uniform(-o['lateral'], o['lateral'])])
    if yaw is None:    # about the goal heading (a polar goal: the loader checks)
        yaw = wrap_angle(heading + rng.uniform(-yj, yj))
    goal_yaw = 0.0
    if 'yaw' in g:
        gj = g['yaw']['jitter']
        goal_yaw = wrap_angle(yaw + rng.uniform(-gj, gj))
    return xy, yaw, goal, goal_yaw


class DeclaredTask:
    """What a spec gives a task class (mixed in): ``cfg`` (the spec's config under the
    caller's overrides), ``declared`` (the spec resolved against it), ``horizon``, and
    ``success`` / ``reward`` from the declared predicates and weights, and the defaults every
    kind shares (``config()``, ``object_z``: the rest height from ``table_height`` and
    ``object_size``, ``initial_state``, ``error``: the planar distance to the goal). The class
    provides ``name``."""

    def bind_spec(self, config, spec) -> None:
        """Set ``spec``, ``cfg``, ``declared``, ``horizon``, ``object_id`` from ``spec`` (None:
        the shipped one; a TaskSpec or a YAML path) under the overrides ``config``."""
        spec = shipped_spec(self.name) if spec is None else \
            spec if isinstance(spec, TaskSpec) else load_task_spec(spec)
        if spec.task != self.name:
            raise TaskError(f'{spec.source}: task: {spec.task!r} is not {self.name!r}')
        cls = config_class(self.name)
        if not isinstance(config, cls):
            config = task_config(cls, {'object_id': spec.object['id'], **spec.config,
                                       **(config or {})}, self.name)
        self.spec, self.cfg = spec, config
        self.declared = spec.resolve(config)
        self.horizon = self.declared['horizon']
        self.object_id = config.object_id

    def config(self) -> dict:
        """The task's settings as a JSON-ready dict (with its name)."""
        return {'task': self.name, **dataclasses.asdict(self.cfg)}

    @property
    def object_z(self) -> float:
        """Height (m) of the object's centre resting on the table."""
        return self.cfg.table_height + self.cfg.object_size[2] / 2

    def scene_objects(self) -> list[tuple[str, tuple]]:
        """(id, size) of the objects an episode needs in the scene, the manipulated one
        first."""
        return [(self.object_id, tuple(self.cfg.object_size))]

    def initial_state(self, reset) -> dict:
        """The task state at the episode's start ``reset`` (a ResetSample)."""
        return {'object_xy': reset.object_xy, 'object_yaw': reset.object_yaw,
                'goal_xy': reset.goal_xy, 'object_z': self.object_z}

    def error(self, state: dict) -> float:
        """Distance (m) of the object's centre to the goal point in the table plane."""
        return float(np.linalg.norm(np.asarray(state['object_xy']) - state['goal_xy']))

    def success(self, state: dict) -> bool:
        """Every declared success predicate holds for ``state``."""
        return bool(all_hold(self.declared['success'], state, {'rest_z': self.object_z}))

    def reward(self, state: dict, action=None) -> float:
        """success_bonus x success - distance / distance_scale - yaw_weight x yaw gap
        (- grasp effort / effort_scale where declared)."""
        r = self.declared['reward']
        value = r['success_bonus'] * float(self.success(state)) \
            - self.error(state) / r['distance_scale']
        if r['yaw_weight']:
            value -= r['yaw_weight'] * yaw_gap(state)
        if r.get('effort_scale'):     # a gentle grasp: the squeeze costs (N / effort_scale)
            value -= float(state.get('grasp_effort', 0.0)) / r['effort_scale']
        return float(value)

    def sample_start_goal(self, rng: np.random.Generator):
        """(object_xy, object_yaw, goal_xy, goal_yaw) drawn as the spec declares."""
        return sample_start_goal(self.declared, rng)
