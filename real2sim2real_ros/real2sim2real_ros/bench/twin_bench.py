"""Twin benchmarks: sim_server stepping over ROS against bare MuJoCo, batched rollout
throughput, and the wall time of one identification (core, emulated cell recordings).

Run through ``python -m real2sim2real_ros.bench`` (or alone: ``python -m
real2sim2real_ros.bench.twin_bench``, printing JSON).
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

STEPS = 5000


def _twin(parameters_file: str | None = None):
    from real2sim2real_ros.core.robot_description import default_cell_urdf, load_robot
    from real2sim2real_ros.core.twin import Twin
    robot = load_robot(default_cell_urdf())
    twin = Twin(robot, timestep=0.001)
    if parameters_file:
        from real2sim2real_ros.core.sysid.config import load_parameter_values
        twin.set_parameters(load_parameter_values(parameters_file))
    return robot, twin


def _parameters_file() -> str:
    from ament_index_python.packages import get_package_share_directory
    return str(Path(get_package_share_directory('real2sim2real_ros')) / 'config'
               / 'identification.yaml')


def bare_step_rates(steps: int = STEPS, reps: int = 3) -> dict:
    """Steps/s in-process on the model sim_server compiles (same URDF, timestep, parameters):
    ``mj_step(nstep=N)`` (one C call), a Python loop of mj_step, and Twin.step (reference
    queue + ctrl + mj_step + divergence check: what sim_server does per step)."""
    import mujoco
    _, twin = _twin(_parameters_file())
    m, d = twin.model, twin.data
    q = twin.joint_positions()
    best = {'mj_step_nstep': 0.0, 'mj_step_loop': 0.0, 'twin_step': 0.0}
    for _ in range(reps):
        t = time.perf_counter()
        mujoco.mj_step(m, d, nstep=steps)
        best['mj_step_nstep'] = max(best['mj_step_nstep'], steps / (time.perf_counter() - t))
        t = time.perf_counter()
        for _ in range(steps):
            mujoco.mj_step(m, d)
        best['mj_step_loop'] = max(best['mj_step_loop'], steps / (time.perf_counter() - t))
        t = time.perf_counter()
        for _ in range(steps):
            twin.step(q)
        best['twin_step'] = max(best['twin_step'], steps / (time.perf_counter() - t))
    twin.close()
    return {k + '_per_s': v for k, v in best.items()}


def sim_server_step_rate(run_dir: Path, steps: int = STEPS, reps: int = 3) -> dict:
    """~/step with ``steps`` steps on a paused sim_server (its own process), timed from the
    client, best of ``reps``."""
    from real2sim2real_ros.core.robot_description import default_cell_urdf
    from real2sim2real_ros.ros.commander import Commander
    run_dir.mkdir(parents=True, exist_ok=True)
    log = open(run_dir / 'sim_server_bench.log', 'w')  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, '-m', 'real2sim2real_ros.nodes.sim_server_node', '--ros-args',
         '-p', f'robot_description_file:={default_cell_urdf()}', '-p', 'start_paused:=true',
         '-p', f'parameters_file:={_parameters_file()}'],
        stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    cmd = Commander(node_name='twin_bench')
    try:
        cmd.sim_step(1, timeout=30.0)      # waits for the service; warms the path
        walls, sim = [], 0.0
        for _ in range(reps):
            t = time.perf_counter()
            resp = cmd.sim_step(steps, timeout=120.0)
            walls.append(time.perf_counter() - t)
            if not resp.success:
                raise RuntimeError(f'sim_server ~/step failed: {resp.message}')
            sim = resp.sim_time
        call_t = []
        for _ in range(20):                 # the service round trip alone
            t = time.perf_counter()
            cmd.sim_step(1)
            call_t.append(time.perf_counter() - t)
    finally:
        cmd.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    return {'steps': steps, 'steps_per_s': steps / min(walls),
            'wall_s_best': min(walls), 'wall_s_all': walls, 'sim_time_end': sim,
            'one_step_call_ms_median': float(np.median(call_t)) * 1e3}


def rollout_throughput(nthreads=(1, 2), samples: int = 16, duration: float = 2.0) -> list:
    """Twin.rollout of one multi-sine probe with ``samples`` parameter vectors (one batched
    mujoco.rollout call): simulated steps per wall second, per thread count."""
    from real2sim2real_ros.core.sysid.probes import multisine_probe
    robot, twin = _twin(_parameters_file())
    q0 = twin.joint_positions()
    probe = multisine_probe(robot.joint_names, q0, robot.lower, robot.upper,
                            robot.velocity_limits, duration=duration, seed=0)
    rng = np.random.default_rng(0)
    params = [{f'joint/{n}/damping': float(rng.uniform(0.2, 1.0)) for n in robot.joint_names}
              for _ in range(samples)]
    out = []
    for nt in nthreads:
        twin.rollout(q0, None, probe.times, probe.positions, param_samples=params[:2],
                     nthread=nt, traj_velocities=probe.velocities)          # warm the pool
        best = None
        for _ in range(3):
            t = time.perf_counter()
            res = twin.rollout(q0, None, probe.times, probe.positions, param_samples=params,
                               nthread=nt, traj_velocities=probe.velocities)
            wall = time.perf_counter() - t
            best = wall if best is None else min(best, wall)
        out.append({'nthread': nt, 'samples': samples, 'steps_each': res.steps,
                    'wall_s': best, 'steps_per_s': samples * res.steps / best})
    twin.close()
    return out


def identification_wall_time(seed: int = 11, nthread: int = 2) -> dict:
    """One core identification like test_sysid's: default cell (arm only) with hidden damping
    (0.5-2x the URDF's) and latency; 3 probes of 2.5 s recorded from the emulated world, 8
    parameters fitted on two, the third held out."""
    from real2sim2real_ros.core.cell_spec import default_cell_spec_path, load_cell_spec
    from real2sim2real_ros.core.emulated_world import EmulatedWorld
    from real2sim2real_ros.core.joint_trajectory import JointTrajectoryCommand
    from real2sim2real_ros.core.parameters import ParameterSpec
    from real2sim2real_ros.core.robot_description import default_cell_urdf, load_robot
    from real2sim2real_ros.core.sysid.fit import Recording, identify
    from real2sim2real_ros.core.sysid.probes import multisine_probe
    from real2sim2real_ros.core.twin import Twin
    urdf_damping = np.array([0.5, 0.5, 0.5, 0.1, 0.1, 0.1])
    rng = np.random.default_rng(seed)
    scale = rng.uniform(0.5, 2.0, 6)
    latency = float(rng.integers(0, 41)) / 1000.0
    spec = load_cell_spec(default_cell_spec_path())
    spec = dataclasses.replace(spec, objects=(), cameras=(), seed=seed, robot=dataclasses.replace(
        spec.robot, joint_damping=tuple(urdf_damping * scale), command_latency=latency,
        joint_frictionloss=(0.3, 0.3, 0.3, 0.05, 0.05, 0.05),
        armature=(0.1, 0.1, 0.1, 0.02, 0.02, 0.02)))
    world = EmulatedWorld(spec)
    robot = load_robot(default_cell_urdf())
    center = np.asarray(spec.robot.initial_positions)
    t_rec = time.perf_counter()
    recs = []
    for s in range(3):
        p = multisine_probe(robot.joint_names, center, robot.lower, robot.upper,
                            robot.velocity_limits, duration=2.5, amplitude=0.4,
                            velocity_fraction=0.6, seed=s)
        world.reset()
        world.step_for(0.3)
        ref0 = world.controller_state()['reference_positions']
        q0, t0 = world.joint_positions(), world.time
        world.set_trajectory(JointTrajectoryCommand(p.joint_names, p.times, p.positions,
                                                    p.velocities), now=t0)
        ts, qs = [], []
        for _ in range(int(round((p.duration + 0.2) / 0.002))):
            world.step_for(0.002)
            ts.append(world.time - t0)
            qs.append(world.joint_positions())
        recs.append(Recording(np.array(ts), np.array(qs), q0, p.times, p.positions,
                              p.velocities, None, ref0, name=p.name))
    record_s = time.perf_counter() - t_rec
    gains = {f'actuator/{n}/kp': spec.robot.kp[i] for i, n in enumerate(robot.joint_names)}
    gains.update({f'actuator/{n}/kv': spec.robot.kv[i] for i, n in enumerate(robot.joint_names)})
    twin = Twin(robot, parameters=gains)
    specs = [ParameterSpec(f'joint/{n}/damping', d, 0.0, 4 * d)
             for n, d in zip(robot.joint_names, urdf_damping)]
    specs.append(ParameterSpec('global/command_latency', 0.01, 0.0, 0.06, scale=0.01))
    specs.append(ParameterSpec('global/gravity_compensation', 1.0, 0.8, 1.1, scale=0.1))
    fit = identify(twin, specs, recs[:2], heldout=recs[2:], nthread=nthread)
    truth = spec.hidden_truth(list(robot.joint_names))
    worst = max(abs(e.value - truth[e.name]) / truth[e.name]
                for e in fit.parameters if truth[e.name] > 0)
    twin.close()
    return {'seed': seed, 'parameters': len(specs), 'nthread': nthread,
            'record_s': record_s, 'fit_wall_s': fit.wall_time, 'rollouts': fit.n_rollouts,
            'iterations': fit.iterations, 'residual_after_mrad': fit.residual_after * 1e3,
            'heldout_after_mrad': fit.heldout_error_after * 1e3,
            'worst_relative_error': float(worst)}


def run_all(run_dir: Path) -> dict:
    bare = bare_step_rates()
    node = sim_server_step_rate(run_dir)
    return {
        'step': {'sim_server': node, 'in_process': bare,
                 'ratio_to_mj_step_nstep': node['steps_per_s'] / bare['mj_step_nstep_per_s'],
                 'ratio_to_twin_step': node['steps_per_s'] / bare['twin_step_per_s']},
        'rollout': rollout_throughput(),
        'identification': identification_wall_time(),
    }


if __name__ == '__main__':
    import json
    import tempfile

    from real2sim2real_ros.ros.dds_isolation import isolate
    isolate()
    print(json.dumps(run_all(Path(tempfile.mkdtemp(prefix='r2s2r_twin_bench_'))), indent=2))
