"""Object pose tracking from one depth image: known boxes (and cylinders) on a known table.

Input per frame: a depth image (float32 metres with NaN/0 = hole, or uint16 millimetres with
0 = hole), the pinhole intrinsics K and ``T_world_camera`` (REP 103 optical frame in the world,
z up). Known beforehand (from scene reconstruction, or given by hand): each object's id, shape
and full extents, and the table top's height; objects rest upright on the table or on top of
another known box (a stack of two).

Per frame (``ObjectTracker.update``):

1. Back-projection against cached per-pixel world rays (one multiply-add per pixel and axis).
   A pixel is kept when its point lies between a margin and the tallest object (+
   ``headroom``) above the table: the margin grows with the depth noise (sigma_z =
   ``noise_coefficient`` z^2, the active-stereo law, mapped to world z through the ray), so
   table noise forms no blobs; everything higher (most of the arm) is dropped at once.
2. Pixels on a depth jump (> ``jump_threshold`` to a 4-neighbour) are dropped (they join an
   object to whatever is in front of or behind it), and so are the points the caller's
   ``exclude`` masks (``RobotGeomMask``: the arm's geoms at the measured joint positions;
   ``sphere_mask``: around given link positions).
3. Connected components of the rest (8-connected, in the image) are the clusters; each has a
   top height and a footprint (minimum-area rectangle). A cluster taller than any object is
   a stack: cut at a box's top into that box and the object standing on it (whose pose is
   then fitted on that support, z = the base's top + h / 2). Which box is the base: the
   history first (the object last seen standing there, or last frame's reading), else the
   known shape fitted to the part above with the least RMS.
4. Association: an object can take a cluster whose top matches its known height
   (``height_tolerance``) and whose footprint is not larger than the object's; cost = distance
   to the object's previous position (priors within ``max_jump`` first), Hungarian
   assignment. Unassigned fragments within the object's reach join its cluster (a thin
   occluder cuts an object's image in two). A tracked object without a cluster (it touches
   the arm or another object) is fitted to the points near its previous pose instead.
5. Fit with the KNOWN size over (x, y, yaw) (cylinder: x, y); z = table + h / 2. Residual of a
   point: its distance to the face through which its camera ray enters the box (the face it
   was seen on; the nearest face is biased near edges), weighted by the depth noise along
   that face's normal plus ``model_sigma``; Huber-IRLS Levenberg-Marquardt. Along a box axis
   whose walls the camera sees at a grazing angle at best, the midpoint of the faces spanning
   that axis is a soft constraint (a few wall points pin nothing; the cost has false minima
   there). Tracking: from the previous pose only, kept when it fits well and moved little.
   Otherwise (first sight, a jump): from the previous pose and the cluster's rectangle both
   ways round on a coarse subsample, the best refined; and the box turned by 90 deg must fit
   clearly worse (``orientation_margin``), else its orientation is ambiguous.
6. Acceptance (else reported missing with the reason, never invented): enough inliers; the
   pose is pinned by what is seen (along each box axis a visible wall or a top face spanning
   the whole extent; cylinder: a wall arc of >= 60 deg or the whole top); and no see-through:
   rays through the (slightly shrunk) fitted object must not see a surface behind its front
   (a wrong fit covers table or a lower object).
7. Yaw is defined modulo pi (pi/2 for a square footprint): the representative closest to the
   previous yaw (first frame: the given yaw) is reported. A cylinder's yaw is unobservable:
   the given one is reported.

Measured on the emulated cells (test_object_tracking.py): <= 1.4 mm, <= 1.9 deg with true
camera poses; CPU per 640x480 frame ~10 ms tracking, 20-35 ms acquiring (2 objects, arm mask).

ROS-free: numpy + scipy (MuJoCo only inside ``RobotGeomMask``); scipy loads on first use, so a
tracker node starts without its import cost.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .geometry import yaw_quat

SHAPES = ('box', 'cylinder')
_INCOMPATIBLE = 1e6
_NOT_FOUND = 'no cluster of its height and size'
# Association cost of a cluster's top height error against the object's, in m of distance
# per m (1 cm of height weighs like 10 cm of travel from the last pose).
HEIGHT_COST = 10.0


# ------------------------------------------------------------------ data


@dataclass(frozen=True)
class TrackedObjectModel:
    """A known object: full extents along its own axes (cylinder: diameter, diameter, height).

    ``position`` (x, y) / ``yaw`` (optional): where it was last seen, e.g. the reconstructed
    scene; a weak prior for association and the reference for the yaw's pi ambiguity.
    """
    id: str
    extents: tuple[float, float, float]
    shape: str = 'box'
    position: tuple[float, float] | None = None
    yaw: float | None = None

    def __post_init__(self):
        ext = tuple(float(v) for v in self.extents)
        if len(ext) != 3 or not all(np.isfinite(ext)) or min(ext) <= 0:
            raise ValueError(f'object {self.id!r}: extents must be 3 positive values, got '
                             f'{list(self.extents)}')
        if self.shape not in SHAPES:
            raise ValueError(f'object {self.id!r}: shape {self.shape!r} is not one of {SHAPES}')
        object.__setattr__(self, 'extents', ext)

    @property
    def height(self) -> float:
        """Object height in m (z extent)."""
        return self.extents[2]

    @property
    def half_diagonal(self) -> float:
        """Half the diagonal of the object's footprint in m."""
        return 0.5 * float(np.hypot(self.extents[0], self.extents[1]))

    @property
    def yaw_period(self) -> float:
        """Yaw symmetry of the footprint (:func:`footprint_yaw_period`)."""
        return footprint_yaw_period(self.shape, self.extents)


@dataclass
class TrackedPose:
    """One tracked object: centre (m, world), yaw (rad) with its quaternion, and the inlier count
    behind it."""
    id: str
    position: np.ndarray          # (3,) world, m: the object's centre
    quat_wxyz: np.ndarray         # (4,) rotation about world z by ``yaw``
    yaw: float                    # rad
    num_points: int               # inlier depth points that support the fit
    residual: float               # RMS distance of those points to the object's surface, m


@dataclass
class TrackingResult:
    """One frame's tracking: the poses found, why each missing id is missing, and step
    timings (s)."""
    poses: dict[str, TrackedPose]                 # found objects only
    missing: dict[str, str]                       # id -> why it is not reported
    timings: dict[str, float] = field(default_factory=dict)   # s: steps, 'total', 'cpu'
    num_clusters: int = 0


