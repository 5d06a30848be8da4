"""Object identification on emulated cells drawn from the prior (``python -m
real2sim2real_ros.bench object_id``).

Per cell: hidden object friction U(0.2, 1.0) and mass U(0.05, 1.0) kg (centre of mass offsets
and rounded edges as the cell spec has them), arm damping 0.5-2x the URDF's and a command
latency of 0-40 ms. The pipeline sees the cell as the node does: noisy joint states (100 Hz)
and tracked object poses (the cell's true poses plus tracker noise: 2.5 mm, 1 deg, at
``track_rate`` Hz), and the scene's geometry (as reconstruction measures it: the spec's sizes
and poses, masses from volume x 600 kg/m^3). At most 5 probe executions: 2 arm multi-sines
(arm fit), 3 strike probes (each strikes every object once; 2 fitted, the last held out).

The harness functions (``cell_from_prior``, ``scene_xml``, ``execute_probe``,
``run_object_identification``) are what test/integration/test_object_identification.py uses too.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import numpy as np
import yaml

from ..core.cell_spec import default_cell_spec_path, load_cell_spec
from ..core.joint_trajectory import JointTrajectoryCommand
from ..core.parameters import ParameterSpec
from ..core.sysid.fit import Recording, identify
from ..core.sysid.object_fit import (
    ObjectFitOptions,
    ObjectTrack,
    StrikeRecording,
    ensure_object_priority,
    final_object_fits,
    identify_objects,
    quat_yaw,
    rest_spread,
    strike_objects,
    table_region,
)
from ..core.sysid.object_probes import StrikeConfig, plan_strike_probe
from ..core.sysid.probes import ProbeError, multisine_probe
from ..core.twin import Twin

URDF_DAMPING = np.array([0.5, 0.5, 0.5, 0.1, 0.1, 0.1])
DENSITY = 600.0
FRICTION_PRIOR = (0.5, 0.2, 1.0)
MASS_BOUNDS = (0.05, 1.0)
COM_BOUNDS = (-0.015, 0.015)   # m, lateral centre of mass offsets (boxes; 8 x 6 cm here)
OBJECT_SOLREF = '0.008 1'


# ------------------------------------------------------------------ cells and scenes

def cell_from_prior(seed: int, *, low_cylinder: bool = True, arm: bool = True) -> dict:
    """A cell spec dict: the default cell with hidden values drawn from the prior.

    low_cylinder: the default cell's cylinder is 8 cm tall on a 6 cm base (it would topple
    when sliding with a friction above ~0.9); the drawn cells use a 7 cm wide, 5 cm tall one.
    """
    rng = np.random.default_rng(seed)
    data = yaml.safe_load(open(default_cell_spec_path()))
    data = copy.deepcopy(data)
    data['name'] = f'prior_{seed}'
    data['seed'] = int(seed)
    data['cameras'] = []
    for o in data['objects']:
        o['friction'][0] = float(round(rng.uniform(0.2, 1.0), 3))
        o['mass'] = float(round(rng.uniform(0.05, 1.0), 3))
        _ = rng.uniform(-1, 1, 3)      # (was: centre of mass offsets; the spec's are kept)
        if o['shape'] == 'cylinder' and low_cylinder:
            o['size'] = [0.07, 0.05]
        jitter = rng.uniform(-0.03, 0.03, 2)
        o['pose']['xyz'] = [float(o['pose']['xyz'][0] + jitter[0]),
                            float(o['pose']['xyz'][1] + jitter[1])]
        o['pose']['yaw'] = float(rng.uniform(-np.pi, np.pi))
    if arm:
        r = data['robot']
        r['joint_damping'] = [float(round(v, 4)) for v in URDF_DAMPING * rng.uniform(0.5, 2, 6)]
        r['command_latency'] = float(rng.integers(0, 41)) / 1000.0
        r['joint_frictionloss'] = [0.3, 0.3, 0.3, 0.05, 0.05, 0.05]
        r['armature'] = [0.1, 0.1, 0.1, 0.02, 0.02, 0.02]
    return data


def scene_xml(spec, density: float = DENSITY, friction: float = FRICTION_PRIOR[0]) -> str:
    """The scene as reconstruction gives it (core/reconstruction/scene_mjcf.py): table box +
    one free primitive per object at its spec pose, mass from volume x density, friction the
    prior, contact priority 1 and solref 0.008 s."""
    t = spec.table
    bodies = []
    for o in spec.objects:
        name = f'object/{o.id}'
        if o.shape == 'box':
            x, y, z = o.size
            mass = density * x * y * z
            inertia = [mass * (y * y + z * z) / 12, mass * (x * x + z * z) / 12,
                       mass * (x * x + y * y) / 12]
            geom = f'type="box" size="{x / 2} {y / 2} {z / 2}"'
        else:
            d, h = o.size
            mass = density * np.pi * d * d / 4 * h
            r = d / 2
            inertia = [mass * (3 * r * r + h * h) / 12] * 2 + [mass * r * r / 2]
            geom = f'type="cylinder" size="{r} {h / 2}"'
        q = [np.cos(o.yaw / 2), 0, 0, np.sin(o.yaw / 2)]
        bodies.append(
            f'<body name="{name}" pos="{o.xyz[0]} {o.xyz[1]} {t.height + o.half_height}" '
            f'quat="{q[0]} {q[1]} {q[2]} {q[3]}"><freejoint name="{name}"/>'
            f'<inertial pos="0 0 0" mass="{mass:.6g}" diaginertia="{inertia[0]:.6g} '
            f'{inertia[1]:.6g} {inertia[2]:.6g}"/>'
            f'<geom name="{name}" {geom} condim="4" priority="1" friction="{friction} 0.005 '
            f'0.0001" solref="{OBJECT_SOLREF}"/></body>')
    return (f'<mujoco model="scene"><option cone="elliptic"/><worldbody>'
            f'<geom name="table" type="box" size="{t.size[0] / 2} {t.size[1] / 2} 0.02" '
            f'pos="{t.center[0]} {t.center[1]} {t.height - 0.02}"/>'
            + ''.join(bodies) + '</worldbody></mujoco>')


def object_specs(twin: Twin, ids=None) -> list[ParameterSpec]:
    specs = []
    for oid in ids or twin.object_ids:
        mass0 = float(np.clip(twin.get_parameter(f'body/{oid}/mass'), *MASS_BOUNDS))
        specs.append(ParameterSpec(f'geom/{oid}/friction', *FRICTION_PRIOR))
        specs.append(ParameterSpec(f'body/{oid}/mass', mass0, *MASS_BOUNDS))
        for axis in 'xy':
            specs.append(ParameterSpec(f'body/{oid}/com_offset_{axis}', 0.0, *COM_BOUNDS))
    return specs


def arm_specs(twin: Twin) -> list[ParameterSpec]:
    specs = [ParameterSpec(f'joint/{n}/damping', d, 0.0, 4 * d)
             for n, d in zip(twin.joint_names, URDF_DAMPING)]
    specs.append(ParameterSpec('global/command_latency', 0.01, 0.0, 0.06, scale=0.01))
    specs.append(ParameterSpec('global/gravity_compensation', 1.0, 0.8, 1.1, scale=0.1))
    return specs


# ------------------------------------------------------------------ executing on the cell

@dataclass
class Tracker:
    """The cell's true object poses plus tracker noise, at ``rate`` Hz."""
    rate: float = 15.0
    position_noise: float = 0.0025
    yaw_noise: float = np.radians(1.0)
    seed: int = 0
    rng: np.random.Generator = field(init=False)

    def __post_init__(self):
        self.rng = np.random.default_rng(self.seed)

    def observe(self, world) -> dict:
        out = {}
        for oid, (xyz, quat) in world.object_poses().items():
            p = np.asarray(xyz, float) + self.rng.normal(0, self.position_noise, 3) * \
                np.array([1, 1, 0.4])
            out[oid] = (p, quat_yaw(quat) + self.rng.normal(0, self.yaw_noise))
        return out


