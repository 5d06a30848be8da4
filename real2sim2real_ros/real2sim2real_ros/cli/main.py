"""``r2s2r``: the operator CLI. Every verb calls a node's real service or action."""
from __future__ import annotations

import argparse
import math
import sys


def _commander(args):
    from real2sim2real_ros.ros.commander import Commander, expected_graph
    return Commander(namespace=args.namespace, expected=expected_graph(args.cell))


def cmd_launch(args, rest) -> int:
    from real2sim2real_ros.launch_runner import main as launch_main
    return launch_main(rest)


def cmd_status(args, _rest) -> int:
    from rich.console import Console
    from rich.table import Table

    from real2sim2real_ros.ros.commander import CommanderError
    with _commander(args) as cmd:
        try:
            status = cmd.wait_until_up(timeout=args.wait)
        except CommanderError:
            status = cmd.graph_status()
        table = Table(title='real2sim2real graph')
        table.add_column('kind')
        table.add_column('name')
        table.add_column('up')
        for kind, entries in (('node', status.nodes), ('service', status.services),
                              ('action', status.actions)):
            for name, up in entries.items():
                table.add_row(kind, name, '[green]yes[/]' if up else '[red]no[/]')
        Console().print(table)
        return 0 if status.complete else 1


def _trigger(verb):
    def run(args, _rest) -> int:
        with _commander(args) as cmd:
            resp = getattr(cmd, verb)()
        print(f'{verb}: {"ok" if resp.success else "FAILED"}: {resp.message}')
        return 0 if resp.success else 1
    return run


def cmd_execute(args, _rest) -> int:
    from real2sim2real_ros.cli.progress import action_progress
    from real2sim2real_ros.core.trajectory_files import load_trajectory_file
    try:
        names, points = load_trajectory_file(args.trajectory)
    except (OSError, ValueError) as exc:
        print(f'r2s2r execute: {exc}', file=sys.stderr)
        return 2
    with _commander(args) as cmd, action_progress('execute_trajectory') as progress:
        try:
            result = cmd.execute_trajectory(
                names, points, record=not args.no_record,
                feedback=lambda fb: progress(fb.progress, f'err {fb.tracking_error:.4f} rad'))
        except KeyboardInterrupt:
            cmd.cancel_current_goal()
            print('cancelled')
            return 130
    if result.error_code:
        print(f'execute: FAILED ({result.error_code}): {result.error_msg}')
        return 1
    print(f'execute: ok in {result.duration:.2f} s; max tracking error '
          f'{result.max_tracking_error:.4f} rad, rms {result.rms_tracking_error:.4f} rad, '
          f'final {result.final_error:.4f} rad; bag {result.bag_path or "-"}')
    return 0


def cmd_grip(args, _rest) -> int:
    """``r2s2r grip open|close|position``: the executor's ~/grip (armed, within its limits)."""
    from real2sim2real_msgs.action import Grip
    from real2sim2real_ros.ros.goal_client import code_name
    if args.command == 'position' and args.position is None:
        print('r2s2r grip: error: position needs --position M', file=sys.stderr)
        return 2
    goal = Grip.Goal(command=args.command, position=float(args.position or 0.0),
                     max_effort=float(args.effort or 0.0), max_speed=float(args.speed or 0.0),
                     record=not args.no_record)
    with _commander(args) as cmd:
        try:
            result = cmd.run_action(Grip, 'robot_executor/grip', goal, timeout=args.timeout)
        except KeyboardInterrupt:
            cmd.cancel_current_goal()
            print('cancelled')
            return 130
    if result.error_code:
        print(f'grip: {code_name(Grip.Result, result.error_code)}: {result.error_msg}')
        return 1
    how = 'stalled on an object' if result.stalled else 'reached' if result.reached_goal \
        else 'ended'
    print(f'grip {args.command}: {how}; jaw {1000 * result.position:.1f} mm, effort '
          f'{abs(result.effort):.1f} N, {result.duration:.2f} s; bag {result.bag_path or "-"}')
    return 0


