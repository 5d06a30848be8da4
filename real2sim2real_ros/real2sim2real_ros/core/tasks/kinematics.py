"""Tool-down inverse kinematics for the tasks: damped least squares on MuJoCo's Jacobian.

The tasks move the tool tip in the table plane with the tool pointing straight down (the
orientation of the ready pose), so the IK tracks a full 6-D target: position plus the fixed
ready-pose orientation. It runs on the robot description's own kinematic model (robot base
at the origin), never on a twin, so the same joint targets go to a twin and to a cell.

The ready pose is ``READY_POSE`` for the default cell arm. For any other arm (e.g. the UR5 with
the pusher from core/tools.py) ``ready_pose`` derives one: the tool tip at ``READY_TIP`` with
the tool pointing straight down, solved from a few seeds and picked for reaching the tasks'
workspace on the table without any link going below it. Redundant arms (7-DoF: Panda, xArm7)
use their extra freedom to stay near the ready pose (the middle of the joint ranges for the
ready pose itself), within the joint limits. An arm whose reach does not cover the task region
gets one error line saying what the tasks need and where the table would have to be.
"""
from __future__ import annotations

import mujoco
import numpy as np

from ..robot_description import RobotDescription

READY_POSE = (0.0, -1.5708, 1.5708, 1.5708, 0.0, 0.0)   # tip at (0.40, 0, 0.20), tool down
READY_TIP = (0.40, 0.0, 0.20)   # m, where every arm's ready pose puts the tool tip
# Tip points a derived ready pose must reach tool-down (the tasks' strikes and pushes).
_WORKSPACE = [(x, y, z) for z in (0.005, 0.1) for x in (0.3, 0.45, 0.6, 0.7)
              for y in (-0.15, 0.0, 0.15)]
_READY_CACHE: dict[tuple, np.ndarray] = {}


class IKError(ValueError):
    """The IK did not reach the target (out of reach or past a joint limit)."""