def execute_probe(world, probe, tracker: Tracker | None = None, joint_period: float = 0.01,
                  after: float = 0.3):
    """Run ``probe`` on an EmulatedWorld from where it is; record the noisy joint states and
    (with a tracker) the tracked object poses. Returns (Recording, {id: ObjectTrack})."""
    ref0 = world.controller_state()['reference_positions']
    q0, t0 = world.joint_positions(), world.time
    world.set_trajectory(JointTrajectoryCommand(probe.joint_names, probe.times,
                                                probe.positions, probe.velocities), now=t0)
    ts, qs = [], []
    tt, obs = [], []
    next_track = 0.0
    while world.time - t0 < probe.duration + after:
        world.step_for(joint_period)
        t = world.time - t0
        ts.append(t)
        qs.append(world.joint_positions())
        if tracker is not None and t + 1e-9 >= next_track:
            tt.append(t)
            obs.append(tracker.observe(world))
            next_track += 1.0 / tracker.rate
    rec = Recording(np.array(ts), np.array(qs), q0, probe.times, probe.positions,
                    probe.velocities, None, ref0, name=probe.name)
    tracks = {}
    if tracker is not None:
        for oid in obs[0]:
            tracks[oid] = ObjectTrack(np.array(tt), np.array([o[oid][0] for o in obs]),
                                      np.array([o[oid][1] for o in obs]))
    return rec, tracks


