"""Fit the objects' sliding friction, mass and (boxes) lateral centre of mass offsets to strike
probes (ROS-free).

Every strike (core/sysid/object_probes.py) is replayed in the twin: from the arm's measured
rest state behind the object and every object's tracked rest pose before the push, the
executed command from the end of the rest on (``Twin.rollout``, batched over parameter
samples), until the object has stopped. Per object (``geom/<id>/friction``,
``body/<id>/mass``), over all its strikes:

* friction, from the object's path: the tracked position along the path minus the simulated
  one, each frame while it moves and the mean of the rest frames (one residual per strike),
  scaled by sqrt(tracker noise^2 [/ n rest frames] + model error^2). The model error is a
  per-strike budget (``model_error`` x the slide + ``model_error_abs``): the twin does not
  reproduce a strike exactly (rounded edges, contact softness); a strike's frames share it,
  so together they weigh as one residual. A twin sample in which the object tips over is far
  off;
* mass, from the joints given the friction: measured minus simulated joint positions from the
  push to 0.25 s after the release, scaled by the joint noise (from the rest before the push).
  The object loads the arm with m (a + mu g) while it rides the tool;
* a box's lateral centre of mass offsets (``body/<id>/com_offset_x|y``, in its frame), from the
  cross-track positions (an offset across the push turns the box and bends its path), with a
  per-strike budget ``cross_model_error``. A cylinder's yaw is not tracked: its offsets keep
  the prior. So does an offset no strike pushed across (:func:`observed_offsets`: a push
  along an offset's axis does not bend the path, so strikes along one axis of a box show
  the other offset only);
* where the config declares them (``body/<id>/linear_damping``, ``angular_damping``: not in
  the shipped config; issue 15's experiment, results/model_gap/identification_damping.yaml),
  the object's linear then angular damping from its path, given the friction: a loss that
  grows with speed, which a Drake cell's compliant contact has and one MuJoCo friction
  lacks. Kept at the prior unless identified or the residuals reject it;
* friction again, given the mass, the offsets and the damping.

Search: each parameter on its own (the others fixed) by batched grids (log-spaced over the
bounds, linear for an offset; then finer around the best; then the vertex of a least-squares
parabola through the 7 nearest values, which follows the trend under contact jitter) -- one
``mujoco.rollout`` batch per strike and stage, robust to the small-scale roughness of contact
outcomes on which finite differences and derivative-based steps (``mujoco.minimize``, CMA-ES's
step-size adaptation on 2 dimensions) were slower and no better here.

95% intervals: friction from the Gauss-Newton curvature of its residuals (Student-t when
their scatter exceeds the budget) combined with ``systematic_error`` x the value, the part of
the model error that all strikes of an object share (measured on emulated cells with known
truth: 8% RMS); mass from the joints' curvature, inflated by the residuals' autocorrelation
and chi^2, plus the friction's uncertainty carried through m (a + mu g) and
``mass_model_error``; an offset from the curvature of a parabola through its costs over the
bounds combined with ``offset_systematic_error``. A parameter whose half width exceeds
``identified_fraction`` of its value (or half its range; an offset: a quarter of its range),
or whose value sits at a bound (:func:`at_bound`: the search stopped there), is reported with
identified=false and its bounds as the interval (value: the estimate when the
data reject the prior -- or, friction and mass, bound the value -- else the prior). An object
no usable strike reached keeps its prior with identified=false.

Strikes in which the object tipped over, left the table / the camera's view or was not
tracked are dropped and named. :func:`final_object_fits` reports the fit on all strike
probes, validated by the fit without the last one scored on it (held-out rest position error
before/after, along the path too, and the joints during the pushes).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import mujoco
import numpy as np

from ..geometry import quat_yaw, yaw_quat
from ..parameters import ParameterEstimate, ParameterSet, ParameterSpec
from ..twin import Twin, UnstableTwinError
from .fit import Recording
from .object_probes import StrikeInfo, StrikeObject, TableRegion

__all__ = ['ObjectDataError', 'ObjectFitOptions', 'ObjectFitResult', 'ObjectTrack',
           'StrikeRecording', 'ensure_object_priority', 'final_object_fits', 'identify_objects',
           'object_frame_yaw', 'object_parameter_names', 'observed_offsets', 'offset_identified',
           'rest_spread', 'score_heldout', 'strike_objects', 'table_region',
           'unobservable_at_prior']

G = 9.81
BOUND_TOLERANCE = 0.01   # an estimate this near a bound (1% of it, or of the width) is pinned


class ObjectDataError(ValueError):
    """Strike recordings that cannot be fitted (no tracked poses, object lost)."""


@dataclass
class ObjectTrack:
    """Tracked poses of one object on a recording's time axis."""

    times: np.ndarray          # (n,) s
    positions: np.ndarray      # (n, 3) m
    yaws: np.ndarray           # (n,) rad

    def window(self, t0: float, t1: float):
        """(times, positions, yaws) of the track between ``t0`` and ``t1`` (s)."""
        k = (self.times >= t0) & (self.times <= t1)
        return self.times[k], self.positions[k], self.yaws[k]


@dataclass
class StrikeRecording:
    """One strike probe execution: joints + command (``recording``), object tracks, strikes."""

    recording: Recording
    tracks: dict[str, ObjectTrack]
    strikes: list[StrikeInfo]
    name: str = 'strike'
    info: dict = field(default_factory=dict)


@dataclass
class ObjectFitOptions:
    """Object-fit settings: tracker noise (m), model error, which parameters to fit and their
    bounds."""
    tracker_noise: float = 0.0025      # m, 1 sigma of one tracked position (prior value)
    estimate_tracker_noise: bool = True   # from the scatter of the rest frames when >= 8
    model_error: float = 0.10          # fraction of the slide, per strike
    model_error_abs: float = 0.005     # m, per strike
    systematic_error: float = 0.08     # fraction of the friction common to an object's strikes
    lead: float = 0.15                 # s of rest simulated before the push
    joint_window: float = 0.25         # s after the release
    grid: int = 9                      # first search: values log-spaced over the bounds
    mass_model_error: float = 0.05     # fraction of the mass: the push model's budget
    identified_fraction: float = 0.25  # half width / value above which: not identified
    cross_model_error: float = 0.005   # m per strike across the path with the true centre of
    #                                    mass (measured on emulated cells: 5 mm RMS)
    offset_systematic_error: float = 0.0025   # m (1 sigma) of a centre of mass offset, common
    #                to a box's strikes (the tracked centre's bias, the contact patch): offsets
    #                with the depth tracker were 1.0-4.4 mm off (2.6 mm RMS) on harness cells
    tip_tolerance: float = 0.012       # m of height change: the object tipped over
    stop_margin: float = 0.3           # s simulated past the observed stop (<= 0: to the
    #                slowest slide the friction bounds allow); a twin sample still sliding
    #                there is carried to its Coulomb rest, v |v| / (2 mu g) further on
    stop_tolerance: float = 0.0075     # m: tracked frames this near the rest position count
    #                as stopped (3 x the tracker noise's prior)
    seed: int = 0

    @classmethod
    def from_dict(cls, d: dict | None) -> ObjectFitOptions:
        """ObjectFitOptions from a dict (None: defaults); ValueError on an unknown field."""
        d = dict(d or {})
        known = set(cls.__dataclass_fields__)
        extra = sorted(set(d) - known)
        if extra:
            raise ValueError(f'object fit options: unknown field(s) {extra}; known '
                             f'{sorted(known)}')
        return cls(**d)


