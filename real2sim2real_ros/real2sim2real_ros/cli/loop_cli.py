"""``r2s2r loop [--task T] [--run-dir D] [--resume] [--skip S ...] [--demo-bags B ...]``:
the whole loop through loop_coordinator's ``~/run_loop``, with a progress bar per stage, then
the results table (stage times, identified parameters, twin and cell success) and the plots'
paths.

Exit code 0 when the loop succeeded, 1 when it failed or was canceled (the failed stage and
the child's error on stderr), 2 for bad input or an unreachable node.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_parser(subparsers):
    from ..core.loop_plan import STAGES
    p = subparsers.add_parser(
        'loop', help='run the whole loop: capture -> reconstruct -> identify -> train -> '
        'execute -> evaluate (loop_coordinator)')
    p.add_argument('--task', default='', help='task (default: the node\'s task parameter)')
    p.add_argument('--run-dir', default='', help='run directory (default: the node\'s)')
    p.add_argument('--resume', action='store_true', help='skip the leading stages whose '
                   'artifacts exist in the run directory')
    p.add_argument('--skip', nargs='+', default=[], metavar='STAGE',
                   help=f'stages to skip (their artifacts must exist): {", ".join(STAGES)}')
    p.add_argument('--demo-bags', nargs='+', default=[], metavar='BAG',
                   help='demonstrations recorded on the cell (r2s2r record-demos) for the train '
                   'stage (default: the task\'s scripted demonstrator in the twin)')
    p.add_argument('--timeout', type=float, default=7200.0, help='seconds to wait for the '
                   'result')
    p.set_defaults(func=cmd_loop)
    return p


class StageProgress:
    """One rich progress bar per stage plus the overall one, fed by RunLoop feedback."""

    def __init__(self, progress):
        from ..core.loop_plan import STAGES, WEIGHTS
        self._p = progress
        self._weights = WEIGHTS
        self._total = sum(WEIGHTS.values())
        # Rows appear with the first feedback (a refused goal shows none); each stage's clock
        # runs from its first feedback until the next stage starts (a skipped one: none).
        self.overall = progress.add_task('loop', total=1.0, info='', visible=False)
        self.rows = {s: progress.add_task(f'  {s}', total=1.0, info='[dim]pending[/]',
                                          start=False, visible=False) for s in STAGES}
        self.order: list[str] = []
        self.current = ''

    def __call__(self, fb):
        stage, _, detail = fb.stage.partition(':')
        stage, detail = stage.strip(), detail.strip()
        self._p.update(self.overall, completed=max(0.0, min(1.0, fb.progress)),
                       info=fb.stage, visible=True)
        if not self.order:
            for row in self.rows.values():
                self._p.update(row, visible=True)
        if stage not in self.rows:           # 'done'
            self.finish(full=True)
            self.current = ''
            return
        if stage != self.current:
            self.finish(full=True)
            self.current = stage
            self.order.append(stage)
            if detail.startswith('skipped'):
                self._p.update(self.rows[stage], completed=1.0, info=detail)
                return
            self._p.start_task(self.rows[stage])
        done = sum(self._weights[s] for s in self.order[:-1])
        frac = (fb.progress * self._total - done) / self._weights[stage]
        self._p.update(self.rows[stage], completed=max(0.0, min(1.0, frac)),
                       info=detail or 'running')

    def finish(self, full: bool = False):
        """Stop the current stage's clock; ``full``: it finished (or was skipped)."""
        if self.current in self.rows:
            if full:
                self._p.update(self.rows[self.current], completed=1.0)
            self._p.stop_task(self.rows[self.current])


def _fmt(v, spec='.3g'):
    return '-' if v is None or (isinstance(v, float) and not math.isfinite(v)) else \
        format(v, spec)