@dataclass
class TrackerConfig:
    """Tracker settings: depth-noise model, table margins, inlier and fit thresholds (m unless
    named)."""
    min_margin: float = 0.006          # m above the table: lowest point kept
    noise_coefficient: float = 0.0042  # sigma_z = c z^2 (1/m): D435 subpixel 0.08 / (383 px 5 cm)
    margin_sigmas: float = 2.5         # table noise kept out: margin = max(min, k sigma_world_z)
    headroom: float = 0.025            # m above the tallest object: higher points are dropped
    jump_threshold: float = 0.02       # m between 4-neighbours: a surface boundary
    min_points: int = 40               # per cluster and per accepted fit (full resolution)
    stride: int = 1                    # pixel subsampling (1 = every pixel)
    height_tolerance: float = 0.012    # m between a cluster's top and an object's height
    size_tolerance: float = 0.02       # m a cluster's footprint may exceed the object's
    max_jump: float = 0.25             # m an object may move between frames and keep its prior
    max_iterations: int = 20
    max_fit_points: int = 600          # per object (uniform subsample); checks use every point
    coarse_fit_points: int = 150       # choosing among the start poses
    good_fit_cost: float = 1.5         # mean truncated cost per point of a good fit (tracking)
    track_step: float = 0.02           # m a tracked object may move from its last pose ...
    track_turn_deg: float = 15.0       # ... and turn, and keep the quick (tracking) fit
    model_sigma: float = 0.001         # m: rounded edges, size error (added to every point)
    anchor_sigma: float = 0.001        # m, weight of the face-extent midpoint
    grazing_cosine: float = 0.3        # a wall seen more obliquely than this does not pin
    orientation_margin: float = 0.05   # cost per point the box turned by 90 deg must lose
    min_inlier_fraction: float = 0.7   # of the points it was fitted to
    min_wall_points: int = 20          # a visible side wall (full resolution)
    span_tolerance: float = 0.004      # m (+ 3 pixels): a face "spans" an extent within this
    see_through_shrink: float = 0.003  # m the fitted object shrinks for the see-through test
    max_see_through: float = 0.08      # fraction of its rays that may see behind its front


# ------------------------------------------------------------------ robot / exclusion masks


def sphere_mask(centres, radius: float | Sequence[float]) -> Callable[[np.ndarray], np.ndarray]:
    """Exclusion of points within ``radius`` of any of ``centres`` (N, 3), e.g. link origins."""
    c = np.asarray(centres, float).reshape(-1, 3)
    r = np.broadcast_to(np.asarray(radius, float), (len(c),))

    def mask(points: np.ndarray) -> np.ndarray:
        pts = np.asarray(points, float)
        d2 = ((pts * pts).sum(axis=1)[:, None] - 2 * np.einsum('nk,gk->ng', pts, c)
              + (c * c).sum(axis=1)[None])
        return np.any(d2 <= (r * r)[None], axis=1)
    return mask


def box_mask(centres, rotations, half_sizes) -> Callable[[np.ndarray], np.ndarray]:
    """Points inside any oriented box: centres (G, 3), world-from-box rotations (G, 3, 3),
    half sizes (G, 3) (already inflated by the margin)."""
    centres = np.asarray(centres, float).reshape(-1, 3)
    rotations = np.asarray(rotations, float).reshape(-1, 3, 3)
    half = np.asarray(half_sizes, float).reshape(-1, 3)
    radius2 = np.sum(half * half, axis=1)
    c2 = np.sum(centres * centres, axis=1)

    def mask(points: np.ndarray) -> np.ndarray:
        pts = np.asarray(points, float)
        out = np.zeros(len(pts), bool)
        if not len(pts):
            return out
        # Bounding spheres first (one matrix product), the exact test only for candidates.
        # (einsum, not a BLAS product: OpenBLAS threads spinning after a large product cost
        # more CPU than they save on a busy machine)
        d2 = (pts * pts).sum(axis=1)[:, None] - 2 * np.einsum('nk,gk->ng', pts, centres) + c2[None]
        cand_p, cand_g = np.nonzero(d2 <= radius2[None])
        if not cand_p.size:
            return out
        local = np.einsum('ni,nij->nj', pts[cand_p] - centres[cand_g], rotations[cand_g])
        inside = np.all(np.abs(local) <= half[cand_g], axis=1)
        out[cand_p[inside]] = True
        return out
    return mask


class RobotGeomMask:
    """The arm's geoms (their bounding boxes, inflated by ``margin``) at a joint configuration:
    URDF + forward kinematics, compiled once (core.robot_description.RobotDescription)."""

    def __init__(self, robot, margin: float = 0.015):
        import mujoco
        self._mujoco = mujoco
        self.joint_names = tuple(robot.joint_names)
        self.model = robot.compile()
        self.data = mujoco.MjData(self.model)
        self.qpos_idx = robot.qpos_indices(self.model)
        self.margin = float(margin)
        self.geoms = np.array([g for g in range(self.model.ngeom)
                               if self.model.geom_bodyid[g] != 0], int)
        if not self.geoms.size:
            raise ValueError('the robot has no geoms to mask')

    def at(self, joint_positions) -> Callable[[np.ndarray], np.ndarray]:
        """Mask at ``joint_positions``: a {name: position} dict (joints it lacks stay at zero)
        or a sequence in ``joint_names`` order."""
        if isinstance(joint_positions, dict):
            q = [float(joint_positions.get(n, 0.0)) for n in self.joint_names]
        else:
            q = [float(v) for v in joint_positions]
            if len(q) != len(self.joint_names):
                raise ValueError(f'{len(q)} joint positions for {len(self.joint_names)} joints')
        m, d = self.model, self.data
        d.qpos[:] = m.qpos0
        d.qpos[self.qpos_idx] = q
        self._mujoco.mj_kinematics(m, d)
        aabb = m.geom_aabb[self.geoms]              # centre (3), half sizes (3), geom frame
        rots = d.geom_xmat[self.geoms].reshape(-1, 3, 3)
        centres = d.geom_xpos[self.geoms] + np.einsum('gij,gj->gi', rots, aabb[:, :3])
        return box_mask(centres, rots, aabb[:, 3:] + self.margin)


# ------------------------------------------------------------------ image helpers


def depth_in_metres(depth: np.ndarray) -> np.ndarray:
    """float32 metres, NaN = hole, from float metres (NaN/0/negative = hole) or uint16 mm."""
    arr = np.asarray(depth)
    if arr.ndim != 2:
        raise ValueError(f'depth image must be 2-D (H, W), got shape {arr.shape}')
    if arr.dtype == np.uint16:
        out = arr.astype(np.float32) * np.float32(0.001)
        out[arr == 0] = np.nan
        return out
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f'depth image must be float metres or uint16 mm, got {arr.dtype}')
    out = arr.astype(np.float32, copy=True)
    out[~(out > 0)] = np.nan
    return out


_DEPTH_KINDS = {'32FC1': 'f4', '16UC1': 'u2', 'mono16': 'u2'}


def depth_from_buffer(data, encoding: str, height: int, width: int, step: int,
                      bigendian: bool = False) -> np.ndarray:
    """A depth image's bytes (sensor_msgs/Image layout) -> (H, W) float32 metres or uint16
    millimetres in native byte order (a copy); ValueError for an unsupported encoding
    (32FC1, 16UC1, mono16) or a geometry the bytes do not hold."""
    kind = _DEPTH_KINDS.get(encoding)
    if kind is None:
        raise ValueError(f'unsupported depth encoding {encoding!r} (32FC1 or 16UC1)')
    dtype = np.dtype(('>' if bigendian else '<') + kind)
    if height == 0 or width == 0 or step < width * dtype.itemsize:
        raise ValueError(f'bad image geometry {width}x{height} step {step}')
    buf = np.frombuffer(data, dtype=np.uint8)
    if buf.size < step * height:
        raise ValueError(f'image has {buf.size} bytes, header says {step * height}')
    rows = buf[:step * height].reshape(height, step)
    arr = rows[:, :width * dtype.itemsize].copy().view(dtype)
    return arr.astype(dtype.newbyteorder('='), copy=False)


