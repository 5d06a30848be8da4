"""What the policy_trainer node assembles before it calls core/policies/pipeline.train_policy
(ROS-free): the task, the twin (robot + scene + starting values + identified parameters) and
the training budget.

Scene: a reconstructed MJCF (scene_reconstruction's ``scene.xml``: a table and ``object/<id>``
free bodies) or, when none exists, the task's own scene built from its config
(core/tasks/worlds.task_scene_xml). Reconstruction measures geometry, not friction: in a
reconstructed scene the object geoms get the task scenes' contact priority (so the object's
friction, not the larger of the two surfaces', rules its contacts, as in the emulated cell)
and the friction prior ``object_friction_prior``; the identified parameters then override it.
The task's ``object_id``, ``object_size`` and ``table_height`` come from the scene's object:
the one asked for by id, else the one the task's YAML declares (``object``: the first box for
the shipped tasks).

Budget: ``total_steps`` counts environment steps of training in the twin, i.e. twin episodes
for one-shot tasks (slide_to_target: one action per episode) and control ticks for closed-loop
tasks (push_to_pose: up to ``max_steps`` per episode). See :func:`budget_config`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import mujoco

from .parameters import ParameterError, ParameterSet
from .tasks import TaskError, get_task, task_names
from .tasks.spec import has_base, shipped_spec
from .tasks.worlds import (
    OBJECT_GEOM_PRIORITY,
    OBJECT_PREFIX,
    TaskObject,
    TaskTable,
    task_scene_xml,
)
from .twin import Twin

__all__ = ['SceneError', 'SceneInfo', 'SceneObject', 'TwinInputs', 'budget_config',
           'build_task_and_twin', 'load_parameter_set', 'scene_info_from_mjcf',
           'select_object', 'steps_per_episode', 'training_steps']

SCENE_TASK_FIELDS = ('object_id', 'object_size', 'table_height')


class SceneError(ValueError):
    """The scene cannot serve the task (no box object, unreadable MJCF, unknown object id)."""


@dataclass
class SceneObject:
    """One object of the training scene: id, shape, full extents (m), mass (kg) and friction."""
    id: str
    shape: str                                   # box | cylinder | mesh
    size: tuple[float, float, float]             # full extents, m
    mass: float = 0.0


@dataclass
class SceneInfo:
    """A reconstructed scene: its MJCF and the geometry the task needs."""
    mjcf_path: str
    table_height: float
    objects: list[SceneObject] = field(default_factory=list)
    source: str = ''                             # 'scene topic', 'scene_path parameter', ...


@dataclass
class TwinInputs:
    """Everything that decides the twin, as recorded in the train stage's manifest (so an
    evaluation rebuilds the same twin)."""
    task: str
    task_config: dict
    scene: dict                                  # {'source': 'task_default'|..., ...}
    start_values: dict                           # known gains + priors (sim_server's start)
    parameters_path: str
    parameter_values: dict
    timestep: float


# ------------------------------------------------------------------------ scene
def scene_info_from_mjcf(path, source: str = 'scene_path') -> SceneInfo:
    """Object geometry and table height read from a reconstructed MJCF."""
    path = Path(path)
    if not path.is_file():
        raise SceneError(f'scene MJCF {path} does not exist')
    try:
        model = mujoco.MjModel.from_xml_path(str(path))
    except ValueError as exc:
        raise SceneError(f'cannot load scene MJCF {path}: {str(exc).splitlines()[0]}') \
            from None
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    table = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, 'table')
    height = (float(data.geom_xpos[table, 2] + model.geom_size[table, 2]) if table >= 0
              else 0.0)
    objects = []
    for j in range(model.njnt):
        if model.jnt_type[j] != mujoco.mjtJoint.mjJNT_FREE:
            continue
        b = int(model.jnt_bodyid[j])
        name = model.body(b).name
        if not name.startswith(OBJECT_PREFIX):
            continue
        geoms = [g for g in range(model.ngeom) if model.geom_bodyid[g] == b
                 and model.geom_contype[g] | model.geom_conaffinity[g]]
        shape, size = 'mesh', (0.0, 0.0, 0.0)
        if len(geoms) == 1 and model.geom_type[geoms[0]] == mujoco.mjtGeom.mjGEOM_BOX:
            shape, size = 'box', tuple(2 * float(s) for s in model.geom_size[geoms[0]])
        elif len(geoms) == 1 and model.geom_type[geoms[0]] == mujoco.mjtGeom.mjGEOM_CYLINDER:
            r, h = model.geom_size[geoms[0], :2]
            shape, size = 'cylinder', (2 * float(r), 2 * float(r), 2 * float(h))
        objects.append(SceneObject(name[len(OBJECT_PREFIX):], shape, size,
                                   float(model.body_mass[b])))
    return SceneInfo(str(path.resolve()), height, objects, source)


def select_object(scene: SceneInfo, object_id: str = '',
                  shapes: tuple[str, ...] = ('box',)) -> SceneObject:
    """The scene's object the task manipulates: ``object_id`` (one of ``shapes``: a task
    told its object is a cylinder takes one), or the first box."""
    boxes = [o for o in scene.objects if o.shape == 'box']
    if object_id:
        hit = [o for o in scene.objects if o.id == object_id]
        if not hit:
            raise SceneError(f'object {object_id!r} is not in the scene ({scene.source}: '
                             f'{[o.id for o in scene.objects]})')
        if hit[0].shape not in shapes:
            raise SceneError(f'object {object_id!r} is a {hit[0].shape}; the task acts on '
                             f'{" and ".join(shapes)} objects')
        return hit[0]
    if not boxes:
        raise SceneError(f'the scene ({scene.source} {scene.mjcf_path}) has no box object for '
                         f'the task; objects: {[(o.id, o.shape) for o in scene.objects]}')
    return boxes[0]


def declared_object(task_name: str, scene: SceneInfo) -> str:
    """The id of the object the task's YAML declares (``object``: the index-th reconstructed
    object of a shape), or '' when the scene has no such object (select_object then says what
    the scene lacks)."""
    try:
        return shipped_spec(task_name).match_object([(o.id, o.shape) for o in scene.objects])
    except TaskError:
        return ''


def select_base(task_name: str, scene: SceneInfo, object_id: str) -> dict:
    """A task with a base (stack): the scene's box it sets the object on, as task config
    entries (``base_id``, ``base_size``): the task's declared ``base_id`` where the scene has
    it as a box other than the object, else the first other box. {} for a task without a
    base; SceneError when the scene has no other box."""
    spec = shipped_spec(task_name)
    if not has_base(spec.task):
        return {}
    others = [o for o in scene.objects if o.shape == 'box' and o.id != object_id]
    if not others:
        raise SceneError(f'{task_name} sets the object on a second box (its base); the scene '
                         f'({scene.source} {scene.mjcf_path}) has none besides {object_id!r}: '
                         f'{[(o.id, o.shape) for o in scene.objects]}')
    declared = spec.config.get('base_id')
    base = next((o for o in others if o.id == declared), others[0])
    return {'base_id': base.id, 'base_size': tuple(float(v) for v in base.size)}


def _reconstructed_scene_spec(mjcf_path: str, friction_prior: float) -> mujoco.MjSpec:
    try:
        spec = mujoco.MjSpec.from_file(str(mjcf_path))
    except ValueError as exc:
        raise SceneError(f'cannot load scene MJCF {mjcf_path}: {str(exc).splitlines()[0]}') \
            from None
    for g in spec.geoms:
        if g.name.startswith(OBJECT_PREFIX) and (g.contype or g.conaffinity):
            g.priority = OBJECT_GEOM_PRIORITY
            g.friction[0] = friction_prior
    return spec


# ------------------------------------------------------------------------ parameters
def load_parameter_set(path) -> ParameterSet:
    """An identified ParameterSet (YAML/JSON); a directory means its ``parameters.yaml`` (an
    ``identify_NNN`` stage folder). ParameterError with the reason otherwise."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / 'parameters.yaml'
    if not p.is_file():
        raise ParameterError(f'parameter set {p} does not exist')
    try:
        ps = ParameterSet.load(p)
    except ParameterError as exc:
        text = str(exc)
        raise ParameterError(text if str(p) in text else f'parameter set {p}: {text}') \
            from None
    if not len(ps):
        raise ParameterError(f'parameter set {p} holds no parameters')
    return ps