class ToolDownIK:
    """Joint positions for tool-tip positions with the ready pose's tool orientation."""

    def __init__(self, robot: RobotDescription, q_ready=None, damping: float = 1e-3):
        """q_ready: the ready pose whose tool orientation the IK keeps and which seeds it;
        None = ``ready_pose(robot)`` (READY_POSE on the default cell arm)."""
        self.robot = robot
        self.model = robot.compile()
        self.data = mujoco.MjData(self.model)
        self._qadr = robot.qpos_indices(self.model)
        qposadr = self.model.jnt_qposadr.tolist()
        self._jids = [qposadr.index(a) for a in self._qadr]     # the arm's joint ids, in order
        self._dadr = self.model.jnt_dofadr[self._jids]
        self._tip = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, robot.tip_link)
        self.damping = float(damping)
        # Redundant arms leave the roll about the tool axis free (the pusher is round); a
        # task that needs it (a gripper's jaw turned to a box's faces) sets this False.
        self.roll_free = True
        if q_ready is None:
            q_ready = ready_pose(robot, ik=self)
        self.q_ready = np.asarray(q_ready, float)
        _, self.rot_ready = self.fk(self.q_ready)

    def fk(self, q) -> tuple[np.ndarray, np.ndarray]:
        """(tip position, tip rotation matrix) at joint positions q."""
        d = self.data
        d.qpos[:] = self.model.qpos0
        d.qpos[self._qadr] = q
        mujoco.mj_kinematics(self.model, d)
        mujoco.mj_comPos(self.model, d)   # mj_jacBody reads cdof / subtree_com
        return d.xpos[self._tip].copy(), d.xmat[self._tip].reshape(3, 3).copy()

    def tip_position(self, q) -> np.ndarray:
        """The tool tip's position (m, world) at joints ``q``."""
        return self.fk(q)[0]

    def solve(self, target, q_seed=None, tol: float = 1e-4, max_iter: int | None = None,
              null_gain: float = 0.2) -> np.ndarray:
        """Joint positions putting the tip at ``target`` (m) with the tool pointing down.

        On a redundant arm (more than 6 arm joints) the null space of the task pulls the
        joints towards the seed (``null_gain`` per iteration; the ready pose when no seed is
        given, and a path is seeded point by point from it) and every iterate stays within the
        joint limits: the self-motion is the least change from the seed, so paths are
        continuous and the arm keeps its elbow where the ready pose has it (where
        that pull stalls short of the target, near a singularity, the plain damped least
        squares finishes from there). There the roll about the tool axis is free unless
        ``roll_free`` is False (a gripper's jaw must face the object)."""
        target = np.asarray(target, float)
        q = (self.q_ready if q_seed is None else np.asarray(q_seed, float)).copy()
        home = q.copy()
        m, d = self.model, self.data
        jacp, jacr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
        redundant = len(q) > 6
        if max_iter is None:
            max_iter = 400 if redundant else 100
        lo, hi = self.robot.lower, self.robot.upper
        err = np.inf
        for _ in range(max_iter):
            pos, rot = self.fk(q)
            e_pos = target - pos
            # Orientation error as the rotation vector taking the current to the ready frame.
            r_err = self.rot_ready @ rot.T
            quat = np.zeros(4)
            mujoco.mju_mat2Quat(quat, r_err.ravel())
            e_rot = np.zeros(3)
            mujoco.mju_quat2Vel(e_rot, quat, 1.0)
            if redundant and self.roll_free:
                # The pusher is round: only its axis (tip z) is a task; the roll about it is
                # free, one more freedom away from the wrist's singularity.
                z, z_goal = rot[:, 2], self.rot_ready[:, 2]
                e_rot = np.cross(z, z_goal)
            e = np.concatenate([e_pos, e_rot])
            err = float(np.linalg.norm(e_pos)) + 0.1 * float(np.linalg.norm(e_rot))
            if err < tol and not redundant:
                break
            mujoco.mj_jacBody(m, d, jacp, jacr, self._tip)
            if redundant and self.roll_free:
                jacr = (np.eye(3) - np.outer(z, z)) @ jacr
            J = np.vstack([jacp, jacr])[:, self._dadr]
            J_pinv = J.T @ np.linalg.inv(J @ J.T + self.damping * np.eye(6))
            dq = J_pinv @ e
            if redundant:   # exact null-space projector: the pull leaves the tip alone
                null = np.eye(len(q)) - np.linalg.pinv(J, rcond=1e-4) @ J
                pull = null @ (null_gain * (home - q))
                # Small self-motion steps: their second-order effect on the tip stays below
                # what one task step removes (large ones stall short of the target).
                big = np.abs(pull).max()
                if big > 0.01:
                    pull *= 0.01 / big
                if err < tol and np.abs(pull).max() < 1e-4:   # on target, self-motion done
                    break
                q = np.clip(q + dq + pull, lo, hi)
            else:
                q = q + dq
        if err > 10 * tol and redundant and null_gain > 0:
            # Near a singularity the pull and the damped task step can balance short of the
            # target: the plain damped least squares finishes from where it stalled.
            return self.solve(target, q, tol, max_iter, null_gain=0.0)
        if err > 10 * tol:
            raise IKError(f'IK did not reach tip target {np.round(target, 4).tolist()} '
                          f'(residual {err:.4f})')
        if not self.robot.within_limits(q):
            raise IKError(f'IK solution for {np.round(target, 4).tolist()} is past a joint limit')
        return q

    def solve_path(self, points, q_seed=None) -> np.ndarray:
        """Joint positions (n, n_joints) along tip points (n, 3), each seeded by the last."""
        q = self.q_ready if q_seed is None else np.asarray(q_seed, float)
        out = []
        for p in np.asarray(points, float):
            q = self.solve(p, q)
            out.append(q)
        return np.array(out)

    def task_jacobian(self, q) -> np.ndarray:
        """(6, n_joints) Jacobian of the task ``solve`` tracks at q: the tip's linear velocity
        and its angular velocity, the latter without the roll about the tool axis on a
        redundant arm (the round pusher's roll is free there, as in ``solve``)."""
        _, rot = self.fk(q)
        jacp, jacr = np.zeros((3, self.model.nv)), np.zeros((3, self.model.nv))
        mujoco.mj_jacBody(self.model, self.data, jacp, jacr, self._tip)
        if len(q) > 6:
            z = rot[:, 2]
            jacr = (np.eye(3) - np.outer(z, z)) @ jacr
        return np.vstack([jacp, jacr])[:, self._dadr]

    def joint_rates(self, q, tip_velocity) -> np.ndarray:
        """Least-norm joint velocities moving the tip at ``tip_velocity`` (m/s, base frame)
        with the tool orientation held (the task of ``solve``)."""
        J = self.task_jacobian(q)
        return np.linalg.pinv(J, rcond=1e-6) @ np.concatenate(
            [np.asarray(tip_velocity, float), np.zeros(3)])

    def self_motions(self, q) -> np.ndarray:
        """(k, n_joints) orthonormal directions that move no part of the task at q (empty on
        a non-redundant arm): the arm's redundancy, e.g. the elbow's swivel on a 7-DoF arm."""
        J = self.task_jacobian(q)
        _, sv, vt = np.linalg.svd(J)
        rank = int(np.sum(sv > 1e-6 * max(sv.max(), 1e-12)))
        return vt[rank:]

    def jacobian_xy(self, q) -> np.ndarray:
        """(2, n_joints) Jacobian of the tip's x, y at q (for velocity feed-forward)."""
        self.fk(q)
        jacp = np.zeros((3, self.model.nv))
        mujoco.mj_jacBody(self.model, self.data, jacp, None, self._tip)
        return jacp[:2, self._dadr]