def objects_from_parameters(ids, shapes, extents, poses) -> list[TrackedObjectModel]:
    """Parallel arrays (ids; shapes, empty = all boxes; 3 extents per id; none or 3 x, y, yaw
    per id) -> tracked object models; ValueError names the array that does not fit."""
    ids = list(ids)
    shapes = list(shapes) or ['box'] * len(ids)
    extents = [float(v) for v in extents]
    poses = [float(v) for v in poses]
    if len(shapes) != len(ids):
        raise ValueError(f'object_shapes has {len(shapes)} entries for {len(ids)} object_ids')
    if len(extents) != 3 * len(ids):
        raise ValueError(f'object_extents has {len(extents)} values; give 3 (x, y, z in m) '
                         f'per object_ids entry ({3 * len(ids)})')
    if poses and len(poses) != 3 * len(ids):
        raise ValueError(f'object_poses has {len(poses)} values; give none or 3 (x, y, yaw) '
                         f'per object_ids entry ({3 * len(ids)})')
    models = []
    for k, oid in enumerate(ids):
        pose = poses[3 * k:3 * k + 3] if poses else None
        models.append(TrackedObjectModel(
            oid, tuple(extents[3 * k:3 * k + 3]), shapes[k],
            tuple(pose[:2]) if pose else None, pose[2] if pose else None))
    return models


def _jump_mask(depth: np.ndarray, threshold: float) -> np.ndarray:
    """Pixels with a 4-neighbour more than ``threshold`` nearer or farther (both sides)."""
    d = np.nan_to_num(depth, nan=0.0)
    out = np.zeros(d.shape, bool)
    dv = np.abs(d[1:] - d[:-1]) > threshold
    dh = np.abs(d[:, 1:] - d[:, :-1]) > threshold
    out[1:] |= dv
    out[:-1] |= dv
    out[:, 1:] |= dh
    out[:, :-1] |= dh
    return out


def min_area_rectangle(xy: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """(angle of the first side, (2,) side lengths, (2,) centre) of the smallest enclosing
    rectangle (rotating calipers over the convex hull's edge directions)."""
    from scipy.spatial import ConvexHull, QhullError
    try:
        hull = xy[ConvexHull(xy).vertices]
    except (QhullError, ValueError):
        hull = xy
    edges = np.diff(np.vstack([hull, hull[:1]]), axis=0)
    angles = np.unique(np.mod(np.arctan2(edges[:, 1], edges[:, 0]), np.pi / 2))
    best = (np.inf, 0.0, np.zeros(2), np.zeros(2))
    for a in angles:
        rot = _rot2(a)
        local = hull @ rot
        lo, hi = local.min(axis=0), local.max(axis=0)
        sides = hi - lo
        if sides[0] * sides[1] < best[0]:
            best = (sides[0] * sides[1], float(a), sides, rot @ ((lo + hi) / 2))
    return best[1], best[2], best[3]


def _rot2(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s], [s, c]])


def footprint_yaw_period(shape: str, extents) -> float:
    """The yaw symmetry of an upright object's footprint, the period its tracked yaw is known
    modulo: 2 pi for a cylinder (no yaw), pi for a box, pi/2 for a box whose footprint is
    square within 3 mm."""
    if shape == 'cylinder':
        return 2 * np.pi
    return np.pi / 2 if abs(extents[0] - extents[1]) < 0.003 else np.pi


def wrap_to(angle: float, reference: float, period: float) -> float:
    """``angle`` + k ``period`` closest to ``reference``."""
    return float(angle - period * np.round((angle - reference) / period))


# ------------------------------------------------------------------ shape models
# Points are in the table frame: x, y world, z = height above the table top.


def surface_distance(obj: TrackedObjectModel, pts: np.ndarray, params) -> tuple:
    """Signed distance of points to ``obj`` at ``params`` (box: x, y, yaw; cylinder: x, y)
    and its Jacobian (N, len(params))."""
    hx, hy, hz = (e / 2 for e in obj.extents)
    lz = pts[:, 2] - hz
    if obj.shape == 'cylinder':
        dx, dy = pts[:, 0] - params[0], pts[:, 1] - params[1]
        rho = np.maximum(np.hypot(dx, dy), 1e-9)
        q = np.column_stack([rho - hx, np.abs(lz) - hz])
        outside = np.maximum(q, 0.0)
        norm = np.linalg.norm(outside, axis=1)
        dist = norm + np.minimum(q.max(axis=1), 0.0)
        g = np.where(norm > 0, outside[:, 0] / np.maximum(norm, 1e-12),
                     (q[:, 0] >= q[:, 1]).astype(float))   # d dist / d rho
        return dist, np.column_stack([-g * dx / rho, -g * dy / rho])
    c, s = np.cos(params[2]), np.sin(params[2])
    dx, dy = pts[:, 0] - params[0], pts[:, 1] - params[1]
    lx = c * dx + s * dy
    ly = -s * dx + c * dy
    local = np.column_stack([lx, ly, lz])
    q = np.abs(local) - np.array([hx, hy, hz])
    outside = np.maximum(q, 0.0)
    norm = np.linalg.norm(outside, axis=1)
    dist = norm + np.minimum(q.max(axis=1), 0.0)
    sign = np.where(local >= 0, 1.0, -1.0)
    out = norm > 0
    grad = np.zeros_like(local)
    grad[out] = sign[out] * outside[out] / norm[out, None]
    inner = np.flatnonzero(~out)
    k = np.argmax(q[inner], axis=1)
    grad[inner, k] = sign[inner, k]
    gx, gy = grad[:, 0], grad[:, 1]
    return dist, np.column_stack([-c * gx + s * gy, -s * gx - c * gy, gx * ly - gy * lx])


def _rays(pts: np.ndarray, origin) -> tuple:
    """(origin, unit directions, ranges) of the camera rays through ``pts``."""
    o = np.asarray(origin, float)
    v = pts - o
    rng = np.linalg.norm(v, axis=1)
    return o, v / np.maximum(rng, 1e-9)[:, None], rng


def _box_slabs(obj, params, o, d, shrink: float = 0.0):
    """Slab-method entry/exit ray parameters (N,) for rays o + t d (d: (N, 3), any scale)
    through the box at params, plus the entry axis and the local o and d."""
    hx, hy, hz = (e / 2 - shrink for e in obj.extents)
    c, s = np.cos(params[2]), np.sin(params[2])
    ox, oy = o[0] - params[0], o[1] - params[1]
    ol = (c * ox + s * oy, -s * ox + c * oy, o[2] - obj.extents[2] / 2)
    dl = (c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1], d[:, 2])
    t_in = np.empty((len(d), 3))
    t_out = np.empty((len(d), 3))
    with np.errstate(divide='ignore', invalid='ignore'):
        for k, h in enumerate((hx, hy, hz)):
            t1 = (-h - ol[k]) / dl[k]
            t2 = (h - ol[k]) / dl[k]
            t_in[:, k] = np.fmin(t1, t2)          # fmin/fmax: a ray parallel to a slab
            t_out[:, k] = np.fmax(t1, t2)         # gives +-inf, never NaN unless on it
    face = np.argmax(t_in, axis=1)
    t = t_in[np.arange(len(d)), face]
    return t, t_out.min(axis=1), face, ol, dl