def cmd_identify(args, _rest) -> int:
    from rich.console import Console
    from rich.table import Table

    from real2sim2real_ros.cli.progress import action_progress
    if args.probes < 0 or (args.bags and args.probes):
        print('r2s2r identify: --probes must be >= 0 and goes with live probes (no --bags)',
              file=sys.stderr)
        return 2
    what = f'{len(args.bags)} bag(s)' if args.bags else 'live probes'

    def info(fb) -> str:
        return fb.stage + (f', residual {fb.residual * 1e3:.3f} mrad'
                           if math.isfinite(fb.residual) else '')
    with _commander(args) as cmd, action_progress(f'identify ({what})') as progress:
        try:
            result = cmd.identify(
                bag_paths=args.bags, parameter_names=args.params, num_probes=args.probes,
                run_dir=args.run_dir, timeout=args.timeout,
                feedback=lambda fb: progress(fb.progress, info(fb)))
        except KeyboardInterrupt:
            cmd.cancel_current_goal()
            print('cancelled')
            return 130
    if result.error_code:
        print(f'identify: FAILED ({result.error_code}): {result.error_msg}')
        return 1
    table = Table(title='identified parameters')
    for col, justify in (('parameter', 'left'), ('value', 'right'), ('95% interval', 'right'),
                         ('prior', 'right'), ('unit', 'left'), ('identified', 'left')):
        table.add_column(col, justify=justify)
    for p in result.parameters.parameters:
        table.add_row(p.name, f'{p.value:.5g}', f'[{p.lower_95:.5g}, {p.upper_95:.5g}]',
                      f'{p.prior:.5g}', p.unit, 'yes' if p.identified else '[red]no[/]')
    Console(width=max(100, Console().width)).print(table)
    if math.isfinite(result.residual_before):   # NaN: the slip probe alone (no trajectories)
        print(f'residual {result.residual_before * 1e3:.4f} -> '
              f'{result.residual_after * 1e3:.4f} mrad; held-out '
              f'{result.heldout_error_before * 1e3:.4f} -> '
              f'{result.heldout_error_after * 1e3:.4f} mrad')
    print(f'parameters: {result.parameters.artifact_dir}')
    print(f'report: {result.report_path}')
    return 0


def cmd_train(args, _rest) -> int:
    from real2sim2real_ros.cli.progress import action_progress
    if args.steps < 0:
        print('r2s2r train: --steps must be >= 0', file=sys.stderr)
        return 2

    def info(fb) -> str:
        return fb.stage + (f', twin success {fb.twin_success_rate:.0%}'
                           if math.isfinite(fb.twin_success_rate) else '')
    with _commander(args) as cmd, action_progress(f'train {args.task}') as progress:
        try:
            result = cmd.train(args.task, parameters_path=args.parameters,
                               randomize=args.randomize, total_steps=args.steps,
                               demo_bags=args.demo_bags, run_dir=args.run_dir,
                               timeout=args.timeout,
                               feedback=lambda fb: progress(fb.progress, info(fb)))
        except KeyboardInterrupt:
            cmd.cancel_current_goal()
            print('cancelled')
            return 130
    if result.error_code:
        print(f'train: FAILED ({result.error_code}): {result.error_msg}')
        return 1
    tw = result.twin_result
    print(f'train: ok; twin success {tw.success_rate:.0%} ({tw.successes}/{tw.trials} trials)')
    print(f'checkpoint: {result.checkpoint_path}')
    return 0


def cmd_evaluate_policy(args, _rest) -> int:
    from real2sim2real_ros.cli.progress import action_progress
    if args.trials < 1:
        print('r2s2r evaluate-policy: --trials must be >= 1', file=sys.stderr)
        return 2
    with _commander(args) as cmd, action_progress('evaluate-policy (twin)') as progress:
        try:
            result = cmd.evaluate_policy(
                args.checkpoint, trials=args.trials, task=args.task, timeout=args.timeout,
                feedback=lambda fb: progress(fb.trials_done / args.trials,
                                             f'{fb.trials_done}/{args.trials} trials, success '
                                             f'{fb.success_rate:.0%}'))
        except KeyboardInterrupt:
            cmd.cancel_current_goal()
            print('cancelled')
            return 130
    if result.error_code:
        print(f'evaluate-policy: FAILED ({result.error_code}): {result.error_msg}')
        return 1
    r = result.result
    print(f'evaluate-policy: {r.system} success {r.success_rate:.0%} '
          f'({r.successes}/{r.trials} trials)')
    return 0