def _tool_down_error(ik: ToolDownIK, q, target) -> float:
    """Tip position error (m) + tool-axis error (rad) of q against tool-down at target."""
    pos, rot = ik.fk(q)
    return float(np.linalg.norm(pos - target)) + float(np.arccos(np.clip(-rot[2, 2], -1, 1)))


def _wrap(q, lower, upper) -> np.ndarray:
    """Joint angles into (-pi, pi] where the limits allow it."""
    w = (q + np.pi) % (2 * np.pi) - np.pi
    return np.where((w >= lower) & (w <= upper), w, q)


def _mid_range(robot: RobotDescription) -> np.ndarray:
    """The middle of each joint's range (within +-pi): 0 for symmetric limits."""
    return (np.maximum(robot.lower, -np.pi) + np.minimum(robot.upper, np.pi)) / 2


def _axis_ik(ik: ToolDownIK, target, q, iters: int = 300) -> tuple[np.ndarray, float]:
    """Tip at ``target`` with the tool axis (tip z) pointing down; the rotation about that axis
    is free and used, with any other redundancy, to pull the joints towards the middle of
    their ranges (zero for symmetric limits)."""
    m, robot = ik.model, ik.robot
    mid = _mid_range(robot)
    jacp, jacr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
    eye, eye3, reg = np.eye(len(q)), np.eye(3), 1e-6 * np.eye(6)
    e = np.zeros(6)
    err = np.inf
    for _ in range(iters):
        pos, rot = ik.fk(q)
        z = rot[:, 2]
        e[:3] = target - pos
        e[3:] = -z[1], z[0], 0.0              # the tool axis z x down (0, 0, -1)
        err = float(np.linalg.norm(e))
        mujoco.mj_jacBody(m, ik.data, jacp, jacr, ik._tip)
        J = np.vstack([jacp, (eye3 - np.outer(z, z)) @ jacr])[:, ik._dadr]
        J_pinv = J.T @ np.linalg.inv(J @ J.T + reg)
        dq = J_pinv @ e
        step = np.abs(dq).max()
        if step > 0.5:
            dq *= 0.5 / step
        dq += (eye - J_pinv @ J) @ (-0.05 * (_wrap(q, robot.lower, robot.upper) - mid))
        q = q + dq
        if err < 1e-7 and np.abs(dq).max() < 1e-7:
            break
    return _wrap(q, robot.lower, robot.upper), err