def ray_residual(obj: TrackedObjectModel, pts: np.ndarray, params, rays) -> tuple:
    """(distance, Jacobian, |cos|, face) of each point to the face of the box at ``params``
    (x, y, yaw) through which its camera ray enters the box (face 0/1: the x/y walls, 2: top).

    The face a point was seen on is the face its ray enters, so this is unbiased where the
    nearest-face distance is not (a noisy top-face point near an edge is nearer the side
    wall). |cos| of the ray to that face's normal is the share of the along-ray depth noise
    that lies along the normal. Rays that miss the box fall back to the (positive) distance
    to its surface (cos 1, face -1). Cylinders: ``surface_distance`` (cos 1, face -1).
    """
    if obj.shape != 'box':
        r, jac = surface_distance(obj, pts, params)
        return r, jac, np.ones(len(pts)), np.full(len(pts), -1)
    o, d, rng = rays
    t, t_exit, face, ol, dl = _box_slabs(obj, params, o, d)
    hit = (t <= t_exit) & (t > 0)
    r = rng - t
    c, s = np.cos(params[2]), np.sin(params[2])
    jac = np.zeros((len(d), 3))
    on_x = hit & (face == 0)
    on_y = hit & (face == 1)
    # Entry t = (+-h - ol_k) / dl_k with ol, dl rotated by -yaw: d t / d params, r = range - t.
    jac[on_x, 0] = -c / dl[0][on_x]
    jac[on_x, 1] = -s / dl[0][on_x]
    jac[on_x, 2] = (ol[1] + t[on_x] * dl[1][on_x]) / dl[0][on_x]
    jac[on_y, 0] = s / dl[1][on_y]
    jac[on_y, 1] = -c / dl[1][on_y]
    jac[on_y, 2] = -(ol[0] + t[on_y] * dl[0][on_y]) / dl[1][on_y]
    cos = np.abs(np.stack(dl, axis=1)[np.arange(len(d)), face])
    r *= cos                                     # along the face normal
    jac *= cos[:, None]
    face = np.where(hit, face, -1)
    if not hit.all():
        miss = ~hit
        r[miss], jac[miss] = surface_distance(obj, pts[miss], params)
        cos[miss] = 1.0
    return r, jac, cos, face


def ray_entry(obj: TrackedObjectModel, params, o, d, shrink: float = 0.0):
    """(entry, hit) ray parameters of rays o + t d (d: (N, 3), any scale) into the object at
    ``params``, made ``shrink`` smaller on every side."""
    if obj.shape == 'box':
        t, t_exit, *_ = _box_slabs(obj, params, o, d, shrink)
        return t, (t <= t_exit) & (t_exit > 0)
    radius = obj.extents[0] / 2 - shrink
    ox, oy = o[0] - params[0], o[1] - params[1]
    a = d[:, 0] ** 2 + d[:, 1] ** 2
    b = 2 * (ox * d[:, 0] + oy * d[:, 1])
    cc = ox * ox + oy * oy - radius * radius
    disc = b * b - 4 * a * cc
    root = np.sqrt(np.maximum(disc, 0.0))
    with np.errstate(divide='ignore', invalid='ignore'):
        s_in = (-b - root) / (2 * a)
        s_out = (-b + root) / (2 * a)
        z1 = (shrink - o[2]) / d[:, 2]
        z2 = (obj.extents[2] - shrink - o[2]) / d[:, 2]
    t = np.maximum(s_in, np.minimum(z1, z2))
    t_exit = np.minimum(s_out, np.maximum(z1, z2))
    return t, (disc > 0) & (t <= t_exit) & (t_exit > 0)


def fit_known_shape(obj: TrackedObjectModel, pts: np.ndarray, sigma: np.ndarray, start,
                    iterations: int = 20, anchors=(), rays=None,
                    model_sigma: float = 0.001) -> tuple[np.ndarray, float]:
    """Huber-IRLS Levenberg-Marquardt from ``start``; returns (params, truncated cost).

    ``sigma``: each point's depth noise (along its ray). ``rays`` (``_rays``): distances to
    the face each ray enters (``ray_residual``) with noise sigma |cos| along the normal; else
    distances to the nearest surface with noise sigma. ``model_sigma`` adds what the model
    cannot know (rounded edges, a slightly different size) to every point.
    ``anchors``: (u (2,), value, sigma) soft constraints u . centre_xy = value (m).
    """
    n = len(start)

    def residual(params):
        if rays is None:
            r, jac = surface_distance(obj, pts, params)
            return r, jac, np.sqrt(sigma * sigma + model_sigma ** 2)
        r, jac, cos, _ = ray_residual(obj, pts, params, rays)
        return r, jac, np.sqrt((sigma * cos) ** 2 + model_sigma ** 2)

    def anchor_terms(params):
        cost, h, g = 0.0, np.zeros((n, n)), np.zeros(n)
        for u, value, s in anchors:
            ja = np.zeros(n)
            ja[:2] = np.asarray(u) / s
            r = (float(np.dot(u, params[:2])) - value) / s
            cost += r * r
            h += np.outer(ja, ja)
            g += ja * r
        return cost, h, g

    def total_cost(r, sig, params):
        return _truncated_cost(r, sig) + anchor_terms(params)[0]

    p = np.asarray(start, float).copy()
    lam = 1e-4
    r, jac, sig = residual(p)
    cost = total_cost(r, sig, p)
    for _ in range(iterations):
        a = np.abs(r)
        delta = 1.5 * sig
        w = np.where(a <= delta, 1.0, delta / np.maximum(a, 1e-12)) / (sig * sig)
        jw = jac * w[:, None]
        _, ha, ga = anchor_terms(p)
        h = np.einsum('ni,nj->ij', jac, jw) + ha
        g = np.einsum('ni,n->i', jw, r) + ga
        h[np.diag_indices_from(h)] *= 1.0 + lam
        h[np.diag_indices_from(h)] += 1e-6
        try:
            step = -np.linalg.solve(h, g)
        except np.linalg.LinAlgError:
            break
        cand = p + step
        rc, jc, sc = residual(cand)
        new_cost = total_cost(rc, sc, cand)
        if new_cost <= cost:
            p, r, jac, sig, cost = cand, rc, jc, sc, new_cost
            lam = max(lam * 0.1, 1e-9)
            if np.max(np.abs(step[:2])) < 2e-5 and (n < 3 or abs(step[2]) < 2e-4):
                break
        else:
            lam *= 10.0
            if lam > 1e4:
                break
    return p, cost


def _truncated_cost(r: np.ndarray, sigma: np.ndarray) -> float:
    return float(np.sum(np.minimum((r / sigma) ** 2, 9.0)))


# ------------------------------------------------------------------ the tracker


@dataclass
class _Cluster:
    pts: np.ndarray          # (N, 3) x, y, height above the table
    sigma: np.ndarray        # (N,) 1-sigma depth noise of each point, m
    top: float               # robust top height above the table
    angle: float             # min-area rectangle
    sides: np.ndarray
    centre: np.ndarray
    support: float = 0.0     # m above the table the object it shows rests on (another's top)
    only: str = ''           # a split stack's part: the one object it was split for