# ------------------------------------------------------------------------ task + twin
def build_task_and_twin(robot, task_name: str, *, scene: SceneInfo | None = None,
                        object_id: str = '', task_config: dict | None = None,
                        start_values: dict | None = None,
                        parameters: ParameterSet | dict | None = None,
                        parameters_path: str = '', timestep: float = 0.001,
                        object_friction_prior: float = 0.5, object_mass_prior: float = 0.2,
                        overrides: dict | None = None):
    """(task, twin, TwinInputs). Raises TaskError (unknown task / bad config), SceneError,
    ParameterError (names the twin lacks, invalid values), UnstableTwinError (``parameters``
    make the twin diverge in a small move of the arm: Twin.check_stable), TwinError.

    ``task_config`` (a checkpoint's) wins over the scene's geometry; ``overrides`` (task
    config entries, e.g. the evaluation harness's start position, ``object_shape`` and goal
    distribution) apply on top of both; ``start_values`` that
    name elements this twin lacks are skipped (sim_server does the same), ``parameters``
    must all exist in the twin."""
    if task_name not in task_names():
        raise TaskError(f'unknown task {task_name!r}; known tasks: {task_names()}')
    # The caller's overrides apply last; ``overrides`` then collects the task's config (a
    # checkpoint's, or the scene's geometry) under them. (Before, the argument was shadowed
    # by the checkpoint's config here, so the harness's start, shape, goals and speed cap
    # never reached the task: a cylinder cell failed 'the task acts on box objects'.)
    extra = dict(overrides or {})
    overrides = dict(task_config or {})
    overrides.pop('task', None)
    if scene is not None and not task_config:
        obj = select_object(scene, object_id or declared_object(task_name, scene),
                            ('box', extra.get('object_shape', 'box')))
        overrides.update(object_id=obj.id, object_size=tuple(obj.size),
                         table_height=float(scene.table_height),
                         **select_base(task_name, scene, obj.id))
    elif object_id and not task_config:
        overrides['object_id'] = object_id
    overrides.update(extra)
    task = get_task(task_name, robot, overrides or None)
    if not getattr(task, 'trainable', True):
        raise TaskError(f'{task_name}: training is not implemented for this task yet (its '
                        'scripted expert runs: r2s2r expert-check --task ' + task_name + ')')
    cfg = task.config()
    if scene is not None:
        ids = [o.id for o in scene.objects]
        if task.object_id not in ids:
            raise SceneError(f'the task\'s object {task.object_id!r} is not in the scene '
                             f'{scene.mjcf_path} ({ids})')
        world = _reconstructed_scene_spec(scene.mjcf_path, object_friction_prior)
        scene_record = {'source': scene.source or 'reconstruction',
                        'mjcf_path': scene.mjcf_path, 'object_friction_prior':
                        object_friction_prior}
    else:
        world = task_scene_xml(
            TaskObject(task.object_id, tuple(cfg['object_size']), object_mass_prior,
                       object_friction_prior),
            TaskTable(height=float(cfg.get('table_height', 0.0))))
        scene_record = {'source': 'task_default', 'object_friction_prior':
                        object_friction_prior, 'object_mass_prior': object_mass_prior}
    twin = Twin(robot, world, timestep=timestep)
    start = {}
    for name, value in (start_values or {}).items():
        try:
            twin.validate_names([name])
            start[name] = float(value)
        except ParameterError:
            continue
    twin.set_parameters(start)
    values = parameters.values() if isinstance(parameters, ParameterSet) else \
        {n: float(v) for n, v in (parameters or {}).items()}
    if values:
        twin.validate_names(list(values))
        try:
            twin.set_parameters(values)
        except ValueError as exc:
            raise ParameterError(str(exc)) from None
        twin.check_stable()     # UnstableTwinError: these values blow the twin up
    inputs = TwinInputs(task_name, cfg, scene_record, start, str(parameters_path),
                        dict(values), float(timestep))
    return task, twin, inputs