def cmd_execute_policy(args, _rest) -> int:
    from real2sim2real_ros.cli.progress import action_progress
    if args.goal is not None and len(args.goal) not in (2, 3):
        print('r2s2r execute-policy: --goal takes X Y [YAW] (world frame, m, rad)',
              file=sys.stderr)
        return 2
    if not args.max_duration > 0:
        print('r2s2r execute-policy: --max-duration must be > 0', file=sys.stderr)
        return 2
    span = args.max_duration
    # The node resolves the path on its side: hand it an absolute one when it exists here.
    from pathlib import Path
    checkpoint = Path(args.checkpoint)
    checkpoint = str(checkpoint.resolve()) if checkpoint.exists() else args.checkpoint

    def info(fb) -> str:
        return f'step {fb.step}, {fb.elapsed:.1f} s'
    with _commander(args) as cmd, action_progress('execute_policy') as progress:
        try:
            result = cmd.execute_policy(
                checkpoint, args.goal or (), task=args.task,
                max_duration=args.max_duration, record=not args.no_record,
                timeout=args.max_duration + 60.0,
                feedback=lambda fb: progress(fb.elapsed / span, info(fb)))
        except KeyboardInterrupt:
            cmd.cancel_current_goal()
            print('cancelled')
            return 130
    if result.error_code:
        print(f'execute-policy: FAILED ({result.error_code}): {result.error_msg}')
        return 1
    print(f'execute-policy: done in {result.duration:.2f} s, {result.steps} step(s); '
          f'task_success {result.task_success}; bag {result.bag_path or "-"}')
    return 0


def _task_overrides(pairs) -> dict:
    import yaml
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition('=')
        if not sep or not key:
            raise ValueError(f'--set wants KEY=VALUE, got {pair!r}')
        out[key] = yaml.safe_load(value)
    return out