@dataclass
class StrikeFit:
    """One strike as fitted (for reports): observed and simulated paths of the object."""

    recording: str
    object_id: str
    times: np.ndarray
    observed: np.ndarray       # (n, 2)
    prior: np.ndarray          # (n, 2) simulated with the priors
    fitted: np.ndarray         # (n, 2) simulated with the estimates
    start: np.ndarray
    heldout: bool = False


@dataclass
class ObjectFitResult:
    """An object fit: the estimates, normalised residuals, held-out rest errors (m) and details."""
    parameters: ParameterSet
    residual_before: float         # RMS of the normalised residuals at the priors
    residual_after: float
    heldout_error_before: float    # m, RMS rest-position error of held-out strikes
    heldout_error_after: float
    heldout_joint_before: float    # rad, RMS joint error over held-out strikes
    heldout_joint_after: float
    heldout_along_before: float    # m, RMS along-track rest error of held-out strikes
    heldout_along_after: float
    wall_time: float
    n_rollouts: int
    dropped: dict[str, str]        # '<recording>/<object>' -> why the strike was not used
    unstruck: list[str]            # declared objects no strike touched
    tracker_noise: float           # m, the value used
    strikes: list[StrikeFit] = field(default_factory=list)
    per_object: dict = field(default_factory=dict)
    # m, held-out rest error of the twin with ``reference`` values (an evaluator's hidden
    # truth: what a perfect identification would reach); nan without a reference
    heldout_error_reference: float = float('nan')
    cpu_time: float = 0.0          # s of CPU, all threads of this process (load-independent)
    # m, the same with the parameters no strike can observe (a cylinder's centre of mass
    # offsets: its yaw is not tracked) at their priors: what a perfect identification of the
    # observable parameters reaches. Equal to heldout_error_reference when all are observable
    heldout_error_observable: float = float('nan')
    # the centre of mass offsets the fitted strikes can show (:func:`observed_offsets`); the
    # others kept their priors, and keep them in heldout_error_observable's twin
    observed_offsets: frozenset = frozenset()


# ------------------------------------------------------------------ scene helpers

def object_parameter_names(object_id: str) -> tuple[str, str]:
    """The twin parameter names (friction, mass) of object ``object_id``."""
    return f'geom/{object_id}/friction', f'body/{object_id}/mass'


def _object_geoms(twin: Twin) -> dict[str, list[int]]:
    m = twin.model
    out = {}
    for oid, qadr in zip(twin.object_ids, twin._obj_qadr):
        j = int(np.flatnonzero(m.jnt_qposadr == qadr)[0])
        body = int(m.jnt_bodyid[j])
        out[oid] = [g for g in range(m.ngeom) if m.geom_bodyid[g] == body
                    and m.geom_contype[g] | m.geom_conaffinity[g]]
    return out


def object_frame_yaw(twin: Twin, object_id: str) -> float:
    """Yaw (rad) of ``object_id``'s body frame in the twin's scene as loaded: the frame its
    centre of mass offsets are in."""
    m = twin.model
    qadr = twin._obj_qadr[twin.object_ids.index(object_id)]
    body = int(m.jnt_bodyid[int(np.flatnonzero(m.jnt_qposadr == qadr)[0])])
    data = mujoco.MjData(m)
    mujoco.mj_forward(m, data)
    return quat_yaw(data.xquat[body])


def unobservable_at_prior(twin: Twin, values: dict, priors: dict,
                          observed: frozenset | None = None) -> dict:
    """``values`` with what the fit's strikes cannot observe set to its prior (``priors``;
    absent there: 0): a cylinder's centre of mass offsets, since its yaw is not tracked, and
    where ``observed`` (:func:`observed_offsets` of the fitted strikes) is given, every offset
    outside it (the fit keeps all of them at the prior). What a perfect identification of the
    observable parameters gives."""
    out = dict(values)
    for name in values:
        if '/com_offset_' not in name:
            continue
        oid = name.split('/')[1]
        if oid not in twin.object_ids:
            continue
        if not _is_box(twin, oid) or (observed is not None and name not in observed):
            out[name] = priors.get(name, 0.0)
    return out


# A push shows a centre of mass offset by the torque that offset makes about the push line:
# in proportion to |sin| of the angle between the push and the offset's axis. At or above
# this, the strike counts as showing it (a box's face-normal pushes give 1 or 0).
OFFSET_SHOWN_SIN = 0.5


def observed_offsets(twin: Twin, segs) -> frozenset:
    """The centre of mass offsets (``body/<id>/com_offset_x|y``) that the strikes ``segs``
    can show: a box's offset along its body axis is shown by a push across that axis (the
    offset then turns the box and bends its path), not by a push along it. The axes are the
    box's as tracked before each push. A cylinder shows none (its yaw is not tracked).
    Measured on wide_9 (docs/results.md, stop 44): the fit on two strikes along the box's
    long axis kept its x offset at the prior, and predicted the strike across it at 55.0 mm
    against 51.9 mm at the priors, the true x offset being 21.9 mm."""
    out = set()
    boxes = _boxes(twin)
    for seg in segs:
        oid = seg.object_id
        if oid not in boxes or oid not in seg.poses0:
            continue
        rel = seg.info.heading - quat_yaw(seg.poses0[oid][1])
        if abs(np.sin(rel)) >= OFFSET_SHOWN_SIN:
            out.add(f'body/{oid}/com_offset_x')
        if abs(np.cos(rel)) >= OFFSET_SHOWN_SIN:
            out.add(f'body/{oid}/com_offset_y')
    return frozenset(out)


def _boxes(twin: Twin) -> set[str]:
    """The ids of the twin's objects that are one box geom."""
    return {oid for oid, geoms in _object_geoms(twin).items()
            if len(geoms) == 1 and twin.model.geom_type[geoms[0]] == mujoco.mjtGeom.mjGEOM_BOX}


def _is_box(twin: Twin, object_id: str) -> bool:
    return object_id in _boxes(twin)


def ensure_object_priority(twin: Twin) -> list[str]:
    """Give every object geom a contact priority above the other geoms (as the emulated cell
    does), so its friction rules its contacts (MuJoCo takes the maximum of two equal-priority
    geoms' frictions: the table's would mask a low object friction). Returns the ids changed."""
    m = twin.model
    geoms = _object_geoms(twin)
    obj = {g for gs in geoms.values() for g in gs}
    others = [int(m.geom_priority[g]) for g in range(m.ngeom) if g not in obj]
    top = max(others, default=0)
    changed = []
    for oid, gs in geoms.items():
        if any(m.geom_priority[g] <= top for g in gs):
            m.geom_priority[gs] = top + 1
            changed.append(oid)
    return changed


def strike_objects(twin: Twin, poses: dict) -> list[StrikeObject]:
    """StrikeObjects (geometry from the twin's scene, poses {id: (xyz, yaw)} measured) for
    the objects that are boxes or cylinders; others are left out."""
    m = twin.model
    out = []
    for oid, gs in _object_geoms(twin).items():
        if oid not in poses or len(gs) != 1:
            continue
        g = gs[0]
        size = m.geom_size[g]
        if m.geom_type[g] == mujoco.mjtGeom.mjGEOM_BOX:
            shape, ext = 'box', (2 * size[0], 2 * size[1], 2 * size[2])
        elif m.geom_type[g] == mujoco.mjtGeom.mjGEOM_CYLINDER:
            shape, ext = 'cylinder', (2 * size[0], 2 * size[0], 2 * size[1])
        else:
            continue
        xyz, yaw = poses[oid]
        out.append(StrikeObject(oid, shape, tuple(float(e) for e in ext),
                                np.asarray(xyz, float)[:2].copy(), float(yaw),
                                float(np.asarray(xyz, float)[2])))
    return out