# ------------------------------------------------------------------------ budget
def training_steps(config, one_shot: bool, steps_per_episode: int = 1) -> int:
    """Environment steps a TrainConfig spends in the twin (BC epochs and evaluations are
    not steps). Closed-loop tasks: demos x the episode's step cap."""
    if not one_shot:
        return config.demos * steps_per_episode
    si = config.self_imitation_rounds * config.self_imitation_episodes if config.hindsight \
        else 0
    return config.demos + si + config.ppo.iterations * config.ppo.batch_size


def budget_config(config, total_steps: int, one_shot: bool, steps_per_episode: int = 1,
                  min_demos: int = 4):
    """``config`` with its episode counts scaled so training spends about ``total_steps``
    environment steps (0: ``config`` unchanged).

    One-shot tasks: demos, self-imitation episodes per round and PPO iterations are scaled by
    the same factor (their proportions stay the node's); PPO keeps its batch size (its
    advantage normalisation needs a batch), so a budget below a batch gets no PPO. At least
    ``min_demos`` demonstrations. Closed-loop tasks train by imitation only: demos =
    total_steps / steps_per_episode. BC epochs and evaluation trials are not steps."""
    if total_steps <= 0:
        return config
    if not one_shot:
        return replace(config, demos=max(min_demos, math.ceil(total_steps / steps_per_episode)))
    base = training_steps(config, True)
    f = total_steps / max(base, 1)
    si_episodes = round(config.self_imitation_episodes * f)
    ppo = replace(config.ppo, iterations=round(config.ppo.iterations * f))
    return replace(config, demos=max(min_demos, round(config.demos * f)),
                   self_imitation_episodes=si_episodes,
                   self_imitation_rounds=config.self_imitation_rounds if si_episodes else 0,
                   ppo=ppo)