def cmd_record_demos(args, _rest) -> int:
    """The task's scripted demonstrator on the cell through ~/execute_policy, recorded: one
    scripted checkpoint (seed + k) and one bag per episode; DIR/demos.json lists them."""
    import json
    import time
    from pathlib import Path

    from real2sim2real_msgs.action import ExecutePolicy
    from real2sim2real_ros.cli.progress import action_progress
    from real2sim2real_ros.core.artifacts import atomic_write_text
    from real2sim2real_ros.core.policy_execution import write_scripted_checkpoint
    if args.episodes < 1 or not args.max_duration > 0:
        print('r2s2r record-demos: --episodes must be >= 1 and --max-duration > 0',
              file=sys.stderr)
        return 2
    try:
        overrides = _task_overrides(args.set)
    except ValueError as exc:
        print(f'r2s2r record-demos: {exc}', file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    PolicyResult = ExecutePolicy.Result
    # no point in the next episode after these
    fatal = {PolicyResult.NOT_ARMED, PolicyResult.STOPPED, PolicyResult.BUSY,
             PolicyResult.CANCELED}
    records = []
    with _commander(args) as cmd:
        for k in range(args.episodes):
            ckpt = write_scripted_checkpoint(out / 'scripted' / f'episode_{k:03d}', args.task,
                                             overrides, seed=args.seed + k)
            if args.reset_objects:
                resp = cmd.reset_objects()
                if not resp.success:
                    print(f'record-demos: reset_objects failed: {resp.message}')
                    return 1
                time.sleep(args.settle)
            with action_progress(f'demo {k + 1}/{args.episodes}') as progress:
                try:
                    result = cmd.execute_policy(
                        str(ckpt), (), task=args.task, max_duration=args.max_duration,
                        record=True, timeout=args.max_duration + 60.0,
                        feedback=lambda fb: progress(fb.elapsed / args.max_duration,
                                                     f'step {fb.step}'))
                except KeyboardInterrupt:
                    cmd.cancel_current_goal()
                    print('cancelled')
                    return 130
            rec = {'episode': k, 'checkpoint': str(ckpt), 'error_code': int(result.error_code),
                   'error_msg': result.error_msg, 'task_success': bool(result.task_success),
                   'steps': int(result.steps), 'bag_path': result.bag_path}
            records.append(rec)
            print(f'demo {k + 1}: ' + (f'FAILED ({result.error_code}): {result.error_msg}'
                                       if result.error_code else
                                       f'task_success {result.task_success}, {result.steps} '
                                       f'step(s)') + f'; bag {result.bag_path or "-"}')
            if result.error_code in fatal:
                break
    bags = [r['bag_path'] for r in records if r['bag_path'] and not r['error_code']]
    atomic_write_text(out / 'demos.json', json.dumps(
        {'task': args.task, 'task_config': overrides, 'seed': args.seed, 'bags': bags,
         'episodes': records}, indent=2) + '\n')
    ok = sum(r['task_success'] for r in records)
    print(f'record-demos: {len(bags)} bag(s) of {len(records)} episode(s), {ok} successful on '
          f'the cell; list in {out / "demos.json"}')
    print('train from them: r2s2r train --task ' + args.task + ' --demo-bags '
          + ' '.join(bags))
    return 0 if bags else 1


def cmd_reset_objects(args, _rest) -> int:
    with _commander(args) as cmd:
        resp = cmd.reset_objects(args.ids)
    print(f'reset_objects: {"ok" if resp.success else "FAILED"}: {resp.message}')
    return 0 if resp.success else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='r2s2r', description=__doc__)
    p.add_argument('--namespace', default='', help='namespace of the graph (bringup namespace:=)')
    p.add_argument('--cell', default='emulated', choices=['emulated', 'real'],
                   help='which bringup the graph is (bringup cell:=)')
    sub = p.add_subparsers(dest='verb', required=True)
    sub.add_parser('launch', add_help=False,
                   help='run a launch file: r2s2r launch PKG FILE [name:=value ...]')
    s = sub.add_parser('status', help='which nodes, services and actions of the graph are up')
    s.add_argument('--wait', type=float, default=2.0, help='seconds to wait for the graph')
    for verb, text in (('arm', 'arm the robot executor'), ('disarm', 'disarm the executor'),
                       ('stop', 'stop motion now and disarm')):
        sub.add_parser(verb, help=text)
    e = sub.add_parser('execute', help='execute a joint trajectory (YAML file) on the robot')
    e.add_argument('trajectory', help='YAML: joint_names: [...], points: [{t: s, q: [...]}, ...]')
    e.add_argument('--no-record', action='store_true', help='do not record an MCAP bag')
    g = sub.add_parser('grip', help='open or close the gripper through the armed executor')
    g.add_argument('command', choices=('open', 'close', 'position'),
                   help='open / close the jaw, or move it to --position')
    g.add_argument('--position', type=float, default=None, help='jaw joint value, m')
    g.add_argument('--effort', type=float, default=None,
                   help='max effort, N (default: the executor\'s gripper_default_effort)')
    g.add_argument('--speed', type=float, default=None,
                   help='max jaw speed, m/s (default: the executor\'s gripper_max_speed)')
    g.add_argument('--timeout', type=float, default=30.0, help='seconds for the whole goal')
    g.add_argument('--no-record', action='store_true', help='do not record an MCAP bag')
    i = sub.add_parser('identify', help='identify the twin\'s physical parameters from '
                       'recorded bags, or from live probes through the ARMED executor')
    i.add_argument('--bags', nargs='+', default=[], metavar='BAG',
                   help='executor recordings (rosbag2 folders); the last is held out. '
                   'None: run live probes')
    i.add_argument('--probes', type=int, default=0, metavar='N',
                   help='live probes (0 = the node\'s num_probes)')
    i.add_argument('--params', nargs='+', default=[], metavar='NAME',
                   help='parameters to fit (default: all declared in the node\'s '
                   'parameters_file), e.g. joint/elbow_joint/damping; global/finger_friction '
                   'alone: the slip probe (a robot with a gripper)')
    i.add_argument('--run-dir', default='', help='where identify_<n>/ goes (default: the '
                   'node\'s run_dir)')
    i.add_argument('--timeout', type=float, default=600.0, help='seconds to wait for the result')
    t = sub.add_parser('train', help='train a task policy in the twin (policy_trainer)')
    t.add_argument('--task', required=True, help='task name, e.g. slide_to_target')
    t.add_argument('--parameters', default='', metavar='P', help='identified parameter set '
                   '(identify_NNN/parameters.yaml or its folder); default: the nominal twin')
    t.add_argument('--randomize', action='store_true', help='domain randomisation from the '
                   'parameters\' 95%% intervals')
    t.add_argument('--steps', type=int, default=0, metavar='N', help='environment steps of '
                   'training (one-shot task: episodes); 0 = the node\'s budget')
    t.add_argument('--demo-bags', nargs='+', default=[], metavar='BAG',
                   help='demonstrations recorded on the cell (execute_policy bags with '
                   'policy_steps, e.g. from record-demos) instead of the scripted demonstrator')
    t.add_argument('--run-dir', default='', help='where train_<n>/ goes (default: the node\'s '
                   'run_dir)')
    t.add_argument('--timeout', type=float, default=1800.0, help='seconds to wait for the result')
    v = sub.add_parser('evaluate-policy', help='evaluate a policy checkpoint in the twin')
    v.add_argument('checkpoint', help='checkpoint folder (train_<n>/checkpoint)')
    v.add_argument('--trials', type=int, default=20, metavar='N', help='episodes (default 20)')
    v.add_argument('--task', default='', help='task (default: the checkpoint\'s)')
    v.add_argument('--timeout', type=float, default=600.0, help='seconds to wait for the result')
    x = sub.add_parser('execute-policy', help='run a policy checkpoint closed-loop on the robot '
                       '(ARMED executor; object poses from the object tracker)')
    x.add_argument('checkpoint', help='checkpoint folder (policy.pt + policy.json)')
    x.add_argument('--goal', nargs='+', type=float, default=None, metavar='V',
                   help='task goal X Y [YAW] (world frame, m, rad); default: the task\'s')
    x.add_argument('--task', default='', help='the task the checkpoint must be for '
                   '(default: the checkpoint\'s)')
    x.add_argument('--max-duration', type=float, default=60.0, metavar='S',
                   help='seconds the episode may take (default 60)')
    x.add_argument('--no-record', action='store_true', help='do not record an MCAP bag')
    d = sub.add_parser('record-demos', help='run the task\'s scripted demonstrator on the cell '
                       '(ARMED executor) and record each episode as a demo bag')
    d.add_argument('--task', required=True, help='task name, e.g. slide_to_target')
    d.add_argument('--episodes', type=int, default=5, metavar='N', help='episodes (default 5)')
    d.add_argument('--out', required=True, metavar='DIR', help='scripted checkpoints + '
                   'demos.json go here (the bags go to the executor\'s run_dir)')
    d.add_argument('--seed', type=int, default=0, help='episode k uses seed + k (the '
                   'demonstrator\'s spread and the drawn goal)')
    d.add_argument('--set', nargs='+', default=[], metavar='KEY=VALUE', help='task config '
                   'overrides, e.g. demo_spread=0 demo_friction=0.55')
    d.add_argument('--reset-objects', action='store_true', help='emulated cell: put the '
                   'objects back before each episode')
    d.add_argument('--settle', type=float, default=0.5, metavar='S', help='seconds after a '
                   'reset before the episode (default 0.5)')
    d.add_argument('--max-duration', type=float, default=60.0, metavar='S',
                   help='seconds an episode may take (default 60)')
    r = sub.add_parser('reset-objects', help='put the emulated cell\'s objects back')
    r.add_argument('ids', nargs='*', help='object ids (default: all)')
    from real2sim2real_ros.cli import capture_cli, describe_cli, evaluate_cli, reconstruct_cli
    capture_cli.add_parser(sub)
    describe_cli.add_parser(sub)
    reconstruct_cli.add_parser(sub)
    evaluate_cli.add_parser(sub)
    from real2sim2real_ros.cli import grasp_cli, loop_cli
    loop_cli.add_parser(sub)
    grasp_cli.add_parser(sub)
    grasp_cli.add_expert_parser(sub)
    grasp_cli.add_slip_parser(sub)
    try:
        from real2sim2real_ros.cli import bag_cli
        bag_cli.add_parser(sub)
    except ImportError:  # pragma: no cover - bag tools need rosbags
        pass
    return p