def _workspace_score(robot: RobotDescription, q) -> int:
    """How many workspace points the tasks' IK reaches from q with no moving link below the
    table (z < -0.01 m in the base frame); -1 when q itself puts a link there."""
    ik = ToolDownIK(robot, q)
    moving = ik.model.body_weldid != 0
    if ik.data.xpos[moving, 2].min() < -0.01:
        return -1
    reached = 0
    for p in _WORKSPACE:
        try:
            ik.solve(p)
        except IKError:
            continue
        reached += int(ik.data.xpos[moving, 2].min() >= -0.01)
    return reached


def ready_pose(robot: RobotDescription, target=READY_TIP, n_seeds: int = 16,
               ik: ToolDownIK | None = None, explain: bool = True) -> np.ndarray:
    """A tool-down ready pose of ``robot``: the tool tip at ``target`` (base frame), the tool
    pointing straight down. READY_POSE when it is one (the default cell arm: unchanged);
    otherwise solved from ``n_seeds`` deterministic seeds, keeping the solution that reaches
    most of the tasks' table workspace with no link below the table, then the one with the
    smallest joint angles from the middle of their ranges (the "front" branch rather than one
    reaching over the shoulder).
    The tool axis is the tip link's z (as on tool0 / tool_tip, core.tools.add_pusher).
    Cached per kinematic model. Raises IKError when no seed gives one, with what the tasks
    need and what the arm reaches (``reach_report``). ``ik``: a ToolDownIK
    of ``robot`` to compute with (only its kinematics are used). ``explain=False``: the IKError
    leaves ``reach_report`` out (its reach sweep takes seconds), for callers that fall back.
    """
    target = np.asarray(target, float)
    if ik is None:
        ik = ToolDownIK(robot, np.clip(np.zeros(robot.n_joints), robot.lower, robot.upper))
    if robot.n_joints == len(READY_POSE) and robot.within_limits(READY_POSE) and \
            _tool_down_error(ik, READY_POSE, target) < 2e-3:
        return np.asarray(READY_POSE, float)
    probe = np.linspace(-0.5, 0.5, robot.n_joints)
    key = (robot.name, robot.joint_names, robot.tip_link, tuple(target.round(6)),
           tuple(np.concatenate([ik.fk(probe)[0], ik.fk(-probe)[0]]).round(6)))
    if key not in _READY_CACHE:
        lo, hi = np.maximum(robot.lower, -np.pi), np.minimum(robot.upper, np.pi)
        rng = np.random.default_rng(0)
        seeds = [np.clip(np.zeros(robot.n_joints), lo, hi)]
        seeds += [rng.uniform(lo, hi) for _ in range(n_seeds - 1)]
        best, best_key = None, None
        found: list[np.ndarray] = []
        anchor, reach = reach_bound(ik)
        if np.linalg.norm(target - anchor) > reach:
            seeds = []                  # out of reach in any configuration: no IK to try
        for seed in seeds:
            q, err = _axis_ik(ik, target, seed)
            if err > 1e-5 or not robot.within_limits(q) or \
                    any(np.abs(q - f).max() < 1e-3 for f in found):
                continue
            found.append(q)
            rank = (_workspace_score(robot, q), -float(np.linalg.norm(q - _mid_range(robot))))
            if rank[0] >= 0 and (best_key is None or rank > best_key):
                best, best_key = q, rank
        if best is None or best_key[0] < len(_WORKSPACE) // 2:
            why = reach_report(robot, ik) if explain else 'reach not explained (explain=False)'
            if best is None:
                raise IKError(f'{robot.name}: no tool-down ready pose with the tip at '
                              f'{target.round(3).tolist()}: {why}')
            raise IKError(f'{robot.name}: its tool-down ready pose reaches only {best_key[0]} '
                          f'of the {len(_WORKSPACE)} task workspace points: {why}')
        _READY_CACHE[key] = best
    return _READY_CACHE[key].copy()


