"""Run every benchmark (cell, twin); print tables; write bench_results/cell.json.

``python -m real2sim2real_ros.bench push [options]`` runs the push_to_pose policy benchmark
alone (bench/push_bench.py: train in the identified twin, run on emulated cells).
``python -m real2sim2real_ros.bench object_id [--cells N] [--seed S] [--arm truth]``: object
identification on N emulated cells drawn from the prior (bench/object_id_bench.py); writes
bench_results/object_id.json.
``python -m real2sim2real_ros.bench arm_id [harness|live ...]``: arm identification,
regression + polish against the multi-start rollout fit on the same recordings
(bench/arm_id_bench.py); writes bench_results/arm_id.json. ``make bench`` runs it too.
``python -m real2sim2real_ros.bench arm_id_coverage [live|harness] [FIRST LAST]``: interval
honesty over the cell's noise seeds FIRST..LAST-1 (default live, 100 160): per run, intervals
covering the truth and its squared Mahalanobis distance; writes bench_results/arm_id_coverage.json.
``python -m real2sim2real_ros.bench identify [--cell-spec [F ...]] [--live-run-dir DIR ...]``:
the identify stage's wall time per sub-stage, harness (each cell in process; no file: none)
and live (the node's manifest in each DIR, its arm estimates scored against the cell's truth)
(bench/identify_bench.py); writes bench_results/identify.json. ``make bench`` runs the
harness one.
``python -m real2sim2real_ros.bench model_gap [CELL ...]``: the MuJoCo twin with a cell's true
values against the cell (MuJoCo and Drake) on the same probes (bench/model_gap_bench.py);
writes bench_results/model_gap.json."""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table


def _save(name: str, out) -> None:
    """bench_results/<name>.json, the record of one bench verb."""
    out_dir = Path('bench_results')
    out_dir.mkdir(exist_ok=True)
    (out_dir / f'{name}.json').write_text(json.dumps(out, indent=2, default=str))
    print(f'saved {out_dir / f"{name}.json"}')


def object_id(argv) -> int:
    import argparse

    from real2sim2real_ros.bench import object_id_bench
    p = argparse.ArgumentParser(prog='python -m real2sim2real_ros.bench object_id')
    p.add_argument('--cells', type=int, default=6)
    p.add_argument('--seed', type=int, default=300)
    p.add_argument('--arm', choices=['identify', 'truth'], default='identify',
                   help='identify: 2 arm probes first (5 probes in all); truth: the arm given')
    args = p.parse_args(argv)
    out = object_id_bench.main(args.cells, args.seed, arm=args.arm)
    _save('object_id', out)
    return 0


def arm_id(argv) -> int:
    from real2sim2real_ros.bench import arm_id_bench
    out = arm_id_bench.main(argv or ('harness', 'live'))
    _save('arm_id', out)
    return 0


def arm_id_coverage(argv) -> int:
    from real2sim2real_ros.bench import arm_id_bench
    setting = argv[0] if argv else 'live'
    first, last = (int(argv[1]), int(argv[2])) if len(argv) >= 3 else (100, 160)
    _save('arm_id_coverage', arm_id_bench.coverage(setting, range(first, last)))
    return 0


def identify(argv) -> int:
    from real2sim2real_ros.bench import identify_bench
    out = identify_bench.main(argv)
    _save('identify', out)
    return 0


