"""``make demo``: the whole real-to-sim-to-real loop on an emulated cell (``CELL=``).

Brings up bringup.launch.xml (emulated cell, private DDS domain, discovery LOCALHOST) and
sends one goal to loop_coordinator's ``~/run_loop``: capture -> reconstruct -> identify ->
train -> execute on the cell -> evaluate in the twin, with a progress bar per stage. Prints
the results table (stage wall times, identified parameters with 95% intervals, twin vs cell
success) and the paths of the PNG plots, then stops the graph.

Budgets are small but real (the node's own code paths, fewer episodes): training
``--train-steps`` twin episodes, ``--trials`` policy executions on the cell, ``--twin-trials``
twin evaluation episodes; they go into a copy of config/params.yaml in the run directory.
``make demo CELL=drake_default`` (or ``--cell-spec``, a path or a shipped cell's name) runs it
on another cell spec; ``make demo TASK=pick_and_place`` (``--task``) another task, a grasping
one on the gripper cell. ``make demo-quick`` is the one-minute plumbing demo (one trajectory, no
loop).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

console = Console(width=max(120, Console().width))

# Sized to finish within 15 minutes on a loaded 2-core machine (README: measured figures).
DEMO_TRAIN_STEPS = 584      # twin episodes of slide_to_target training (= the trainer's
                            # default budget: 80 demos + 3 x 40 self-imitation + 12 x 32 PPO)
# A pick_and_place episode is stepped in Python with the jaw (0.6-0.9 s each here, against
# batched rollouts for a strike): the same proportions at about a quarter of the episodes.
TASK_TRAIN_STEPS = {'pick_and_place': 160, 'gentle_pick_and_place': 160, 'stack': 160}
DEMO_TRIALS = 10            # policy executions on the emulated cell
DEMO_TWIN_TRIALS = 20       # twin evaluation episodes


def _say(text: str):
    console.print(f'[bold cyan]demo[/] {text}')


# Tasks that need a gripper, and the cell they run on without --cell-spec (stack: the
# gripper cell with its base box).
GRIPPER_TASKS = {'pick_and_place': 'gripper', 'gentle_pick_and_place': 'gripper',
                 'stack': 'gripper_stack'}
# The nodes that build a twin from the identification config, and so need the servo gains.
GAIN_NODES = ('system_identification', 'sim_server', 'policy_trainer')


def _params_file(share: Path, run_dir: Path, args, controller_config: Path) -> Path:
    """config/params.yaml with the demo's budgets and the cell's controller configuration
    (``controller_config`` on the nodes of GAIN_NODES, as a lab sets its own)."""
    import yaml
    params = yaml.safe_load((share / 'config' / 'params.yaml').read_text())
    loop = params.setdefault('/**/loop_coordinator', {}).setdefault('ros__parameters', {})
    loop.update({'task': args.task, 'train_total_steps': int(args.train_steps),
                 'execute_trials': int(args.trials), 'twin_eval_trials': int(args.twin_trials)})
    for node in GAIN_NODES:
        entry = params.setdefault(f'/**/{node}', {}).setdefault('ros__parameters', {})
        entry['controller_config'] = str(controller_config)
    if args.task in GRIPPER_TASKS:   # identification ends with the slip probe
        params['/**/system_identification']['ros__parameters']['grip_task'] = args.task
    path = run_dir / 'demo_params.yaml'
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def _sim_clock(choice: str, cell_spec: str | None) -> bool:
    """Whether the emulated cell runs on its own clock. 'auto' reads the emulator's engine:
    the demo launches the emulator, so it may know what the emulator cannot do (Drake runs
    at about half real time here); no pipeline node sees that choice, only /clock."""
    if choice != 'auto':
        return choice == 'sim'
    if not cell_spec:
        return False
    import yaml
    data = yaml.safe_load(Path(cell_spec).read_text()) or {}
    return isinstance(data, dict) and data.get('engine') == 'drake'


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog='demo', description=__doc__.split('\n\n')[0])
    ap.add_argument('--task', default='slide_to_target',
                    help='the task (config/tasks); a grasping one (pick_and_place) runs on '
                    'the gripper cell unless --cell-spec says otherwise')
    ap.add_argument('--train-steps', type=int, default=None,
                    help=f'twin episodes of training (default {DEMO_TRAIN_STEPS}; '
                    f'{TASK_TRAIN_STEPS} for those tasks)')
    ap.add_argument('--trials', type=int, default=DEMO_TRIALS)
    ap.add_argument('--twin-trials', type=int, default=DEMO_TWIN_TRIALS)
    ap.add_argument('--run-dir', default=os.environ.get('R2S2R_RUN_DIR', ''),
                    help='run directory (default: a new temporary one)')
    ap.add_argument('--resume', action='store_true', help='skip the stages whose artifacts '
                    'exist in --run-dir')
    ap.add_argument('--cell-spec', default='',
                    help='the emulated cell: a cell spec YAML path or the name of a shipped '
                    'one (config/cells/<name>.yaml, e.g. drake_default); default: default')
    ap.add_argument('--clock', choices=('auto', 'wall', 'sim'), default='auto',
                    help='sim: the emulated cell steps as fast as it can and publishes /clock, '
                    'every node on use_sim_time (an emulator slower than real time, as '
                    'Drake is here, then still runs the loop at its own pace); wall: real '
                    'time; auto (default): sim for a cell spec with engine drake, else wall')
    args = ap.parse_args(argv)
    if args.train_steps is None:
        args.train_steps = TASK_TRAIN_STEPS.get(args.task, DEMO_TRAIN_STEPS)

    from real2sim2real_ros.ros.dds_isolation import isolate
    domain = isolate()

    from ament_index_python.packages import get_package_share_directory
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from real2sim2real_ros.cli.loop_cli import StageProgress, print_summary
    from real2sim2real_ros.launch_runner import LaunchedGraph
    from real2sim2real_ros.ros.commander import Commander
    from real2sim2real_ros.ros.goal_client import code_name

    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix='r2s2r_demo_')).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    share = Path(get_package_share_directory('real2sim2real_ros'))
    launch_args = {'cell': 'emulated', 'run_dir': str(run_dir)}
    cell = share / 'config' / 'cells' / 'default.yaml'
    if not args.cell_spec and args.task in GRIPPER_TASKS:
        args.cell_spec = GRIPPER_TASKS[args.task]
    if args.cell_spec:
        cell = Path(args.cell_spec).expanduser()
        if not cell.is_file():
            cell = share / 'config' / 'cells' / f'{args.cell_spec}.yaml'
        if not cell.is_file():
            _say(f'[red]--cell-spec {args.cell_spec}: no such file, and no shipped cell of '
                 f'that name in {cell.parent}')
            return 2
        launch_args['cell_spec'] = str(cell.resolve())
        _say(f'cell spec {launch_args["cell_spec"]}')
    from real2sim2real_ros.core.cell_spec import load_cell_spec
    from real2sim2real_ros.core.controller_config import cell_controller_config
    controllers = cell_controller_config(load_cell_spec(cell))
    _say(f'controllers {controllers} (the servo gains the twin uses)')
    launch_args['params_file'] = str(_params_file(share, run_dir, args, controllers))
    if _sim_clock(args.clock, launch_args.get('cell_spec')):
        launch_args.update({'cell_real_time': 'false', 'use_sim_time': 'true'})
        _say('clock: simulated (/clock from the emulated cell, every node on use_sim_time)')
    _say(f'ROS_DOMAIN_ID={domain}, discovery LOCALHOST, run dir {run_dir}')
    _say(f'budgets: train {args.train_steps} twin episodes, {args.trials} cell trials, '
         f'{args.twin_trials} twin evaluation episodes '
         f'({Path(launch_args["params_file"]).name})')
    t0 = time.monotonic()
    graph = LaunchedGraph(share / 'launch' / 'bringup.launch.xml', launch_args,
                          log_dir=run_dir / 'launch_logs').start()
    code = 0
    try:
        with Commander(node_name='r2s2r_demo') as cmd:
            status = cmd.wait_until_up(timeout=120)
            t_up = time.monotonic() - t0
            _say(f'graph up in {t_up:.1f} s: {len(status.nodes)} nodes, '
                 f'{len(status.services)} services, {len(status.actions)} actions')
            _say('loop_coordinator/run_loop: capture -> reconstruct -> identify -> train -> '
                 'execute (cell) -> evaluate (twin)')
            t1 = time.monotonic()
            with Progress(TextColumn('[bold]{task.description:<13}'), BarColumn(),
                          TextColumn('{task.percentage:>3.0f}%'), TimeElapsedColumn(),
                          TextColumn('{task.fields[info]}'), console=console) as progress:
                bars = StageProgress(progress)
                result = cmd.run_loop(args.task, str(run_dir), resume=args.resume,
                                      feedback=bars, timeout=3600)
                bars.finish()
            loop_s = time.monotonic() - t1
            if result.summary_path:
                summary = json.loads(Path(result.summary_path).read_text())
                print_summary(summary, console)
                _say(f'summary {result.summary_path}')
            from .bench.identify_bench import live, print_profiles
            print_profiles([live(run_dir)], console)   # the identify stage's sub-stages
            if result.error_code:
                code = 1
                _say(f'[red]loop {code_name(type(result), result.error_code)}'
                     f'{" at " + result.failed_stage if result.failed_stage else ""}: '
                     f'{result.error_msg}')
            _say(f'loop wall time {loop_s:.1f} s (graph start-up {t_up:.1f} s before it)')
            armed = cmd.executor_status().armed
            _say(f'executor afterwards: {"[red]ARMED" if armed else "disarmed"}')
    finally:
        rc = graph.stop(timeout=30)
        _say(f'graph stopped (runner exit {rc}); total {time.monotonic() - t0:.1f} s')
    return code


if __name__ == '__main__':
    sys.exit(main())