@dataclass
class _Prior:
    xy: np.ndarray
    yaw: float
    strong: bool             # tracked last frame (gated by max_jump) vs a given/old pose
    support: float = 0.0     # m above the table it rested on


@dataclass
class _Frame:
    depth: np.ndarray        # strided metres
    coef: tuple              # per-pixel world ray (ax, ay, az): world = depth * a + t
    origin: np.ndarray       # camera position, table frame
    K: np.ndarray
    T: np.ndarray
    stride: int


class ObjectTracker:
    """Tracks ``objects`` over successive depth frames (one camera, or several in turn)."""

    def __init__(self, objects: Sequence[TrackedObjectModel], table_height: float,
                 config: TrackerConfig | None = None):
        ids = [o.id for o in objects]
        if len(set(ids)) != len(ids):
            raise ValueError(f'object ids are not unique: {ids}')
        self.objects = list(objects)
        self.table_height = float(table_height)
        self.config = config or TrackerConfig()
        self._rays_cache: dict = {}
        self._frame: _Frame | None = None
        # Points above the two tallest objects stacked can belong to none (the arm): dropped
        # wholesale.
        tallest = sorted((o.height for o in self.objects), reverse=True)[:2]
        self._max_height = sum(tallest) + (self.config.height_tolerance + self.config.headroom)
        self.reset()

    def reset(self, keep_positions: bool = False):
        """Forget the history: the priors go back to the objects' given poses; or, with
        ``keep_positions`` (after a gap in the stream), keep the last poses as weak priors."""
        if keep_positions:
            for prior in self._priors.values():
                prior.strong = False
            return
        self._priors: dict[str, _Prior] = {}
        for o in self.objects:
            if o.position is not None:
                self._priors[o.id] = _Prior(np.asarray(o.position[:2], float),
                                            float(o.yaw or 0.0), False)

    # -------------------------------------------------------------- geometry cache
    def _ray_table(self, shape, K, T, stride):
        """Per-pixel world ray coefficients a (world = depth * a + t), cached per camera."""
        key = (shape, stride, K.tobytes(), T.tobytes())
        hit = self._rays_cache.get(key)
        if hit is None:
            if len(self._rays_cache) >= 8:
                self._rays_cache.clear()
            h, w = shape
            v, u = np.mgrid[0:h:stride, 0:w:stride].astype(np.float64)
            dx = (u - K[0, 2]) / K[0, 0]
            dy = (v - K[1, 2]) / K[1, 1]
            r = T[:3, :3]
            hit = tuple((r[i, 0] * dx + r[i, 1] * dy + r[i, 2]).astype(np.float32)
                        for i in range(3))
            self._rays_cache[key] = hit
        return hit

    # -------------------------------------------------------------- per frame
    def update(self, depth: np.ndarray, K, T_world_camera,
               exclude: Callable[[np.ndarray], np.ndarray] | None = None) -> TrackingResult:
        """Track every object in one depth frame; ``exclude`` masks world points (the arm)."""
        cfg = self.config
        t0, c0 = time.perf_counter(), time.process_time()
        timings = {}
        d = depth_in_metres(depth)
        s = max(1, int(cfg.stride))
        if s > 1:
            d = np.ascontiguousarray(d[::s, ::s])
        K = np.asarray(K, float).reshape(3, 3)
        T = np.asarray(T_world_camera, float).reshape(4, 4)
        if not (np.all(np.isfinite(K)) and np.all(np.isfinite(T)) and K[0, 0] > 0
                and K[1, 1] > 0):
            raise ValueError('intrinsics or camera pose are not finite / positive')
        ax, ay, az = self._ray_table(np.shape(depth), K, T, s)
        t = T[:3, 3] - np.array([0.0, 0.0, self.table_height])
        self._frame = _Frame(d, (ax, ay, az), t, K, T, s)
        height = d * az + np.float32(t[2])
        sigma_w = np.abs(az) * (np.float32(cfg.noise_coefficient) * d * d)
        margin = np.maximum(np.float32(cfg.min_margin), np.float32(cfg.margin_sigmas) * sigma_w)
        with np.errstate(invalid='ignore'):
            keep = (height > margin) & (height < self._max_height)
        keep &= ~_jump_mask(d, cfg.jump_threshold * s)     # neighbours are s pixels apart
        flat = np.flatnonzero(keep)
        z = d.ravel()[flat].astype(np.float64)
        pts = np.column_stack([z * ax.ravel()[flat] + t[0], z * ay.ravel()[flat] + t[1],
                               height.ravel()[flat]])
        timings['select'] = time.perf_counter() - t0

        if exclude is not None and len(pts):
            t1 = time.perf_counter()
            world = pts + np.array([0.0, 0.0, self.table_height])
            drop = np.asarray(exclude(world), bool)
            if drop.any():
                keep.ravel()[flat[drop]] = False
                flat, z, pts = flat[~drop], z[~drop], pts[~drop]
            timings['exclude'] = time.perf_counter() - t1

        t1 = time.perf_counter()
        min_pts = max(5, cfg.min_points // (s * s))
        from scipy import ndimage
        labels, n = ndimage.label(keep, structure=np.ones((3, 3), bool))
        lab = labels.ravel()[flat]
        counts = np.bincount(lab, minlength=n + 1)
        sigma = cfg.noise_coefficient * z * z
        order = np.argsort(lab, kind='stable')
        bounds = np.searchsorted(lab[order], np.arange(n + 2))
        clusters = [self._cluster(pts[order[bounds[k]:bounds[k + 1]]],
                                  sigma[order[bounds[k]:bounds[k + 1]]])
                    for k in np.flatnonzero(counts >= min_pts) if k > 0]
        clusters = self._split_stacks(clusters, min_pts)
        timings['cluster'] = time.perf_counter() - t1

        t1 = time.perf_counter()
        poses, missing = self._associate_and_fit(clusters, pts, sigma, min_pts, s)
        timings['fit'] = time.perf_counter() - t1
        timings['total'] = time.perf_counter() - t0
        timings['cpu'] = time.process_time() - c0
        return TrackingResult(poses, missing, timings, len(clusters))

    def _cluster(self, pts: np.ndarray, sigma: np.ndarray) -> _Cluster:
        top = float(np.percentile(pts[:, 2], 95))
        xy = pts[:, :2]
        if len(xy) > 600:
            xy = xy[np.linspace(0, len(xy) - 1, 600).astype(int)]
        angle, sides, centre = min_area_rectangle(xy)
        return _Cluster(pts, sigma, top, angle, sides, centre)

    def _split_stacks(self, clusters, min_pts: int) -> list:
        """An object resting on another (a box stacked on a box) joins it in one cluster,
        taller than any object: split such a cluster at each box's top where the part below
        fits that box and the part above fits another object standing on it (its
        ``support``, m above the table)."""
        out = []
        for c in clusters:
            if any(self._compatible(o, c) for o in self.objects):
                out.append(c)
                continue
            out.extend(self._split(c, min_pts) or [c])
        return out

    def _split(self, c: _Cluster, min_pts: int):
        """[lower, upper] of a stack ([upper] where the base is a cluster of its own), or
        None. The pairs (base, object on it) whose heights add up to the cluster's top and
        whose parts, cut at the base's top, fit their footprints are the candidates. The
        history decides first: the base is the object last seen standing where the stack
        stands (objects do not slide under others), or the pair read so last frame. Where
        it does not (a first sight), the object's known shape is fitted to the part above
        and the least RMS of an accepted fit wins: a footprint read off the top face alone
        cannot tell an 8 x 6 from a 7 x 7 cm box (the far edge is lost)."""
        cfg = self.config
        cands = []
        for o in self.objects:
            for base in self.objects:
                if base is o or base.shape != 'box' or abs(
                        c.top - base.height - o.height) > cfg.height_tolerance:
                    continue
                parts = self._cut(c, base, o, min_pts)
                if parts is not None:
                    cands.append((self._stack_history(c, base, o), base, o, parts))
        if not cands:
            return None
        first = min(k for k, *_ in cands)
        cands = [x for x in cands if x[0] == first]
        if len(cands) == 1:
            return cands[0][3]
        best, best_rms = cands[0][3], np.inf
        for _, base, o, parts in cands:
            upper = parts[-1]
            fitted = self._fit_on(base.height, o, upper.pts, upper.sigma,
                                  self._starts(o, upper, None), min_pts, self._frame.stride)
            if not isinstance(fitted, str) and fitted[2] < best_rms:
                best, best_rms = parts, fitted[2]
        return best

    def _stack_history(self, c: _Cluster, base, o) -> int:
        """0 when the history says ``o`` stands on ``base`` here (last frame's reading, or
        the base last seen on the table where the stack stands), 1 otherwise."""
        top = self._priors.get(o.id)
        if top is not None and top.strong and abs(top.support - base.height) < 1e-6 and \
                np.linalg.norm(top.xy - c.centre) <= o.half_diagonal:
            return 0
        under = self._priors.get(base.id)
        if under is not None and under.support == 0.0 and \
                np.linalg.norm(under.xy - c.centre) <= base.half_diagonal:
            return 0
        return 1

    def _cut(self, c: _Cluster, base, o, min_pts: int):
        """``c`` cut at ``base``'s top: [lower, upper] (or [upper] where the base is a
        cluster of its own, a depth jump between them), each compatible with its object;
        None otherwise."""
        up = c.pts[:, 2] > base.height + self.config.min_margin
        if up.sum() < min_pts:
            return None
        upper = replace(self._cluster(c.pts[up], c.sigma[up]), support=base.height, only=o.id)
        if not self._compatible(o, upper):
            return None
        if (~up).sum() < min_pts:
            return [upper]
        lower = replace(self._cluster(c.pts[~up], c.sigma[~up]), only=base.id)
        return [lower, upper] if self._compatible(base, lower) else None

    def _compatible(self, obj: TrackedObjectModel, c: _Cluster) -> bool:
        cfg = self.config
        if (c.only and c.only != obj.id) or abs(c.top - c.support - obj.height) > \
                cfg.height_tolerance:
            return False
        longest, shortest = max(obj.extents[:2]), min(obj.extents[:2])
        return bool(max(c.sides) <= longest + 2 * cfg.size_tolerance
                    and min(c.sides) <= shortest + cfg.size_tolerance)

    def _associate_and_fit(self, clusters, all_pts, all_sigma, min_pts, stride):
        cfg = self.config
        n_o, n_c = len(self.objects), len(clusters)
        cost = np.full((n_o, max(n_c, 1)), _INCOMPATIBLE)
        for i, obj in enumerate(self.objects):
            prior = self._priors.get(obj.id)
            for j, c in enumerate(clusters):
                if not self._compatible(obj, c):
                    continue
                height_error = abs(c.top - c.support - obj.height)
                if prior is None:
                    cost[i, j] = 1.0 + height_error
                else:
                    dist = float(np.linalg.norm(c.centre - prior.xy))
                    gate = cfg.max_jump + obj.half_diagonal
                    # Two objects of near heights (4 and 5 cm) are both compatible with either
                    # cluster: the height decides where the distances nearly tie.
                    cost[i, j] = HEIGHT_COST * height_error + (
                        dist if (dist <= gate or not prior.strong) else 10.0 + dist)
        assigned = {}
        if n_c:
            from scipy.optimize import linear_sum_assignment
            rows, cols = linear_sum_assignment(cost)
            assigned = {int(r): int(c) for r, c in zip(rows, cols, strict=True)
                        if cost[r, c] < _INCOMPATIBLE}
        used = set(assigned.values())
        poses, missing = {}, {}
        supports = {}
        for i, obj in enumerate(self.objects):
            prior = self._priors.get(obj.id)
            tracking = None
            if i in assigned:
                c = clusters[assigned[i]]
                if c.support == 0.0:
                    c = self._with_fragments(obj, clusters, assigned[i], used)
                pts, sig, support = c.pts, c.sigma, c.support
                starts = self._starts(obj, c, prior)
                if prior is not None and prior.strong and np.linalg.norm(
                        prior.xy - c.centre) <= obj.half_diagonal:
                    tracking = prior
            elif prior is not None and prior.strong and len(all_pts):
                # No cluster of its own (touching the arm or another object): the points near
                # where it was, between what it rested on and its top.
                reach = obj.half_diagonal + 0.03
                support = prior.support
                near = (np.sum((all_pts[:, :2] - prior.xy) ** 2, axis=1) <= reach ** 2) & (
                    all_pts[:, 2] <= support + obj.height + cfg.height_tolerance) & (
                    all_pts[:, 2] > support + (cfg.min_margin if support else 0.0))
                if near.sum() < min_pts:
                    missing[obj.id] = _NOT_FOUND
                    continue
                pts, sig = all_pts[near], all_sigma[near]
                starts, tracking = [self._prior_params(obj, prior)], prior
            else:
                missing[obj.id] = _NOT_FOUND
                continue
            fitted = self._fit_on(support, obj, pts, sig, starts, min_pts, stride, tracking)
            if isinstance(fitted, str):
                missing[obj.id] = fitted
                continue
            params, num, rms = fitted
            ref = prior.yaw if prior is not None else (obj.yaw or 0.0)
            yaw = ref if obj.shape == 'cylinder' else wrap_to(params[2], ref, obj.yaw_period)
            pos = np.array([params[0], params[1],
                            self.table_height + support + obj.height / 2])
            poses[obj.id] = TrackedPose(obj.id, pos, yaw_quat(yaw), yaw, num, rms)
            supports[obj.id] = support
        for oid, p in poses.items():
            self._priors[oid] = _Prior(p.position[:2].copy(), p.yaw, True, supports[oid])
        for oid in missing:                      # keep the last pose, but as a weak prior
            if oid in self._priors:
                self._priors[oid].strong = False
        return poses, missing

    def _fit_on(self, support: float, obj, pts, sig, starts, min_pts, stride, prior=None):
        """:meth:`_fit` of an object resting ``support`` m above the table: its points and
        the camera shifted down by that much, so the fit and its checks stand the object on
        z = 0 as ever."""
        if support == 0.0:
            return self._fit(obj, pts, sig, starts, min_pts, stride, prior)
        frame = self._frame
        self._frame = replace(frame, origin=frame.origin - [0.0, 0.0, support])
        try:
            return self._fit(obj, pts - [0.0, 0.0, support], sig, starts, min_pts, stride,
                             prior)
        finally:
            self._frame = frame

    def _with_fragments(self, obj, clusters, j, used) -> _Cluster:
        """Cluster ``j`` joined by unassigned clusters within the object's reach: a thin
        occluder (the tool's shaft) cuts an object's image in two."""
        cfg = self.config
        c = clusters[j]
        near = [k for k, o in enumerate(clusters) if k not in used and np.linalg.norm(
            o.centre - c.centre) <= obj.half_diagonal + cfg.size_tolerance
            and o.top <= obj.height + cfg.height_tolerance
            and max(o.sides) <= 2 * obj.half_diagonal + cfg.size_tolerance]
        if not near:
            return c
        joined = self._cluster(np.vstack([c.pts] + [clusters[k].pts for k in near]),
                               np.concatenate([c.sigma] + [clusters[k].sigma for k in near]))
        if not self._compatible(obj, joined):
            return c
        used.update(near)
        return joined

    @staticmethod
    def _prior_params(obj, prior: _Prior):
        return (np.array([prior.xy[0], prior.xy[1]]) if obj.shape == 'cylinder'
                else np.array([prior.xy[0], prior.xy[1], prior.yaw]))

    def _starts(self, obj: TrackedObjectModel, c: _Cluster, prior: _Prior | None):
        starts = []
        if prior is not None and np.linalg.norm(prior.xy - c.centre) <= obj.half_diagonal:
            starts.append(self._prior_params(obj, prior))
        if obj.shape == 'cylinder':
            return starts + [np.array([c.centre[0], c.centre[1]])]
        # Which rectangle side is the object's x: try both.
        return starts + [np.array([c.centre[0], c.centre[1], a])
                         for a in (c.angle, c.angle + np.pi / 2)]

    # -------------------------------------------------------------- fitting
    def _fit(self, obj, pts, sig, starts, min_pts, stride, prior=None):
        """(params, inlier count, RMS), or why the object is not reported.

        Tracking (``prior``: last frame's pose, near): the fit from it alone, kept when it fits
        well, moved little and passes the checks. Otherwise every start on a coarse subsample,
        judged on a finer one and refined there; a box must also fit clearly better than
        turned by 90 deg."""
        cfg = self.config
        full = self._point_set(pts, sig, len(pts))
        coarse = self._point_set(pts, sig, cfg.coarse_fit_points)
        fine = self._point_set(pts, sig, cfg.max_fit_points)
        if prior is not None:
            start = self._prior_params(obj, prior)
            params = self._refine(obj, start, fine, full, cfg.max_iterations)
            step = float(np.linalg.norm(params[:2] - start[:2]))
            turn = 0.0 if obj.shape != 'box' else abs(wrap_to(params[2] - start[2], 0.0,
                                                              obj.yaw_period))
            if (step <= cfg.track_step and turn <= np.radians(cfg.track_turn_deg)
                    and self._cost(obj, params, fine) <= cfg.good_fit_cost):
                done = self._accept(obj, params, full, min_pts, stride)
                if not isinstance(done, str):
                    return done
        cands = [self._refine(obj, start, coarse, coarse, 8) for start in starts]
        best = min(cands, key=lambda q: self._cost(obj, q, fine))
        params = self._refine(obj, best, fine, full, cfg.max_iterations)
        if obj.shape == 'box' and obj.yaw_period == np.pi:
            # The other way round (yaw + pi/2) must fit clearly worse: a corner or a sliver
            # of a box fits both.
            gap = self._orientation_gap(obj, params, cands, coarse, fine, full)
            if gap < cfg.orientation_margin:
                return 'its orientation is ambiguous (too little of it is visible)'
        return self._accept(obj, params, full, min_pts, stride)

    def _point_set(self, pts, sig, n):
        """(points, sigmas, rays) of a uniform subsample of at most ``n`` points."""
        if len(pts) > n:
            pick = np.linspace(0, len(pts) - 1, n).astype(int)
            pts, sig = pts[pick], sig[pick]
        return pts, sig, _rays(pts, self._frame.origin)

    def _accept(self, obj, params, full, min_pts, stride):
        pts, sig, rays = full
        inl, dist, face = self._inliers(obj, pts, sig, params, rays)
        reason = (self._check_support(obj, pts, sig, params, inl, face, min_pts, stride)
                  or self._check_see_through(obj, params))
        if reason:
            return reason
        return params, int(inl.sum()) * stride * stride, float(np.sqrt(np.mean(dist[inl] ** 2)))

    def _orientation_gap(self, obj, params, cands, coarse, fine, full) -> float:
        """Cost per point of the best fit turned by 90 deg minus that of ``params``: from the
        other candidates so turned and from starts about ``params`` (same centre and shifted
        by half the difference of the sides: a fragment can sit anywhere on the turned box)."""
        def turned(q):
            return abs(wrap_to(q[2] - params[2], 0.0, np.pi)) > np.pi / 4
        shift = abs(obj.extents[0] - obj.extents[1]) / 2
        c, s = np.cos(params[2]), np.sin(params[2])
        offsets = [(0.0, 0.0)] + [(sign * shift * u[0], sign * shift * u[1])
                                  for u in ((c, s), (-s, c)) for sign in (-1, 1)]
        alt = [q for q in cands if turned(q)]
        alt += [self._refine(obj, params + [dx, dy, np.pi / 2], coarse, coarse, 8)
                for dx, dy in offsets]
        alt = [q for q in alt if turned(q)]
        if not alt:
            return np.inf
        best = min(alt, key=lambda q: self._cost(obj, q, fine))
        best = self._refine(obj, best, fine, full, self.config.max_iterations)
        return self._cost(obj, best, fine) - self._cost(obj, params, fine)

    def _refine(self, obj, start, fit_set, anchor_set, iterations):
        """Fit on ``fit_set`` (points, sigmas, rays) from ``start``; for a box then again with
        the anchors of its grazing axes (from ``anchor_set``'s inliers), started on them:
        along such an axis the cost has shallow false minima."""
        cfg = self.config
        f_pts, f_sig, f_rays = fit_set
        params, _ = fit_known_shape(obj, f_pts, f_sig, start, iterations, rays=f_rays,
                                    model_sigma=cfg.model_sigma)
        if obj.shape != 'box':
            return params
        a_pts, a_sig, a_rays = anchor_set
        inl = self._inliers(obj, a_pts, a_sig, params, a_rays)[0]
        anchors = self._anchors(obj, a_pts[inl], params)
        if not anchors:
            return params
        params = params.copy()
        for u, value, _ in anchors:
            params[:2] += u * (value - float(np.dot(u, params[:2])))
        params, _ = fit_known_shape(obj, f_pts, f_sig, params, iterations, anchors, rays=f_rays,
                                    model_sigma=cfg.model_sigma)
        return params

    def _cost(self, obj, params, point_set) -> float:
        """Mean truncated cost per point (about 1 for a good fit to noise-only data)."""
        pts, sig, rays = point_set
        dist, _, cos, _ = ray_residual(obj, pts, params, rays)
        return _truncated_cost(dist, np.sqrt((sig * cos) ** 2 + self.config.model_sigma ** 2)
                               ) / max(len(pts), 1)

    def _inliers(self, obj, pts, sig, params, rays):
        """(inlier mask, distances, faces): within 3 sigma (with the model sigma) + 2 mm."""
        dist, _, cos, face = ray_residual(obj, pts, params, rays)
        bound = 3 * np.sqrt((sig * cos) ** 2 + self.config.model_sigma ** 2) + 0.002
        return np.abs(dist) <= bound, dist, face

    def _anchors(self, obj, p, params):
        """Soft constraints on the centre along each box axis whose walls the camera sees at a
        grazing angle at best (few points: they hardly pin the centre): the midpoint of the
        1st..99th percentiles of the faces spanning that axis (top face, the other axis'
        walls) among the inliers ``p``. Both ends are silhouettes that lose the same (edge
        rounding, edge holes), so the midpoint is unbiased; skipped where those faces do not
        span the full extent (an occluded end). Not used along an axis whose wall faces the
        camera: there the far end loses more than the near one."""
        cfg = self.config
        if len(p) < 20:
            return []
        c, s = np.cos(params[2]), np.sin(params[2])
        d = p[:, :2] - params[:2]
        local = np.column_stack([c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1]])
        half = np.array(obj.extents[:2]) / 2
        axes = (np.array([c, s]), np.array([-s, c]))
        view = self._frame.origin - np.array([params[0], params[1], obj.height / 2])
        view /= max(float(np.linalg.norm(view)), 1e-9)
        out = []
        for k in (0, 1):
            if abs(float(np.dot(axes[k], view[:2]))) > cfg.grazing_cosine:
                continue                  # the wall facing the camera is seen: it pins k
            lo, hi = np.percentile(local[:, k], [1, 99])
            if hi - lo < 2 * half[k] - self._span_tolerance(params):
                continue
            centre_k = float(np.dot(axes[k], params[:2])) + (lo + hi) / 2
            out.append((axes[k], centre_k, cfg.anchor_sigma))
        return out

    def _span_tolerance(self, params) -> float:
        """How much shorter than the extent a fully seen face may look: ``span_tolerance``
        (edge rounding) plus 3 pixels at the object's distance (edge holes, percentiles)."""
        dist = float(np.linalg.norm(self._frame.origin[:2] - params[:2]))
        dist = np.hypot(dist, self._frame.origin[2])
        return self.config.span_tolerance + 3 * dist / self._frame.K[0, 0] * self._frame.stride

    def _check_support(self, obj, pts, sig, params, inl, face, min_pts, stride) -> str:
        """'' when enough of the object is seen to pin its pose, else why not."""
        cfg = self.config
        if inl.sum() < min_pts:
            return f'{int(inl.sum()) * stride * stride} inlier points (< {cfg.min_points})'
        frac = float(inl.mean())
        if frac < cfg.min_inlier_fraction:
            return f'only {frac:.0%} of its points fit its shape'
        min_wall = max(5, cfg.min_wall_points // (stride * stride))
        p, s = pts[inl], sig[inl]
        if obj.shape == 'cylinder':
            radius, h = obj.extents[0] / 2, obj.extents[2]
            d = p[:, :2] - params[:2]
            rho = np.hypot(d[:, 0], d[:, 1])
            wall = (p[:, 2] < h - 0.006) & (np.abs(rho - radius) <= 3 * s + 0.002)
            if wall.sum() >= min_wall:
                az = np.sort(np.arctan2(d[wall, 1], d[wall, 0]))
                gaps = np.diff(np.concatenate([az, az[:1] + 2 * np.pi]))
                if 2 * np.pi - gaps.max() >= np.radians(60):
                    return ''
            top = d[(np.abs(p[:, 2] - h) <= 2.5 * s + 0.002) & (rho <= radius)]
            if len(top) >= min_pts and np.all(np.ptp(top, axis=0) >= 2 * radius
                                              - self._span_tolerance(params)):
                return ''
            return 'too little of it is visible to pin its position'
        c, sn = np.cos(params[2]), np.sin(params[2])
        d = p[:, :2] - params[:2]
        local = np.column_stack([c * d[:, 0] + sn * d[:, 1], -sn * d[:, 0] + c * d[:, 1]])
        f = face[inl]
        for k in (0, 1):
            if np.sum(f == k) >= min_wall:
                continue                               # a wall facing axis k is seen
            top = local[f == 2, k]
            if len(top) >= min_pts and np.ptp(top) >= obj.extents[k] - self._span_tolerance(
                    params):
                continue                               # the top spans axis k
            return f'too little of it is visible to pin its position along its {"xy"[k]} axis'
        return ''

    def _check_see_through(self, obj, params) -> str:
        """'' unless too many rays through the fitted object (shrunk by see_through_shrink)
        see a surface behind its front: a wrong fit covers table or a lower object. Rays
        blocked in front (the arm) are fine."""
        cfg, fr = self.config, self._frame
        h = obj.extents[2]
        if obj.shape == 'box':
            hx, hy = obj.extents[0] / 2, obj.extents[1] / 2
            c, s = np.cos(params[2]), np.sin(params[2])
            corners_xy = np.array([[params[0] + c * x - s * y, params[1] + s * x + c * y]
                                   for x in (-hx, hx) for y in (-hy, hy)])
        else:
            r = obj.extents[0] / 2
            corners_xy = np.array([[params[0] + x, params[1] + y]
                                   for x in (-r, r) for y in (-r, r)])
        corners = np.vstack([np.column_stack([corners_xy, np.full(4, z)]) for z in (0.0, h)])
        cam = (corners - fr.origin) @ fr.T[:3, :3]
        if np.any(cam[:, 2] <= 0.01):
            return ''                                  # behind the camera: nothing to test
        u = (fr.K[0, 0] * cam[:, 0] / cam[:, 2] + fr.K[0, 2]) / fr.stride
        v = (fr.K[1, 1] * cam[:, 1] / cam[:, 2] + fr.K[1, 2]) / fr.stride
        hgt, wid = fr.depth.shape
        u0, u1 = max(0, int(np.floor(u.min()))), min(wid, int(np.ceil(u.max())) + 1)
        v0, v1 = max(0, int(np.floor(v.min()))), min(hgt, int(np.ceil(v.max())) + 1)
        if u0 >= u1 or v0 >= v1:
            return ''
        dep = fr.depth[v0:v1, u0:u1].ravel().astype(np.float64)
        dirs = np.column_stack([a[v0:v1, u0:u1].ravel() for a in fr.coef]).astype(np.float64)
        entry, hit = ray_entry(obj, params, fr.origin, dirs, cfg.see_through_shrink)
        hit &= np.isfinite(dep)
        if hit.sum() < 10:
            return ''
        tol = 3 * cfg.noise_coefficient * dep[hit] ** 2 + 0.003
        behind = dep[hit] > entry[hit] + tol
        frac = float(behind.mean())
        if frac > cfg.max_see_through:
            return f'{frac:.0%} of the rays through the fitted pose see past it'
        return ''