def print_summary(summary: dict, console=None):
    """The results tables of a loop summary (summary.json) and the plots' paths."""
    from rich.console import Console
    from rich.table import Table
    console = console or Console(width=max(110, Console().width))
    t = Table(title=f'loop {summary.get("task", "")}: {summary.get("status", "?")}'
              + (f' ({summary.get("failed_stage")}: {summary.get("error")})'
                 if summary.get('status') != 'succeeded' else ''))
    for col, justify in (('stage', 'left'), ('status', 'left'), ('wall s', 'right'),
                         ('artifact / detail', 'left')):
        t.add_column(col, justify=justify)
    for s in summary.get('stages', []):
        colour = {'ran': 'green', 'skipped': 'cyan', 'failed': 'red',
                  'canceled': 'yellow'}.get(s['status'], 'dim')
        secs = f'{s["seconds"]:.1f}' if s['status'] in ('ran', 'failed', 'canceled') else '-'
        detail = s.get('artifact') or s.get('reason', '')
        d = s.get('detail') or {}
        if s['stage'] == 'execute' and 'trials' in d:
            detail = (f'{d["successes"]}/{d["trials"]} successes, {d.get("errors", 0)} '
                      f'errors, {d.get("unobserved", 0)} unobserved; {detail}')
        if d.get('warning'):
            detail += f' [yellow](warning: {d["warning"]})[/]'
        t.add_row(s['stage'], f'[{colour}]{s["status"]}[/]', secs, detail)
    console.print(t)
    params = summary.get('identified_parameters') or []
    if params:
        t = Table(title='identified parameters')
        for col, justify in (('parameter', 'left'), ('value', 'right'),
                             ('95% interval', 'right'), ('prior', 'right'), ('unit', 'left'),
                             ('identified', 'left')):
            t.add_column(col, justify=justify)
        for p in params:
            t.add_row(p['name'], f'{p["value"]:.5g}',
                      f'[{p["lower_95"]:.5g}, {p["upper_95"]:.5g}]', f'{p["prior"]:.5g}',
                      p.get('unit', ''), 'yes' if p.get('identified') else '[red]no[/]')
        console.print(t)
    t = Table(title='success')
    for col, justify in (('system', 'left'), ('trials', 'right'), ('successes', 'right'),
                         ('rate', 'right'), ('Wilson 95%', 'right')):
        t.add_column(col, justify=justify)
    for label, key in (('twin (evaluate)', 'twin'), ('cell', 'cell'),
                       ('twin (training eval)', 'train_twin')):
        r = summary.get(key)
        if not r:
            t.add_row(label, '-', '-', '-', '-')
            continue
        lo, hi = r.get('interval_95', [math.nan, math.nan])
        if r.get('unobserved'):
            label += f' ({r["unobserved"]} more unobserved)'
        t.add_row(label, str(r['trials']), str(r['successes']),
                  f'{_fmt(r["success_rate"], ".0%")}', f'[{_fmt(lo, ".2f")}, {_fmt(hi, ".2f")}]')
    console.print(t)
    for name, path in (summary.get('plots') or {}).items():
        console.print(f'plot {name}: {path}')


def cmd_loop(args) -> int:
    from ..core.loop_plan import STAGES
    from ..ros.commander import Commander, CommanderError
    bad = [s for s in args.skip if s not in STAGES]
    if bad:
        print(f'r2s2r loop: unknown stage(s) {bad}; stages: {", ".join(STAGES)}',
              file=sys.stderr)
        return EXIT_USAGE
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    try:
        with Commander(namespace=args.namespace, node_name='r2s2r_loop', expected={}) as cmd:
            with Progress(TextColumn('[bold]{task.description:<13}'), BarColumn(),
                          TextColumn('{task.percentage:>3.0f}%'), TimeElapsedColumn(),
                          TextColumn('{task.fields[info]}')) as progress:
                bars = StageProgress(progress)
                try:
                    result = cmd.run_loop(args.task, args.run_dir, args.skip, args.resume,
                                          demo_bags=args.demo_bags, feedback=bars,
                                          timeout=args.timeout)
                    bars.finish()
                except KeyboardInterrupt:
                    cmd.cancel_current_goal()
                    print('cancelled (the running stage\'s goal was canceled)')
                    return 130
    except CommanderError as exc:
        print(f'r2s2r loop: {exc}', file=sys.stderr)
        return EXIT_USAGE
    if result.summary_path:
        try:
            print_summary(json.loads(Path(result.summary_path).read_text()))
        except (OSError, ValueError) as exc:
            print(f'r2s2r loop: cannot read {result.summary_path}: {exc}', file=sys.stderr)
        print(f'summary: {result.summary_path}')
    if result.error_code:
        from ..ros.goal_client import code_name
        name = code_name(type(result), result.error_code)
        where = f' at {result.failed_stage}' if result.failed_stage else ''
        print(f'r2s2r loop: {name}{where}: {result.error_msg}', file=sys.stderr)
        return EXIT_USAGE if result.error_code == 2 else EXIT_FAILED
    return EXIT_OK