def _stamp(t: float) -> dict:
    ns = int(round(t * 1e9))
    return {'sec': ns // 1_000_000_000, 'nanosec': ns % 1_000_000_000}


def write_probe_bags(folder, rec: Recording, tracks: dict, strikes, info: dict,
                     t0: float = 1000.0):
    """What the node records for one strike probe, from an emulated execution: an executor
    bag (command stamped to start at ``t0``, joint states stamped t0 + t) turned into a strike
    probe bag with the tracked poses. Returns the strike bag's path."""
    from pathlib import Path

    from ..core.bag_io import BagWriter
    from ..core.sysid.bags import write_strike_bag
    folder = Path(folder)
    names = [f'j{i}' for i in range(rec.positions.shape[1])] if not info.get('joints') \
        else info['joints']
    exe = folder / 'trajectory'
    with BagWriter(exe) as bag:
        bag.add_topic('/joint_trajectory', 'trajectory_msgs/msg/JointTrajectory')
        bag.add_topic('/joint_states', 'sensor_msgs/msg/JointState')
        points = [{'positions': list(map(float, p)), 'velocities': list(map(float, v)),
                   'time_from_start': _stamp(float(t))}
                  for t, p, v in zip(rec.traj_times, rec.traj_positions, rec.traj_velocities)]
        bag.write('/joint_trajectory', int((t0 - 0.05) * 1e9), {
            'header': {'stamp': _stamp(t0), 'frame_id': ''}, 'joint_names': names,
            'points': points})
        pre = np.arange(-0.1, 0.0, 0.01)
        for t in pre:
            bag.write('/joint_states', int((t0 + t + 0.002) * 1e9), {
                'header': {'stamp': _stamp(t0 + t), 'frame_id': ''}, 'name': names,
                'position': list(map(float, rec.q0))})
        for t, q in zip(rec.times, rec.positions):
            bag.write('/joint_states', int((t0 + t + 0.002) * 1e9), {
                'header': {'stamp': _stamp(t0 + t), 'frame_id': ''}, 'name': names,
                'position': list(map(float, q))})
    msgs = []
    if tracks:
        times = next(iter(tracks.values())).times
        for k, t in enumerate(times):
            poses = []
            for tr in tracks.values():
                p, y = tr.positions[k], tr.yaws[k]
                poses.append({'position': {'x': float(p[0]), 'y': float(p[1]),
                                           'z': float(p[2])},
                              'orientation': {'w': float(np.cos(y / 2)), 'x': 0.0, 'y': 0.0,
                                              'z': float(np.sin(y / 2))}})
            msgs.append((int((t0 + t + 0.03) * 1e9), {
                'header': {'stamp': _stamp(t0 + t), 'frame_id': 'world'},
                'ids': list(tracks), 'poses': poses, 'num_points': [100] * len(tracks),
                'fit_residual': [0.001] * len(tracks)}))
    info = dict(info, strikes=[s.to_dict() for s in strikes])
    return write_strike_bag(exe, folder / 'strike_probe', msgs, info)


def tracked_now(world, tracker: Tracker, frames: int = 5) -> dict:
    """Current poses {id: (xyz, yaw)} as the mean of a few tracker frames."""
    obs = [tracker.observe(world) for _ in range(frames)]
    out = {}
    for oid in obs[0]:
        xyz = np.mean([o[oid][0] for o in obs], axis=0)
        yaws = np.array([o[oid][1] for o in obs])
        out[oid] = (xyz, float(np.arctan2(np.sin(yaws).mean(), np.cos(yaws).mean())))
    return out


# ------------------------------------------------------------------ one cell

@dataclass
class CaseResult:
    spec: object
    truth: dict
    arm_fit: object
    object_fit: object
    probes: int
    wall: dict
    skipped: list
    recordings: list = field(default_factory=list)
    twin: object = None
    validation: object = None      # the fit without the last strike probe, scored on it
    heldout_spread: float = float('nan')   # m, rest_spread of the held-out probe (truth)


def arm_twin(robot, spec, scene: str | None, arm_values: dict | None = None) -> Twin:
    """Twin with the cell's servo gains (the controller configuration, known)."""
    names = robot.joint_names
    gains = {f'actuator/{n}/kp': spec.robot.kp[i] for i, n in enumerate(names)}
    gains.update({f'actuator/{n}/kv': spec.robot.kv[i] for i, n in enumerate(names)})
    fl = spec.robot.per_joint('joint_frictionloss', len(names))
    ar = spec.robot.per_joint('armature', len(names))
    gains.update({f'joint/{n}/frictionloss': fl[i] for i, n in enumerate(names)})
    gains.update({f'joint/{n}/armature': ar[i] for i, n in enumerate(names)})
    twin = Twin(robot, scene, parameters=gains)
    if arm_values:
        twin.set_parameters(arm_values)
    return twin


def run_object_identification(robot, spec, *, arm: str = 'identify', strike_probes: int = 3,
                              tracker: Tracker | None = None, nthread: int = 2,
                              options: ObjectFitOptions | None = None,
                              config: StrikeConfig | None = None, object_ids=None,
                              progress=print, world=None) -> CaseResult:
    """The whole identification on one emulated cell: arm probes (arm='identify': 2
    multi-sines fitted; 'truth': the arm's true values, no arm probes), then strike probes
    planned round by round from the tracked poses and the fit so far (the last held out).
    world: the emulated cell to probe (default: ``core.world.make_world(spec)``, the spec's
    engine)."""
    from ..core.world import make_world
    tracker = tracker or Tracker(seed=spec.seed)
    world = world if world is not None else make_world(spec)
    world.reset()
    world.step_for(0.3)
    truth = spec.hidden_truth(list(robot.joint_names))
    scene = scene_xml(spec)
    wall = {}
    probes = 0
    arm_fit = None
    if arm == 'identify':
        center = np.asarray(spec.robot.initial_positions)
        t0 = time.perf_counter()
        recs = []
        for s in range(2):
            p = multisine_probe(robot.joint_names, center, robot.lower, robot.upper,
                                robot.velocity_limits, duration=3.0, amplitude=0.35,
                                velocity_fraction=0.5, seed=s, name=f'arm_{s}')
            rec, _ = execute_probe(world, p, after=0.5)
            recs.append(rec)
            probes += 1
        wall['arm_execute_s'] = time.perf_counter() - t0
        twin = arm_twin(robot, spec, None)
        t0 = time.perf_counter()
        arm_fit = identify(twin, arm_specs(twin), recs, nthread=nthread)
        wall['arm_fit_s'] = time.perf_counter() - t0
        arm_values = arm_fit.parameters.values()
    else:
        arm_values = {k: v for k, v in truth.items()
                      if k.startswith('joint/') and k.endswith('/damping')}
        arm_values['global/command_latency'] = truth['global/command_latency']
        arm_values['global/gravity_compensation'] = truth['global/gravity_compensation']
    twin = arm_twin(robot, spec, scene, arm_values)
    ensure_object_priority(twin)
    table = table_region(twin)
    specs = object_specs(twin, object_ids)
    prior_arm = {s.name: s.prior for s in arm_specs(twin)} if arm == 'identify' else None
    friction = {s.name.split('/')[1]: (s.lower, s.prior, s.upper) for s in specs
                if s.name.endswith('/friction')}
    strike_recs, previous, skipped = [], {}, []
    fit = None
    t_exec = t_fit = 0.0
    for r in range(strike_probes):
        poses = tracked_now(world, tracker)
        objs = [o for o in strike_objects(twin, poses)
                if object_ids is None or o.id in object_ids]
        try:
            plan = plan_strike_probe(robot, objs, table,
                                     world.controller_state()['reference_positions'], friction,
                                     config, previous=previous, name=f'strike_{r}')
        except ProbeError as exc:
            if r == 0:
                raise
            skipped.append({'*': f'probe {r}: {exc}'})
            break
        skipped.append(plan.skipped)
        t0 = time.perf_counter()
        rec, tracks = execute_probe(world, plan.probe, tracker)
        t_exec += time.perf_counter() - t0
        probes += 1
        strike_recs.append(StrikeRecording(rec, tracks, plan.strikes, f'strike_{r}'))
        for s in plan.strikes:
            previous.setdefault(s.object_id, []).append(s.heading)
        if progress:
            progress(f'  strike {r}: ' + ', '.join(
                f'{s.object_id} {np.degrees(s.heading):.0f} deg {s.speed:.2f} m/s'
                for s in plan.strikes) + (f'; skipped {plan.skipped}' if plan.skipped else ''))
        if r < strike_probes - 1:
            t0 = time.perf_counter()
            fit = identify_objects(twin, specs, strike_recs, options=options, nthread=nthread)
            t_fit += time.perf_counter() - t0
            for s in specs:
                if s.name.endswith('/friction'):
                    e = fit.parameters[s.name]
                    friction[s.name.split('/')[1]] = (
                        e.lower_95 if e.identified else s.lower, e.value,
                        e.upper_95 if e.identified else s.upper)
    t0 = time.perf_counter()
    true_objects = {s.name: truth[s.name] for s in specs}   # the scene is in the cell's frame
    fit, validation = final_object_fits(twin, specs, strike_recs, options=options,
                                        nthread=nthread, arm_priors=prior_arm,
                                        reference=true_objects)
    wall['object_final_fit_s'] = time.perf_counter() - t0
    wall['strike_execute_s'] = t_exec
    wall['object_intermediate_fits_s'] = t_fit
    # The held-out floor set by contact sensitivity: the start pose is the mean of the last 5
    # tracked frames before a push.
    spread = rest_spread(twin, strike_recs[-1], true_objects,
                         position_sigma=tracker.position_noise / np.sqrt(5),
                         yaw_sigma=tracker.yaw_noise / np.sqrt(5), options=options) \
        if len(strike_recs) > 1 else float('nan')
    return CaseResult(spec, truth, arm_fit, fit, probes, wall, skipped, strike_recs, twin,
                      validation, spread)


def summarize(case: CaseResult) -> list[dict]:
    rows = []
    for e in case.object_fit.parameters:
        t = case.truth.get(e.name)
        offset = '/com_offset_' in e.name     # near zero: its error is in metres
        rows.append({'cell': case.spec.name, 'name': e.name, 'truth': t, 'value': e.value,
                     'lower_95': e.lower_95, 'upper_95': e.upper_95,
                     'identified': e.identified,
                     'error': (e.value - t) if offset else (e.value - t) / t,
                     'covered': bool(e.lower_95 <= t <= e.upper_95)})
    return rows


def main(cells: int = 6, seed0: int = 300, arm: str = 'identify') -> dict:
    from ..core.robot_description import default_cell_urdf, load_robot
    robot = load_robot(default_cell_urdf())
    rows, cases = [], []
    t_all = time.perf_counter()
    for k in range(cells):
        spec = load_cell_spec(cell_from_prior(seed0 + k))
        print(f'cell {spec.name}: ' + ', '.join(
            f'{o.id} mu={o.friction[0]:.3f} m={o.mass:.3f}' for o in spec.objects))
        t0 = time.perf_counter()
        case = run_object_identification(robot, spec, arm=arm, progress=None)
        f = case.object_fit
        case.wall['total_s'] = time.perf_counter() - t0
        print(f'  {case.probes} probes, {case.wall["total_s"]:.1f} s '
              f'({", ".join(f"{k} {v:.1f}" for k, v in case.wall.items() if k != "total_s")});'
              f' held-out rest error {1e3 * f.heldout_error_before:.1f} -> '
              f'{1e3 * f.heldout_error_after:.1f} mm (true parameters '
              f'{1e3 * f.heldout_error_reference:.1f}, start-pose spread '
              f'{1e3 * case.heldout_spread:.1f}; along the path '
              f'{1e3 * f.heldout_along_before:.1f} -> {1e3 * f.heldout_along_after:.1f}), '
              f'joints {1e3 * f.heldout_joint_before:.3f} -> {1e3 * f.heldout_joint_after:.3f}'
              f' mrad; arm worst {_arm_worst(case):.1%}; dropped {f.dropped or "none"}; '
              f'not struck {[k for s in case.skipped for k in s] or "none"}')
        for r in summarize(case):
            err = (f"{1e3 * r['error']:+.1f} mm" if '/com_offset_' in r['name']
                   else f"{r['error']:+.1%}")
            print(f"    {r['name']:28s} truth {r['truth']:.3f} est {r['value']:.3f} "
                  f"[{r['lower_95']:.3f}, {r['upper_95']:.3f}] err {err} "
                  f"{'identified' if r['identified'] else 'NOT identified'}"
                  f"{'' if r['covered'] else '  (truth outside)'}")
        rows += summarize(case)
        cases.append(case)
    ident = [r for r in rows if r['identified'] and '/com_offset_' not in r['name']]
    com = [r for r in rows if '/com_offset_' in r['name'] and r['identified']]
    fr = [r for r in rows if '/friction' in r['name'] and r['identified']]
    ms = [r for r in rows if '/mass' in r['name'] and r['identified']]
    summary = {
        'cells': cells, 'wall_s': time.perf_counter() - t_all,
        'objects': sum('/friction' in r['name'] for r in rows),
        'friction_identified': len(fr),
        'friction_within_10pct': sum(abs(r['error']) <= 0.10 for r in fr),
        'friction_within_5pct': sum(abs(r['error']) <= 0.05 for r in fr),
        'friction_rms_error': float(np.sqrt(np.mean([r['error'] ** 2 for r in fr]))) if fr
        else None,
        'friction_coverage': float(np.mean([r['covered'] for r in fr])) if fr else None,
        'mass_identified': len(ms),
        'mass_within_10pct': sum(abs(r['error']) <= 0.10 for r in ms),
        'mass_rms_error': float(np.sqrt(np.mean([r['error'] ** 2 for r in ms]))) if ms
        else None,
        'mass_coverage': float(np.mean([r['covered'] for r in ms])) if ms else None,
        'com_offset_identified': len(com),
        'com_offset_rms_error_mm': float(1e3 * np.sqrt(np.mean([r['error'] ** 2
                                                                for r in com]))) if com
        else None,
        'com_offset_coverage': float(np.mean([r['covered'] for r in com])) if com else None,
        'identified_within_10pct': sum(abs(r['error']) <= 0.10 for r in ident),
        'identified': len(ident),
        'coverage': sum(r['covered'] for r in rows) / max(1, len(rows)),
        'coverage_identified': sum(r['covered'] for r in ident) / max(1, len(ident)),
        'heldout_ratio': [c.object_fit.heldout_error_after / c.object_fit.heldout_error_before
                          for c in cases],
        # Over all cells: RMS of the held-out errors after / before (a cell whose prior
        # happens to be right has a tiny "before" and says little on its own).
        'heldout_pooled_ratio': float(np.sqrt(np.mean([c.object_fit.heldout_error_after ** 2
                                                       for c in cases]) /
                                              np.mean([c.object_fit.heldout_error_before ** 2
                                                       for c in cases]))),
        # The floor: the twin with the objects' true values on the same held-out strike, and
        # how far the tracker's start-pose uncertainty alone moves the twin's rest position.
        'heldout_after_mm': [1e3 * c.object_fit.heldout_error_after for c in cases],
        'heldout_true_parameters_mm': [1e3 * c.object_fit.heldout_error_reference
                                       for c in cases],
        'heldout_start_pose_spread_mm': [1e3 * c.heldout_spread for c in cases],
        # The best after/before a perfect identification gives on each cell.
        'heldout_ratio_true_parameters': [c.object_fit.heldout_error_reference /
                                          c.object_fit.heldout_error_before for c in cases],
        'heldout_along_ratio': [c.object_fit.heldout_along_after /
                                c.object_fit.heldout_along_before for c in cases],
        'heldout_joint_ratio': [c.object_fit.heldout_joint_after /
                                c.object_fit.heldout_joint_before for c in cases],
        'wall_s_per_cell': [c.wall.get('total_s') for c in cases],
    }
    print('summary:', summary)
    return {'rows': rows, 'summary': summary}


def _arm_worst(case: CaseResult) -> float:
    if case.arm_fit is None:
        return 0.0
    worst = 0.0
    for e in case.arm_fit.parameters:
        t = case.truth[e.name]
        if e.name == 'global/command_latency':
            continue
        worst = max(worst, abs(e.value - t) / t)
    return worst