def steps_per_episode(task) -> int:
    """Environment steps of one episode: 1 for one-shot tasks, the step cap otherwise."""
    return 1 if getattr(task, 'one_shot', False) else int(getattr(task.cfg, 'max_steps', 1))


def train_config_from(values):
    """The TrainConfig of the policy_trainer's parameters (``values``: a mapping or an object
    with the parameter names as attributes: demos, bc_epochs, self_imitation_rounds,
    self_imitation_episodes, ppo_iterations, ppo_batch_size, ppo_lr, randomization_widen,
    randomization_min_relative, eval_trials, seed); the other PPO settings keep their
    defaults."""
    from dataclasses import asdict

    from .policies.pipeline import TrainConfig
    from .policies.ppo import PPOConfig
    get = values.get if isinstance(values, dict) else lambda name: getattr(values, name)
    base = TrainConfig()
    return TrainConfig(
        demos=get('demos'), bc_epochs=get('bc_epochs'),
        self_imitation_rounds=get('self_imitation_rounds'),
        self_imitation_episodes=get('self_imitation_episodes'),
        ppo=PPOConfig(**{**asdict(base.ppo), 'iterations': get('ppo_iterations'),
                         'batch_size': get('ppo_batch_size'), 'lr': get('ppo_lr')}),
        randomization_widen=get('randomization_widen'),
        randomization_min_relative=get('randomization_min_relative'),
        eval_trials=get('eval_trials'), seed=get('seed'))


def training_manifest(checkpoint_path) -> dict | None:
    """The train stage's manifest.json beside a checkpoint folder, if it is one."""
    import json
    p = Path(checkpoint_path).parent / 'manifest.json'
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get('stage') == 'train' else None


def trained_twin_inputs(manifest: dict, seed: int) -> dict:
    """What rebuilds the twin a checkpoint was trained in, from its train manifest:
    ``scene_mjcf`` / ``scene_source`` ('' = none recorded), ``start_values``,
    ``parameter_values``, ``friction_prior`` (None = the node's) and the training ``seed``
    (``seed`` when the manifest has none)."""
    rec = manifest['inputs'].get('scene', {})
    pars = manifest['parameters']
    return {'scene_mjcf': rec.get('mjcf_path') or '', 'scene_source': rec.get('source', ''),
            'friction_prior': rec.get('object_friction_prior'),
            'start_values': pars.get('start_values'),
            'parameter_values': pars.get('parameter_values'),
            'seed': pars.get('train_config', {}).get('seed', seed)}