def model_gap(argv) -> int:
    from real2sim2real_ros.bench import model_gap_bench
    out = model_gap_bench.main(tuple(argv) or ('default', 'drake_default'))
    _save('model_gap', out)
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == 'model_gap':
        return model_gap(argv[1:])
    if argv and argv[0] == 'arm_id':
        return arm_id(argv[1:])
    if argv and argv[0] == 'arm_id_coverage':
        return arm_id_coverage(argv[1:])
    if argv and argv[0] == 'identify':
        return identify(argv[1:])
    if argv and argv[0] == 'push':
        from real2sim2real_ros.bench import push_bench
        return push_bench.main(argv[1:])
    if argv and argv[0] == 'object_id':
        return object_id(argv[1:])
    from real2sim2real_ros.ros.dds_isolation import isolate
    domain = isolate()
    from real2sim2real_ros.bench import cell_bench
    console = Console()
    out_dir = Path('bench_results')
    out_dir.mkdir(exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix='r2s2r_bench_'))
    console.print(f'[bold]make bench[/]: ROS_DOMAIN_ID={domain}, LOCALHOST discovery, '
                  f'runs in {run_dir}')
    results = {}

    results['image_transport'] = [
        cell_bench.image_transport(q) for q in ('images', 'sensor_data')]
    t = Table(title='camera topics, 640x480 rgb8 + 32FC1 depth at 30 Hz, two processes')
    for c in ('QoS', 'stream', 'sent', 'received', 'delivery', 'median ms', 'p95 ms'):
        t.add_column(c)
    for r in results['image_transport']:
        for key in ('rgb', 'depth'):
            s = r[key]
            t.add_row(r['qos'], key, str(r['sent']), str(s['received']),
                      f'{s["delivery"]:.1%}', f'{s["latency_ms_median"] or float("nan"):.1f}',
                      f'{s["latency_ms_p95"] or float("nan"):.1f}')
    console.print(t)

    results['cell_fast_mode'] = cell_bench.cell_fast_mode_rtf(run_dir)
    r = results['cell_fast_mode']
    console.print(f'emulated cell, fast mode: real-time factor [bold]{r["real_time_factor"]:.2f}[/]'
                  f' ({r["sim_s"]:.2f} s simulated in {r["wall_s"]:.2f} s wall)')

    results['cell_real_time'] = cell_bench.cell_camera_and_executor(run_dir)
    r = results['cell_real_time']
    if 'cell_camera' in r:
        console.print(f'emulated cell camera (render + noise + publish, 640x480): '
                      f'{r["cell_camera"]["fps"]:.1f} fps, latency '
                      f'{r["cell_camera"]["latency_ms_median"]:.1f} ms median')
    e = r['executor']
    console.print(f'executor: goal -> motion {e["goal_to_motion_ms_median"]:.1f} ms median; '
                  f'commanded start -> motion {e["command_to_motion_ms_median"]:.1f} ms median, '
                  f'{e["command_to_motion_ms_max"]:.1f} ms max ({e["trials"]} trials)')

    results['tracker_lag'] = [cell_bench.tracker_lag(run_dir, q)
                              for q in ('images', 'latest_images')]
    t = Table(title='object tracker pose age on the real-time cell, 2 CPU-bound processes')
    for c in ('depth QoS', 'poses/s', 'median ms', 'p95 ms', 'max ms'):
        t.add_column(c)
    for r in results['tracker_lag']:
        t.add_row(r['image_qos'], f'{r["rate_hz"]:.1f}', f'{r["age_ms_median"]:.0f}',
                  f'{r["age_ms_p95"]:.0f}', f'{r["age_ms_max"]:.0f}')
    console.print(t)

    from real2sim2real_ros.bench import twin_bench
    results['twin'] = tw = twin_bench.run_all(run_dir)
    node, bare = tw['step']['sim_server'], tw['step']['in_process']
    t = Table(title=f'twin (default cell arm, 1 ms step): {node["steps"]} steps')
    for c in ('path', 'steps/s', 'vs mj_step'):
        t.add_column(c)
    ref = bare['mj_step_nstep_per_s']
    for name, rate in (('sim_server ~/step (client-timed)', node['steps_per_s']),
                       ('Twin.step loop, in process', bare['twin_step_per_s']),
                       ('mj_step Python loop', bare['mj_step_loop_per_s']),
                       ('mj_step(nstep=N), bare', ref)):
        t.add_row(name, f'{rate:,.0f}', f'{rate / ref:.2f}')
    for r in tw['rollout']:
        t.add_row(f'rollout, {r["samples"]} samples, nthread {r["nthread"]}',
                  f'{r["steps_per_s"]:,.0f}', f'{r["steps_per_s"] / ref:.2f}')
    console.print(t)
    i = tw['identification']
    console.print(f'identification (core, {i["parameters"]} parameters, 2 probes + 1 held '
                  f'out, nthread {i["nthread"]}): [bold]{i["fit_wall_s"]:.1f} s[/] fit, '
                  f'{i["rollouts"]} rollouts, held-out {i["heldout_after_mrad"]:.3f} mrad, '
                  f'worst estimate {i["worst_relative_error"]:.1%} off')

    from real2sim2real_ros.bench import arm_id_bench
    results['arm_id'] = arm_id_bench.main(('harness', 'live'))

    from real2sim2real_ros.bench import identify_bench
    results['identify'] = identify_bench.main(())

    from real2sim2real_ros.bench import reconstruction_bench
    results['reconstruction'] = reconstruction_bench.run()

    (out_dir / 'results.json').write_text(json.dumps(results, indent=2, default=str))
    console.print(f'saved {out_dir / "results.json"}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