def table_region(twin: Twin, name: str = 'table') -> TableRegion:
    """The table top (an axis-aligned box geom named ``table``) of the twin's scene."""
    m = twin.model
    g = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, name)
    if g < 0 or m.geom_type[g] != mujoco.mjtGeom.mjGEOM_BOX:
        raise ValueError(f"the twin's scene has no box geom named {name!r} (the table)")
    data = mujoco.MjData(m)
    mujoco.mj_forward(m, data)
    rot = data.geom_xmat[g].reshape(3, 3)
    half = np.abs(rot) @ m.geom_size[g]
    c = data.geom_xpos[g]
    return TableRegion(c[:2].copy(), 2 * half[:2], float(c[2] + half[2]))


def _mean_yaw(yaws) -> float:
    return float(np.arctan2(np.mean(np.sin(yaws)), np.mean(np.cos(yaws))))


# ------------------------------------------------------------------ segments

@dataclass
class _Segment:
    rec_name: str
    object_id: str
    info: StrikeInfo
    q0: np.ndarray
    ref0: np.ndarray
    traj_times: np.ndarray
    traj_pos: np.ndarray
    traj_vel: np.ndarray | None
    duration: float
    poses0: dict
    p0: np.ndarray                 # struck object's xy before the push
    u: np.ndarray                  # along-track unit vector
    obs_t: np.ndarray              # shifted times of the object samples (after the push)
    obs_xy: np.ndarray
    rest: np.ndarray               # bool mask over obs samples
    joint_t: np.ndarray
    joint_q: np.ndarray
    joint_sigma: np.ndarray        # per joint
    slide: float                   # observed slide length (travel minus the push), m
    z0: float = 0.0                # the object's height before the push
    cut: bool = False              # simulated only to the observed stop + stop_margin


def _segments(srec: StrikeRecording, options: ObjectFitOptions, mu_lo: dict,
              dropped: dict) -> list[_Segment]:
    rec = srec.recording
    out = []
    for info in srec.strikes:
        key = f'{srec.name}/{info.object_id}'
        track = srec.tracks.get(info.object_id)
        t_s = info.t_push - options.lead
        if track is None or track.times.size == 0:
            dropped[key] = f'no tracked poses of {info.object_id!r} in {srec.name}'
            continue
        # At rest since the last strike: the latest frames before the push (right before it
        # the tool behind the object may hide it from the camera).
        tb, pb, yb = (a[-5:] for a in track.window(t_s - 4.0, t_s))
        if tb.size == 0:
            dropped[key] = (f'{info.object_id!r} was not tracked in the 4 s before the push '
                            f'(hidden by the arm, or out of view)')
            continue
        slide_time = info.speed / (max(mu_lo.get(info.object_id, 0.2), 0.05) * G) + 0.15
        t_stop = min(info.t_end, info.t_release + slide_time + 0.45)
        # At rest after the slide until the next strike of the probe moves anything: frames
        # after the settle time count too (the arm may hide the object until it leaves).
        later = [s.t_push for s in srec.strikes if s.t_push > info.t_push]
        t_last = min(later) if later else np.inf
        ta, pa, _ = track.window(info.t_push + 1e-6, t_last)
        after = ta >= info.t_release + 0.1
        if after.sum() < 1:
            dropped[key] = (f'{info.object_id!r} was lost after the strike: no tracked pose '
                            f'after the release (it left the table or the camera view; last '
                            f'seen at {np.round(track.positions[-1], 3).tolist()})')
            continue
        rest = ta >= info.t_release + slide_time
        if rest.sum() < 2:
            rest = np.zeros(ta.size, bool)
            rest[np.flatnonzero(after)[-2:]] = True
        stop = _observed_stop(ta[after], pa[after, :2], options.stop_tolerance)
        cut = False
        if options.stop_margin > 0 and stop is not None:
            end = max(stop + options.stop_margin, info.t_release + options.joint_window + 0.05)
            cut, t_stop = end < t_stop, min(t_stop, end)
        z0 = float(np.mean(pb[:, 2]))
        z_rest = float(np.mean(pa[rest, 2]))
        if abs(z_rest - z0) > options.tip_tolerance:
            dropped[key] = (f'{info.object_id!r} tipped over or fell (height {z0:.3f} -> '
                            f'{z_rest:.3f} m)')
            continue
        p0 = pb[:, :2].mean(axis=0)
        rest_xy = pa[rest, :2].mean(axis=0)
        moved = rest_xy - p0
        heading = np.array([np.cos(info.heading), np.sin(info.heading)])
        u = moved / np.linalg.norm(moved) if np.linalg.norm(moved) > 0.01 else heading
        s_push = info.push_length or info.speed ** 2 / (2 * info.accel)
        slide = max(float(np.linalg.norm(moved)) - s_push, 0.01)
        # Every object's rest pose before the push (the scene's pose when never tracked).
        poses0 = {}
        for oid, tr in srec.tracks.items():
            tt, pp, yy = (a[-5:] for a in tr.window(t_s - 4.0, t_s))
            if tt.size == 0:
                before = tr.times <= t_s
                if not before.any():
                    continue
                pp, yy = tr.positions[before][-1:], tr.yaws[before][-1:]
            poses0[oid] = (pp.mean(axis=0), yaw_quat(_mean_yaw(yy)))
        # Arm at rest behind the object: q0 from the samples just before t_s.
        kq = (rec.times >= t_s - 0.1) & (rec.times <= t_s)
        kn = (rec.times >= info.t_push - 0.35) & (rec.times <= info.t_push - 0.02)
        if kq.sum() < 2 or kn.sum() < 5:
            dropped[key] = f'too few joint states around the push of {info.object_id!r}'
            continue
        q0 = rec.positions[kq].mean(axis=0)
        sigma = np.maximum(rec.positions[kn].std(axis=0), 5e-5)
        tt = rec.traj_times
        first = int(np.searchsorted(tt, info.t_push - 1e-6))
        last = int(np.searchsorted(tt, info.t_end + 1e-6)) + 1
        sel = slice(first, min(last, tt.size))
        ref0 = rec.traj_positions[first]
        kj = (rec.times >= info.t_push - 0.02) & \
             (rec.times <= info.t_release + options.joint_window)
        out.append(_Segment(
            srec.name, info.object_id, info, q0, ref0, tt[sel] - t_s, rec.traj_positions[sel],
            None if rec.traj_velocities is None else rec.traj_velocities[sel],
            t_stop - t_s, poses0, p0, u, ta - t_s, pa[:, :2], rest,
            rec.times[kj] - t_s, rec.positions[kj], sigma, slide, z0, cut))
        seg = out[-1]
        seg.obs_t = np.minimum(seg.obs_t, seg.duration)    # at rest by the simulated end
    return out


def _observed_stop(times: np.ndarray, xy: np.ndarray, tolerance: float) -> float | None:
    """The first of ``times`` at which the tracked position ``xy`` comes near its rest
    position (the median of the later half of the frames): within ``tolerance`` (m), or 4
    sigma of the frames' own scatter there up to twice that. A sliding object only nears
    its rest, so a later outlier of a noisy tracker does not move the stop. None: under 3
    frames, or either of the last two over ``tolerance`` from the rest position (the object
    may still move)."""
    if times.size < 3:
        return None
    half = times.size // 2
    final = np.median(xy[half:], axis=0)
    d = np.linalg.norm(xy - final, axis=1)
    if np.any(d[-2:] > tolerance):
        return None
    sigma = np.median(d[half:]) / 1.1774   # the Rayleigh distribution's median
    near = d <= min(max(tolerance, 4.0 * sigma), 2.0 * tolerance)
    return float(times[int(np.argmax(near))])


# ------------------------------------------------------------------ the problem