def reach_bound(ik: ToolDownIK) -> tuple[np.ndarray, float]:
    """(the first arm joint's anchor, an upper bound on the tip's distance from it): the
    chain's anchor-to-anchor lengths and the last anchor to the tip, each fixed whatever the
    joints do, summed. A point farther than that is out of reach in any configuration."""
    robot, d = ik.robot, ik.data
    ik.fk(np.clip(np.zeros(robot.n_joints), robot.lower, robot.upper))
    anchors = np.vstack([d.xanchor[ik._jids], d.xpos[ik._tip]])
    return anchors[0].copy(), float(np.linalg.norm(np.diff(anchors, axis=0), axis=1).sum())


def _tool_down_span(ik: ToolDownIK, z: float, xs) -> tuple[float, float] | None:
    """The x range (m, base frame, y = 0) over which the tip reaches tool-down at height z,
    swept outwards and inwards from the first reachable x, each solve seeded by the last;
    points beyond ``reach_bound`` are not tried (an arm far too small fails at once)."""
    robot = ik.robot
    lo, hi = np.maximum(robot.lower, -np.pi), np.minimum(robot.upper, np.pi)
    rng = np.random.default_rng(1)
    seeds = [np.clip(_mid_range(robot), lo, hi)] + [rng.uniform(lo, hi) for _ in range(5)]
    anchor, reach = reach_bound(ik)
    ok = []
    for x in xs:
        if np.linalg.norm(np.array([x, 0.0, z]) - anchor) > reach:
            continue
        for seed in seeds:
            q, err = _axis_ik(ik, (x, 0.0, z), seed, iters=200)
            if err < 1e-4 and robot.within_limits(q):
                ok.append(x)
                seeds = [q] + seeds[:5]
                break
    return (min(ok), max(ok)) if ok else None


def reach_report(robot: RobotDescription, ik: ToolDownIK | None = None) -> str:
    """One line: the tool-down reach the tasks need, what ``robot`` has, and the table
    placement (distance of the task region from the robot base) that would do."""
    if ik is None:
        ik = ToolDownIK(robot, np.clip(np.zeros(robot.n_joints), robot.lower, robot.upper))
    ws = np.array(_WORKSPACE + [READY_TIP])
    x0, x1 = float(ws[:, 0].min()), float(ws[:, 0].max())
    y1 = float(np.abs(ws[:, 1]).max())
    z0, z1 = float(ws[:, 2].min()), float(ws[:, 2].max())
    need = float(np.linalg.norm(ws, axis=1).max())
    xs = np.arange(0.05, 1.5, 0.05)
    spans = {z: _tool_down_span(ik, z, xs) for z in (z0, z1)}
    head = (f'the tasks need the tool tip pointing down over x {x0:.2f}..{x1:.2f} m, '
            f'y +-{y1:.2f} m, z {z0:.3f}..{z1:.2f} m of the robot base (up to {need:.2f} m '
            f'from it)')
    if any(s is None for s in spans.values()):
        return head + '; this arm reaches no tool-down point at one of those heights'
    a = max(s[0] for s in spans.values())
    b = min(s[1] for s in spans.values())
    have = ', '.join(f'x {s[0]:.2f}..{s[1]:.2f} m at z {z:.3f} m' for z, s in spans.items())
    if b - a < x1 - x0:
        return (head + f'; tool-down this arm reaches {have} (y = 0): a span of {b - a:.2f} m '
                f'at both heights, shorter than the {x1 - x0:.2f} m the tasks use, so no '
                f'table placement would do')
    shift = a - x0 if a > x0 else b - x1
    where = 'farther from' if shift > 0 else 'nearer to'
    return (head + f'; tool-down this arm reaches {have} (y = 0): place the table so the task '
            f'region starts at x = {x0 + shift:.2f} m, {abs(shift):.2f} m {where} the base')