HANDLERS = {
    'launch': cmd_launch, 'status': cmd_status, 'arm': _trigger('arm'),
    'disarm': _trigger('disarm'), 'stop': _trigger('stop'), 'execute': cmd_execute,
    'grip': cmd_grip,
    'reset-objects': cmd_reset_objects, 'identify': cmd_identify,
    'train': cmd_train, 'evaluate-policy': cmd_evaluate_policy,
    'execute-policy': cmd_execute_policy, 'record-demos': cmd_record_demos,
    'loop': lambda args, _rest: args.func(args),   # cli/loop_cli.py
}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # `launch` passes everything after it to the runner untouched (name:=value pairs, flags).
    if 'launch' in argv:
        i = argv.index('launch')
        args = parser.parse_args(argv[:i + 1])
        return cmd_launch(args, argv[i + 1:])
    args = parser.parse_args(argv)
    if args.verb in ('bag', 'capture', 'reconstruct', 'evaluate', 'describe', 'hold-test',
                     'expert-check', 'slip-test'):
        return args.func(args)
    try:
        return HANDLERS[args.verb](args, [])
    except Exception as exc:  # noqa: BLE001 - one line for the operator, not a traceback
        from real2sim2real_ros.ros.commander import CommanderError
        if isinstance(exc, CommanderError):
            print(f'r2s2r {args.verb}: {exc}', file=sys.stderr)
            return 1
        raise


if __name__ == '__main__':
    sys.exit(main())