_SLOPE_DT = 0.02    # s: the object's velocity at a cut end, from its positions this far apart


def _simulate(twin: Twin, seg: _Segment, samples: list[dict], nthread: int,
              joints_only: bool = False):
    """(object xyz (k, n_obs, 3), joints (k, n_joint, nj)) of one strike per sample. A
    segment cut at the observed stop (``seg.cut``) carries a sample still sliding there to
    its Coulomb rest (v |v| / (2 mu g) along its velocity, mu the sample's friction): the
    frames at the end are compared with where the sample comes to rest, as if simulated on."""
    obs_t = np.zeros(0) if joints_only else seg.obs_t
    cut = seg.cut and not joints_only
    times = np.concatenate([obs_t, seg.joint_t] +
                           ([[seg.duration - _SLOPE_DT]] if cut else []))
    duration = float(seg.joint_t.max()) + 0.01 if joints_only else seg.duration
    res = twin.rollout(seg.q0, None, seg.traj_times, seg.traj_pos, param_samples=samples,
                       nthread=nthread, traj_velocities=seg.traj_vel, duration=duration,
                       reference_start=seg.ref0, object_poses=seg.poses0, sample_times=times)
    k = res.object_ids.index(seg.object_id)
    n, nq = obs_t.size, seg.joint_t.size
    xyz = res.object_poses[:, :n, k, :3].copy()
    if cut:
        at_end = obs_t >= seg.duration - 1e-9
        name = f'geom/{seg.object_id}/friction'
        mu = np.array([sm.get(name, np.nan) for sm in samples], float)
        if not np.all(np.isfinite(mu)):
            mu = np.where(np.isfinite(mu), mu, twin.get_parameter(name))
        v = (xyz[:, at_end][:, :1, :2] - res.object_poses[:, -1:, k, :2]) / _SLOPE_DT \
            if at_end.any() else np.zeros((len(samples), 1, 2))
        # The difference is the mean velocity over the last _SLOPE_DT; at the end the object
        # is slower by mu g _SLOPE_DT / 2 (it decelerates at mu g while it slides).
        decel = np.maximum(mu, 1e-3)[:, None, None] * G
        speed = np.linalg.norm(v, axis=2, keepdims=True)
        end_speed = np.maximum(speed - 0.5 * decel * _SLOPE_DT, 0.0)
        xyz[:, at_end, :2] += v / np.maximum(speed, 1e-9) * end_speed ** 2 / (2 * decel)
    return xyz, res.positions[:, n:n + nq]


class _Residual:
    """Normalised residuals of one object's strikes as a function of ONE parameter (the
    others fixed). block 'object': along-track positions; 'joints': joint positions."""

    def __init__(self, twin, segs, name: str, fixed: dict, block: str, sigma_track: float,
                 options: ObjectFitOptions, nthread: int):
        self.twin, self.segs, self.name, self.fixed = twin, segs, name, dict(fixed)
        self.block, self.sigma_track, self.options, self.nthread = (block, sigma_track,
                                                                   options, nthread)
        self.n_rollouts = 0

    def __call__(self, values) -> np.ndarray:
        values = np.atleast_1d(np.asarray(values, float)).reshape(-1)
        samples = [{**self.fixed, self.name: float(v)} for v in values]
        out = []
        o = self.options
        for seg in self.segs:
            xy, q = _simulate(self.twin, seg, samples, self.nthread,
                              joints_only=self.block == 'joints')
            self.n_rollouts += len(samples)
            if self.block == 'joints':
                out.append(((q - seg.joint_q[None]) / seg.joint_sigma).reshape(len(samples), -1))
                continue
            if self.block == 'cross':
                # Across the path: what a centre of mass offset bends (friction hardly does).
                n_dir = np.array([-seg.u[1], seg.u[0]])
                along = (xy[..., :2] - seg.p0) @ n_dir
                obs = (seg.obs_xy - seg.p0) @ n_dir
                sm = o.cross_model_error
            else:
                along = (xy[..., :2] - seg.p0) @ seg.u          # (k, n)
                obs = (seg.obs_xy - seg.p0) @ seg.u
                sm = o.model_error * seg.slide + o.model_error_abs
            # A twin that tips the object over (the cell's stayed upright) is far off.
            tipped = np.abs(xy[:, seg.rest, 2].mean(axis=1) - seg.z0) > o.tip_tolerance
            along = np.where(tipped[:, None], along + 1.0, along)
            moving = ~seg.rest
            if moving.any():
                # The model error is common to a strike's frames: together they weigh as one.
                n_mov = int(moving.sum())
                out.append((along[:, moving] - obs[moving]) /
                           np.sqrt(self.sigma_track ** 2 + n_mov * sm ** 2))
            n_rest = int(seg.rest.sum())
            d = along[:, seg.rest].mean(axis=1) - obs[seg.rest].mean()
            out.append((d / np.sqrt(self.sigma_track ** 2 / n_rest + sm ** 2))[:, None])
        return np.concatenate(out, axis=1).T                   # (m, k)

    def jacobian(self, value: float, lower: float, upper: float,
                 rel=(-0.10, -0.05, -0.02, 0.02, 0.05, 0.10)):
        """(r, dr/dvalue): each residual's least-squares slope over value x (1 + rel) (the
        steps inside the bounds). Contact outcomes are rough: a residual moved by +-0.3
        sigma between values 2% apart, so a forward or central difference at 2% measured
        that jitter (an identified flag flipped with the twin's last bits); the slope over
        +-10% measures the trend. The jitter is model error, budgeted in the residuals."""
        scale = max(abs(value), 1e-3)
        steps = np.array([k * scale for k in rel if lower <= value + k * scale <= upper])
        if steps.size < 2:
            steps = np.array([k * scale for k in rel])
        r = self(np.concatenate([[value], value + steps]))
        d = r[:, 1:] - r[:, :1]
        return r[:, 0], d @ steps / float(steps @ steps)


