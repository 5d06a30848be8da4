"""Tool-down inverse kinematics for the tasks: damped least squares on MuJoCo's Jacobian.

The tasks move the tool tip in the table plane with the tool pointing straight down (the
orientation of the ready pose), so the IK tracks a full 6-D target: position plus the fixed
ready-pose orientation. It runs on the robot description's own kinematic model (robot base
at the origin), never on a twin, so the same joint targets go to a twin and to a cell.
"""
from __future__ import annotations

import mujoco
import numpy as np

from ..robot_description import RobotDescription

READY_POSE = (0.0, -1.5708, 1.5708, 1.5708, 0.0, 0.0)   # tip at (0.40, 0, 0.20), tool down


class IKError(ValueError):
    """The IK did not reach the target (out of reach or past a joint limit)."""


class ToolDownIK:
    """Joint positions for tool-tip positions with the ready pose's tool orientation."""

    def __init__(self, robot: RobotDescription, q_ready=READY_POSE, damping: float = 1e-3):
        self.robot = robot
        self.model = robot.compile()
        self.data = mujoco.MjData(self.model)
        self._qadr = robot.qpos_indices(self.model)
        self._dadr = np.array([self.model.jnt_dofadr[self.model.jnt_qposadr.tolist().index(a)]
                               for a in self._qadr])
        self._tip = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, robot.tip_link)
        self.q_ready = np.asarray(q_ready, float)
        self.damping = float(damping)
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
        return self.fk(q)[0]

    def solve(self, target, q_seed=None, tol: float = 1e-4, max_iter: int = 100) -> np.ndarray:
        """Joint positions putting the tip at ``target`` (m) with the tool pointing down."""
        target = np.asarray(target, float)
        q = (self.q_ready if q_seed is None else np.asarray(q_seed, float)).copy()
        m, d = self.model, self.data
        jacp, jacr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
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
            e = np.concatenate([e_pos, e_rot])
            err = float(np.linalg.norm(e_pos)) + 0.1 * float(np.linalg.norm(e_rot))
            if err < tol:
                break
            mujoco.mj_jacBody(m, d, jacp, jacr, self._tip)
            J = np.vstack([jacp, jacr])[:, self._dadr]
            dq = J.T @ np.linalg.solve(J @ J.T + self.damping * np.eye(6), e)
            q = q + dq
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

    def jacobian_xy(self, q) -> np.ndarray:
        """(2, n_joints) Jacobian of the tip's x, y at q (for velocity feed-forward)."""
        self.fk(q)
        jacp = np.zeros((3, self.model.nv))
        mujoco.mj_jacBody(self.model, self.data, jacp, None, self._tip)
        return jacp[:2, self._dadr]