def _fit_1d(res: _Residual, spec: ParameterSpec, start: float | None, grid: int) -> float:
    """Batched 1-D search: a log-spaced grid over the bounds (around ``start`` when given), a
    finer grid between the best point's neighbours, then the vertex of a parabola (in log
    space). One batched rollout per strike and stage; robust to the small-scale roughness of
    contact outcomes that trips derivative-based steps."""
    lo, hi = max(spec.lower, 1e-3 * spec.upper), spec.upper
    fwd, inv = np.log, np.exp
    if start is None:
        g = np.geomspace(lo, hi, grid)
    else:
        g = np.clip(start * np.exp(np.linspace(-0.25, 0.25, max(5, grid // 2 + 1))), lo, hi)
        g = np.unique(g)
    costs = dict(zip(g, np.sum(res(g) ** 2, axis=0)))
    for _ in range(2):
        xs = np.array(sorted(costs))
        k = int(np.argmin([costs[x] for x in xs]))
        a, b = xs[max(k - 1, 0)], xs[min(k + 1, xs.size - 1)]
        fine = np.geomspace(a, b, 6)[1:-1]
        fine = fine[~np.isin(fine, xs)]
        if fine.size:
            costs.update(zip(fine, np.sum(res(fine) ** 2, axis=0)))
    xs = np.array(sorted(costs))
    c = np.array([costs[x] for x in xs])
    k = int(np.argmin(c))
    # A least-squares parabola through the 7 tried values nearest the best: the costs carry
    # contact jitter (+-1 between values a few % apart where the slide is short), and the
    # lowest point, or the parabola through the best three, fits it.
    near = np.argsort(np.abs(fwd(xs) - fwd(xs[k])))[:7]
    if near.size >= 4:
        p = np.polyfit(fwd(xs[near]), c[near], 2)
        if p[0] > 0:
            v = float(inv(-p[1] / (2 * p[0])))
            if xs[near].min() <= v <= xs[near].max():
                return v
    return float(xs[k])


def _z(dof: int, estimated: bool) -> float:
    if not estimated:
        return 1.959963984540054
    from scipy import stats
    return float(stats.t.ppf(0.975, max(1, dof)))


def _autocorrelation_factor(r: np.ndarray, segs: list[_Segment]) -> float:
    """(1 + rho) / (1 - rho) of the joint residuals (lag-1 autocorrelation per joint series):
    correlated residuals hold fewer independent samples than their count."""
    rhos, i = [], 0
    for seg in segs:
        n, nj = seg.joint_q.shape
        block = r[i:i + n * nj].reshape(n, nj)
        i += n * nj
        for j in range(nj):
            x = block[:, j] - block[:, j].mean()
            den = float(x @ x)
            if n > 3 and den > 0:
                rhos.append(float(x[1:] @ x[:-1]) / den)
    rho = float(np.clip(np.mean(rhos), 0.0, 0.96)) if rhos else 0.0
    return (1 + rho) / (1 - rho)


CHI2_95_1DOF = 3.841458820694124


def _fit_offset(res: _Residual, spec: ParameterSpec, grid: int, systematic: float = 0.0):
    """A centre of mass offset from the sideways bend of the paths: (value, 95% half width,
    chi^2 per residual, prior rejected). ``systematic``: m (1 sigma) common to the strikes,
    combined into the half width; the prior is rejected when it lies outside the interval.

    The cost over the offset is a parabola (the bend is about linear in the offset) under
    contact jitter: an offset along a strike's push moves the sideways rest position by
    +-1 sigma at random between grid points, so the lowest grid point (or a local slope)
    would fit that jitter. A least-squares parabola through a grid over the bounds (then a
    finer one around its vertex) gives the value, its curvature the interval (the cost's
    rise by the 95% chi^2 quantile), and a flat or jagged cost an unidentified offset."""
    lo, hi = spec.lower, spec.upper
    xs = np.linspace(lo, hi, max(grid, 7) + 2)
    cost = np.sum(res(xs) ** 2, axis=0)

    def parabola(x, c):
        p = np.polyfit(x, c, 2)
        return p, (float(np.clip(-p[1] / (2 * p[0]), lo, hi)) if p[0] > 0 else spec.prior)
    p, v = parabola(xs, cost)
    if p[0] > 0:
        span = min(0.5 * (hi - lo), 2.0 * np.sqrt(CHI2_95_1DOF / p[0]))
        fine = np.linspace(max(lo, v - span), min(hi, v + span), 7)
        xs = np.concatenate([xs, fine])
        cost = np.concatenate([cost, np.sum(res(fine) ** 2, axis=0)])
        near = np.abs(xs - v) <= max(span, 2.5 * (hi - lo) / (xs.size - 1))
        if near.sum() >= 5:
            p, v = parabola(xs[near], cost[near])
    r = res([v])[:, 0]
    n = r.size
    chi2 = float(r @ r) / max(1, n - 1) if n > 1 else 1.0
    if p[0] <= 0:
        return spec.prior, float('inf'), chi2, False
    hw = float(np.hypot(np.sqrt(CHI2_95_1DOF * max(1.0, chi2) / p[0]),
                        1.959963984540054 * systematic))
    return v, hw, chi2, bool(abs(v - spec.prior) > hw)


def at_bound(spec: ParameterSpec, value: float) -> bool:
    """Does ``value`` sit at one of ``spec``'s bounds (within ``BOUND_TOLERANCE``)? Relative to
    the bound where both bounds are positive (friction and mass: their grids are log-spaced,
    and a 30 g object must not read as pinned at a 20 g bound), else of the bounds' width.
    The search there stopped at the bound, not at a minimum, and the interval is cut by it:
    such an estimate is not identified (a loaded live run gave 0.999 [0.761, 1.000] on a
    [0.2, 1.0] friction for a truth of 0.45)."""
    lo, hi = spec.lower, spec.upper
    if lo > 0:
        return bool(value <= lo * (1 + BOUND_TOLERANCE) or value >= hi / (1 + BOUND_TOLERANCE))
    tol = BOUND_TOLERANCE * (hi - lo)
    return bool(value <= lo + tol or value >= hi - tol)


def offset_identified(spec: ParameterSpec, value: float, half_width: float) -> bool:
    """Is a centre of mass offset identified? An offset is near zero, so its interval is
    judged against the bounds: at most half of their span (``half_width`` <= a quarter), and
    the value not at a bound (:func:`at_bound`: the parabola's vertex was clipped there, as
    wide_9's x offset at +30.0 mm for a truth of 21.9 in stop 36)."""
    return bool(np.isfinite(half_width) and half_width <= 0.25 * (spec.upper - spec.lower)
                and not at_bound(spec, value))


def _rejects(res: _Residual, value: float, prior: float, r: np.ndarray, chi2: float) -> bool:
    """Do the residuals reject the prior against ``value``? (their cost rises by more than the
    95% chi^2 quantile of one parameter, scaled by the scatter). A parameter not identified
    to the flag's precision keeps its estimate when they do: the prior is known to be worse."""
    r0 = res([prior])[:, 0]
    return bool(float(r0 @ r0) - float(r @ r) > CHI2_95_1DOF * max(1.0, chi2))


def _fit_damping(twin, segs, spec: ParameterSpec, fixed: dict, sigma_track, options,
                 nthread) -> tuple[float, float, bool, int]:
    """An object's linear or angular damping from its path, the other values fixed: the
    1-D search, a 95% half width from the residuals' curvature (Student-t when their
    scatter exceeds the budget), and whether they reject the prior. Returns (value, half
    width, rejects the prior, rollouts)."""
    res = _Residual(twin, segs, spec.name, fixed, 'object', sigma_track, options, nthread)
    value = _fit_1d(res, spec, None, options.grid)
    r, j = res.jacobian(value, spec.lower, spec.upper)
    chi2, var, z = _curvature(r, j)
    return value, float(z * np.sqrt(var)), _rejects(res, value, spec.prior, r, chi2), \
        res.n_rollouts


def _curvature(r: np.ndarray, j: np.ndarray) -> tuple[float, float, float]:
    """From one parameter's residuals ``r`` and their slope ``j``: (chi^2 per degree of
    freedom, the Gauss-Newton variance inflated by chi^2 when above 1, the 95% quantile:
    Student-t when the scatter was estimated from the residuals, else normal)."""
    n = r.size
    chi2 = float(r @ r) / max(1, n - 1) if n > 1 else 1.0
    var = max(1.0, chi2) / max(float(j @ j), 1e-300)
    return chi2, var, _z(n - 1, n > 1 and chi2 > 1.0)


def _fit_object(twin, specs: list[ParameterSpec], segs, sigma_track, options, nthread,
                unobserved: dict | None = None):
    """Friction from the object's path, mass from the joints given the friction, the lateral
    centre of mass offsets from the path's sideways bend (those not in ``unobserved``, {name:
    why the strikes cannot show it}, which keep the prior), declared damping from the path,
    friction again given them all.
    Returns ({name: (value, half width, identified, prior rejected)}, rollouts, info)."""
    unobserved = unobserved or {}
    f_spec = next((s for s in specs if s.name.endswith('/friction')), None)
    m_spec = next((s for s in specs if s.name.endswith('/mass')), None)
    c_specs = [s for s in specs if '/com_offset_' in s.name]
    d_specs = [s for s in specs if s.name.endswith(('/linear_damping', '/angular_damping'))]
    out, rollouts, info = {}, 0, {}
    values = {s.name: s.prior for s in specs}

    def others(name):
        return {k: v for k, v in values.items() if k != name}

    def ident(spec, v, hw):
        return bool(np.isfinite(hw) and hw <= options.identified_fraction * abs(v)
                    and hw < 0.5 * (spec.upper - spec.lower) and not at_bound(spec, v))
    var_mu, m_ok, left_prior = 0.0, False, False   # an offset or a damping left its prior
    if f_spec:
        res_mu = _Residual(twin, segs, f_spec.name, others(f_spec.name), 'object', sigma_track,
                           options, nthread)
        values[f_spec.name] = _fit_1d(res_mu, f_spec, None, options.grid)
        rollouts += res_mu.n_rollouts
    if m_spec:
        res_m = _Residual(twin, segs, m_spec.name, others(m_spec.name), 'joints', sigma_track,
                          options, nthread)
        mass = _fit_1d(res_m, m_spec, None, options.grid)
        r, jm = res_m.jacobian(mass, m_spec.lower, m_spec.upper)
        n = r.size
        chi2 = float(r @ r) / max(1, n - 1)
        factor = _autocorrelation_factor(r, segs)
        s2 = max(1.0, chi2) * factor
        var_m = s2 / max(float(jm @ jm), 1e-300)
        info['joint_chi2'] = chi2
        info['joint_correlation_factor'] = factor
        if f_spec:   # the friction's own uncertainty moves the mass (m (a + mu g) is seen)
            res_mf = _Residual(twin, segs, f_spec.name, {**others(f_spec.name),
                                                         m_spec.name: mass}, 'joints',
                               sigma_track, options, nthread)
            _, jmu = res_mf.jacobian(values[f_spec.name], f_spec.lower, f_spec.upper)
            rollouts += res_mf.n_rollouts
            dm_dmu = -float(jm @ jmu) / max(float(jm @ jm), 1e-300)
            info['dm_dmu'] = dm_dmu
        rollouts += res_m.n_rollouts
        hw_m = _z(0, False) * np.sqrt(var_m)
        m_ok = ident(m_spec, mass, hw_m)
        values[m_spec.name] = mass if m_ok else m_spec.prior
    for c_spec in c_specs:
        if c_spec.name in unobserved:
            out[c_spec.name] = (c_spec.prior, float('inf'), False, False)
            info[c_spec.name.rsplit('/', 1)[1]] = f'not fitted: {unobserved[c_spec.name]}'
            continue
        res_c = _Residual(twin, segs, c_spec.name, others(c_spec.name), 'cross', sigma_track,
                          options, nthread)
        # The prior is rejected when it lies outside the whole interval, the shared error
        # included (the residuals alone rejected 0 for a -7 mm estimate of a +6 mm offset).
        v, hw, chi2, rejects = _fit_offset(res_c, c_spec, options.grid,
                                           options.offset_systematic_error)
        rollouts += res_c.n_rollouts
        ok = offset_identified(c_spec, v, hw)
        if ok or rejects:
            values[c_spec.name] = v
            left_prior = True
        out[c_spec.name] = (values[c_spec.name], float(hw), ok, rejects)
        info[f'{c_spec.name.rsplit("/", 1)[1]}_chi2'] = chi2
    for d_spec in d_specs:      # a speed-dependent loss, given the friction (then it again)
        value, hw, rejects, n = _fit_damping(twin, segs, d_spec, others(d_spec.name),
                                             sigma_track, options, nthread)
        rollouts += n
        ok = ident(d_spec, value, hw)
        if ok or rejects:
            values[d_spec.name] = value
            left_prior = True
        out[d_spec.name] = (values[d_spec.name], hw, ok, rejects)
    if f_spec:
        res_mu = _Residual(twin, segs, f_spec.name, others(f_spec.name), 'object', sigma_track,
                           options, nthread)
        mu = values[f_spec.name]
        if m_ok or left_prior:
            mu = _fit_1d(res_mu, f_spec, mu, options.grid)
        r, jf = res_mu.jacobian(mu, f_spec.lower, f_spec.upper)
        n = r.size
        chi2, var_stat, z = _curvature(r, jf)
        var_mu = var_stat + (options.systematic_error * mu) ** 2
        hw = float(np.hypot(z * np.sqrt(var_stat),
                            1.959963984540054 * options.systematic_error * mu))
        rejects = _rejects(res_mu, mu, f_spec.prior, r, chi2)
        rollouts += res_mu.n_rollouts
        out[f_spec.name] = (mu, hw, ident(f_spec, mu, hw), rejects)
        values[f_spec.name] = mu
        info['object_chi2'] = chi2
        info['object_residuals'] = n
    if m_spec:
        mass = values[m_spec.name]
        if f_spec and 'dm_dmu' in info:
            var_m = var_m + info['dm_dmu'] ** 2 * var_mu
        var_m = var_m + (options.mass_model_error * mass) ** 2
        hw_m = _z(0, False) * np.sqrt(var_m)
        ok = m_ok and ident(m_spec, mass, hw_m)
        out[m_spec.name] = (mass, float(hw_m), ok, ok)
    return out, rollouts, info


def _estimate_tracker_noise(segments: list[_Segment], default: float) -> tuple[float, int]:
    devs = []
    for seg in segments:
        xy = seg.obs_xy[seg.rest]
        if len(xy) >= 3:
            devs.append((xy - xy.mean(axis=0)).ravel())
    if not devs:
        return default, 0
    d = np.concatenate(devs)
    n = d.size - 2 * len(devs)
    if n < 8:
        return default, n
    return max(float(np.sqrt(np.sum(d * d) / n)), 5e-4), n


def identify_objects(twin: Twin, specs: list[ParameterSpec], recordings: list[StrikeRecording],
                     heldout: list[StrikeRecording] | None = None, *,
                     options: ObjectFitOptions | None = None, nthread: int = 1,
                     arm_priors: dict | None = None, reference: dict | None = None,
                     progress=None, scores: str = 'all') -> ObjectFitResult:
    """Fit the object parameters ``specs`` (``geom/<id>/friction``, ``body/<id>/mass``; any
    subset) to the strikes in ``recordings``; score them on ``heldout``.

    ``scores``: which strikes are simulated again for the scores and the report's paths once
    the estimates are fixed: 'all' (the fitted and the held-out ones), 'heldout' (only the
    held-out ones: a validation fit, whose fitted strikes no one reads) or 'none' (an
    intermediate fit read for its estimates only; its residuals and held-out figures are
    nan). The estimates do not depend on it.

    The twin holds the arm's parameters (identified or known) and the scene with the objects;
    it keeps the fitted object values on return. ``arm_priors``: the arm's values before its
    identification, for the held-out joint score's "before". ``reference``: values (an
    evaluator's truth) whose held-out rest error is scored too, beside before and after.
    Raises ObjectDataError when no strike of any declared object is usable.
    """
    t0, cpu0 = time.perf_counter(), time.process_time()
    if scores not in ('all', 'heldout', 'none'):
        raise ValueError(f"scores {scores!r}: expected 'all', 'heldout' or 'none'")
    options = options or ObjectFitOptions()
    heldout = heldout or []
    by_object = _by_object(twin, specs)
    mu_lo = _lowest_friction(by_object)
    dropped: dict[str, str] = {}
    segs = [seg for r in recordings for seg in _segments(r, options, mu_lo, dropped)]
    held_segs = [seg for r in heldout for seg in _segments(r, options, mu_lo, dropped)]
    # The tracker's noise from the fitted strikes' rest frames only: a validation fit sees
    # nothing of its held-out strikes (score_heldout scores them later, the same).
    sigma_track, _ = (_estimate_tracker_noise(segs, options.tracker_noise)
                      if options.estimate_tracker_noise else (options.tracker_noise, 0))
    priors = {s.name: s.prior for s in specs}
    result_set = ParameterSet()
    per_object, n_rollouts, unstruck = {}, 0, []
    rb, ra = [], []
    fits = _fit_objects(twin, by_object, segs, sigma_track, options, nthread, progress)
    for oid, ospecs in sorted(by_object.items()):
        osegs = [s for s in segs if s.object_id == oid]
        if not osegs:
            unstruck.append(oid)
            for s in ospecs:
                result_set.add(ParameterEstimate(s.name, s.prior, s.lower, s.upper, s.prior,
                                                 s.unit, False))
            continue
        est, n_r, info = fits[oid]
        n_rollouts += n_r
        for s in ospecs:
            v, hw, ok, rejects = est[s.name]
            if ok:
                result_set.add(ParameterEstimate(s.name, v, max(s.lower, v - hw),
                                                 min(s.upper, v + hw), s.prior, s.unit, True))
            else:
                # The estimate when the data reject the prior or say something about the
                # value; the prior when they hold nothing.
                value = v if rejects or (np.isfinite(hw) and hw < 0.5 * (s.upper - s.lower)) \
                    else s.prior
                result_set.add(ParameterEstimate(s.name, value, s.lower, s.upper, s.prior,
                                                 s.unit, False))
        fitted = {s.name: result_set[s.name].value for s in ospecs}
        name = ospecs[0].name
        if scores == 'all':
            score = _Residual(twin, osegs, name, {s.name: priors[s.name] for s in ospecs},
                              'object', sigma_track, options, nthread)
            rb.append(score([priors[name]])[:, 0])
            score.fixed = dict(fitted)
            ra.append(score([fitted[name]])[:, 0])
            n_rollouts += score.n_rollouts
        per_object[oid] = {'strikes': len(osegs), 'slides_m': [round(s.slide, 4) for s in osegs],
                           'speeds_m_s': [round(float(s.info.speed), 4) for s in osegs],
                           **{k: v if isinstance(v, str) else float(v) for k, v in info.items()}}
    if len(unstruck) == len(by_object):
        raise ObjectDataError('no usable strike for any declared object: ' + (
            '; '.join(dropped.values()) if dropped else 'the recordings hold no strikes'))
    fitted_all = result_set.values()
    twin.set_parameters(fitted_all)
    shown = [(s, False) for s in segs if s.object_id in by_object and scores == 'all'] + \
        [(s, True) for s in held_segs if s.object_id in by_object and scores != 'none']
    observed = observed_offsets(twin, segs)
    scored = _score(twin, shown, priors, fitted_all, arm_priors, reference, nthread, observed)
    return ObjectFitResult(result_set, _rms(rb), _rms(ra), wall_time=time.perf_counter() - t0,
                           n_rollouts=n_rollouts + scored.pop('n_rollouts'), dropped=dropped,
                           unstruck=unstruck, tracker_noise=sigma_track,
                           per_object=per_object, cpu_time=time.process_time() - cpu0,
                           observed_offsets=observed, **scored)


def _fit_objects(twin: Twin, by_object: dict, segs, sigma_track, options, nthread: int,
                 progress) -> dict:
    """{id: _fit_object's (estimates, rollouts, info)} of every struck object. With two
    threads or more and two objects or more, each object is fitted on a fork of ``twin``
    (Twin.fork, the same parameters) on a thread of its own, one rollout worker each:
    MuJoCo's batched rollouts split a grid of 4-9 values over 2 workers at only 1.2-1.7 x
    the speed of one. Measured on the default cell's two objects, 3 live strikes, 2 cores:
    8.9-10.2 s side by side against 10.7-11.1 s one after the other with 2 workers (3 runs
    each); the box's fit is the longer one, so the gain is less than 2 x. The estimates do
    not depend on it: every object's fit sees the others at the twin's values either way.
    ``progress(stage, fraction, residual)`` before each object's fit is started."""
    from concurrent.futures import ThreadPoolExecutor
    struck = [(oid, ospecs, [s for s in segs if s.object_id == oid])
              for oid, ospecs in sorted(by_object.items())]
    struck = [job for job in struck if job[2]]

    def fit(job, tw, nth):
        oid, ospecs, osegs = job
        try:
            return _fit_object(tw, ospecs, osegs, sigma_track, options, nth,
                               unobserved=_unobserved(twin, oid, ospecs, osegs))
        except UnstableTwinError as exc:
            raise UnstableTwinError(f'{oid}: {exc}') from None

    workers = min(max(1, nthread), len(struck))
    if workers < 2:
        out = {}
        for i, job in enumerate(struck):
            if progress:
                progress(f'fit {job[0]}', i / max(1, len(struck)), float('nan'))
            out[job[0]] = fit(job, twin, nthread)
        return out
    if progress:
        progress('fit ' + ', '.join(job[0] for job in struck), 0.0, float('nan'))
    forks = [twin.fork() for _ in struck]
    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix='object_fit') as ex:
            futures = [ex.submit(fit, job, tw, max(1, nthread // workers))
                       for job, tw in zip(struck, forks)]
            return {job[0]: f.result() for job, f in zip(struck, futures)}
    finally:
        for tw in forks:
            tw.close()


def _unobserved(twin: Twin, oid: str, ospecs, osegs) -> dict:
    """{offset name: why ``osegs`` cannot show it} of object ``oid``'s specs."""
    box = _is_box(twin, oid)
    shown = observed_offsets(twin, osegs)
    return {s.name: ("a cylinder's yaw is not tracked" if not box else
                     'no strike pushed across its axis (a push along it does not bend the '
                     'path)')
            for s in ospecs if '/com_offset_' in s.name and s.name not in shown}


def _rms(v) -> float:
    v = np.concatenate([np.atleast_1d(x) for x in v]) if v else np.zeros(0)
    return float(np.sqrt(np.mean(v * v))) if v.size else float('nan')


def _score(twin: Twin, shown, priors: dict, fitted: dict, arm_priors, reference, nthread,
           observed: frozenset):
    """Replay the strikes ``shown`` ([(segment, held out)]) at the priors and at ``fitted``
    (a held-out one also at ``reference`` and at its part that the fitted strikes can show,
    ``observed`` the offsets among it): the report's paths and the held-out figures, as
    ObjectFitResult fields (plus 'n_rollouts')."""
    strikes, held_b, held_a, held_r, held_o = [], [], [], [], []
    jb, ja, ab, aa = [], [], [], []
    observable, n_rollouts = None, 0
    if reference:
        twin.validate_names(list(reference))
        observable = unobservable_at_prior(twin, reference, priors, observed)
    for seg, is_held in shown:
        pre = {**(arm_priors or {}), **priors} if is_held else priors
        samples = [pre, fitted] + ([{**fitted, **reference}] if is_held and reference else [])
        if is_held and observable is not None and observable != reference:
            samples.append({**fitted, **observable})
        xyz, q = _simulate(twin, seg, samples, nthread)
        xy = xyz[..., :2]
        n_rollouts += len(samples)
        strikes.append(StrikeFit(seg.rec_name, seg.object_id, seg.obs_t, seg.obs_xy,
                                 xy[0], xy[1], seg.p0, is_held))
        if is_held:
            obs_rest = seg.obs_xy[seg.rest].mean(axis=0)
            d_b = xy[0][seg.rest].mean(axis=0) - obs_rest
            d_a = xy[1][seg.rest].mean(axis=0) - obs_rest
            held_b.append(np.linalg.norm(d_b))
            held_a.append(np.linalg.norm(d_a))
            if reference:
                held_r.append(np.linalg.norm(xy[2][seg.rest].mean(axis=0) - obs_rest))
                held_o.append(np.linalg.norm(xy[-1][seg.rest].mean(axis=0) - obs_rest))
            ab.append(float(d_b @ seg.u))
            aa.append(float(d_a @ seg.u))
            jb.append((q[0] - seg.joint_q).ravel())
            ja.append((q[1] - seg.joint_q).ravel())
    return {'heldout_error_before': _rms(held_b), 'heldout_error_after': _rms(held_a),
            'heldout_joint_before': _rms(jb), 'heldout_joint_after': _rms(ja),
            'heldout_along_before': _rms(ab), 'heldout_along_after': _rms(aa),
            'heldout_error_reference': _rms(held_r), 'heldout_error_observable': _rms(held_o),
            'strikes': strikes, 'n_rollouts': n_rollouts}


def _by_object(twin: Twin, specs: list[ParameterSpec]) -> dict[str, list[ParameterSpec]]:
    """{object id: its specs}; ValueError for a parameter the object fit does not fit."""
    twin.validate_names([s.name for s in specs])
    by_object: dict[str, list[ParameterSpec]] = {}
    for s in specs:
        kind, rest = s.name.split('/', 1)
        oid, fld = rest.rsplit('/', 1)
        if (kind, fld) not in (('geom', 'friction'), ('body', 'mass'),
                               ('body', 'com_offset_x'), ('body', 'com_offset_y'),
                               ('body', 'linear_damping'), ('body', 'angular_damping')):
            raise ValueError(f'{s.name}: object identification fits geom/<id>/friction, '
                             f'body/<id>/mass, body/<id>/com_offset_x|y and '
                             f'body/<id>/linear_damping|angular_damping only')
        if fld.startswith('com_offset') and not s.lower < s.prior < s.upper:
            raise ValueError(f'{s.name}: the bounds of a centre of mass offset must hold its '
                             f'prior strictly inside ({s.lower}, {s.prior}, {s.upper})')
        oid = oid.split('/')[-1]
        if oid not in twin.object_ids:
            raise ValueError(f'{s.name}: {oid!r} is not a free object of the twin '
                             f'({twin.object_ids})')
        by_object.setdefault(oid, []).append(s)
    return by_object


def _lowest_friction(by_object: dict) -> dict:
    return {oid: next((s.lower for s in ss if s.name.endswith('/friction')), 0.2)
            for oid, ss in by_object.items()}


def score_heldout(twin: Twin, specs: list[ParameterSpec], fit: ObjectFitResult,
                  heldout: list[StrikeRecording], *, options: ObjectFitOptions | None = None,
                  nthread: int = 1, arm_priors: dict | None = None,
                  reference: dict | None = None) -> ObjectFitResult:
    """``fit`` (made without ``heldout``) scored on the strikes ``heldout``: a copy with its
    held-out figures (rest position error at the priors and at the estimates, along the path,
    the joints; at ``reference`` too when given) and the held-out paths added to its strikes.
    The twin holds the arm's values, as in the fit."""
    t0, cpu0 = time.perf_counter(), time.process_time()
    options = options or ObjectFitOptions()
    by_object = _by_object(twin, specs)
    dropped = dict(fit.dropped)
    held_segs = [seg for r in heldout
                 for seg in _segments(r, options, _lowest_friction(by_object), dropped)]
    fitted = fit.parameters.values()
    twin.set_parameters(fitted)
    scored = _score(twin, [(s, True) for s in held_segs if s.object_id in by_object],
                    {s.name: s.prior for s in specs}, fitted, arm_priors, reference, nthread,
                    fit.observed_offsets)
    strikes = list(fit.strikes) + scored.pop('strikes')
    n = scored.pop('n_rollouts')
    return replace(fit, **scored, strikes=strikes, dropped=dropped,
                   n_rollouts=fit.n_rollouts + n,
                   wall_time=fit.wall_time + time.perf_counter() - t0,
                   cpu_time=fit.cpu_time + time.process_time() - cpu0)


def rest_spread(twin: Twin, recording: StrikeRecording, values: dict, *,
                position_sigma: float, yaw_sigma: float, samples: int = 12, seed: int = 0,
                options: ObjectFitOptions | None = None) -> float:
    """Median displacement (m) of the twin's simulated rest positions of ``recording``'s
    strikes when each struck object's start pose is drawn from the tracker's start-pose
    uncertainty (``position_sigma`` m per axis, ``yaw_sigma`` rad) around the tracked one,
    with ``values`` set. A push turns the object by what the contact does in its first
    millimetres, so this spread is a floor under any held-out rest error, whatever the
    parameters: measured on emulated cells, 2-9 mm (1 sigma) along a 5-14 cm slide. The
    median, because a sample that tips the object over moves it by decimetres."""
    options = options or ObjectFitOptions()
    rng = np.random.default_rng(seed)
    d = []
    for seg in _segments(recording, options, {o: 0.2 for o in twin.object_ids}, {}):
        p, q = seg.poses0[seg.object_id]
        rests = []
        for k in range(samples + 1):
            yaw = quat_yaw(q) + (yaw_sigma * rng.standard_normal() if k else 0.0)
            dp = np.r_[position_sigma * rng.standard_normal(2), 0.0] if k else np.zeros(3)
            drawn = replace(seg, poses0={**seg.poses0, seg.object_id: (p + dp, yaw_quat(yaw))})
            xyz, _ = _simulate(twin, drawn, [values], 1)
            rests.append(xyz[0, seg.rest, :2].mean(axis=0))
        rests = np.asarray(rests)
        d += list(np.linalg.norm(rests[1:] - rests[0], axis=1))
    return float(np.median(d)) if d else float('nan')


def final_object_fits(twin: Twin, specs: list[ParameterSpec], recordings: list[StrikeRecording],
                      *, options: ObjectFitOptions | None = None, nthread: int = 1,
                      arm_priors: dict | None = None, reference: dict | None = None,
                      progress=None, validation: ObjectFitResult | None = None):
    """The estimates reported, and their validation: (fit on every strike probe, fit without
    the last probe scored on it). With one probe: (fit, None).

    The held-out figures of the returned fit are the validation's (the last probe was not in
    the validation fit); the estimates use every strike (a strike is too precious to leave
    out of the final numbers: one probe execution per strike of each object). The twin keeps
    the final estimates. ``validation``: that fit without the last probe, already made (by
    core/sysid/stage.run_strikes between the last two strikes, on a twin like this one); it
    is scored here, not made again."""
    if len(recordings) > 1:
        if validation is None:
            validation = identify_objects(twin, specs, recordings[:-1], options=options,
                                          nthread=nthread, progress=progress, scores='none')
        validation = score_heldout(twin, specs, validation, recordings[-1:], options=options,
                                   nthread=nthread, arm_priors=arm_priors,
                                   reference=reference)
    else:
        validation = None
    fit = identify_objects(twin, specs, recordings, options=options, nthread=nthread,
                           arm_priors=arm_priors, progress=progress)
    if validation is not None:
        fit.heldout_error_before = validation.heldout_error_before
        fit.heldout_error_after = validation.heldout_error_after
        fit.heldout_joint_before = validation.heldout_joint_before
        fit.heldout_joint_after = validation.heldout_joint_after
        fit.heldout_along_before = validation.heldout_along_before
        fit.heldout_along_after = validation.heldout_along_after
        fit.heldout_error_reference = validation.heldout_error_reference
        fit.heldout_error_observable = validation.heldout_error_observable
        fit.strikes += [s for s in validation.strikes if s.heldout]
        fit.n_rollouts += validation.n_rollouts
        fit.wall_time += validation.wall_time
        fit.cpu_time += validation.cpu_time
    return fit, validation
