"""A rich progress bar fed by action feedback."""
from contextlib import contextmanager

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def action_progress(label: str):
    """Yield ``update(fraction 0..1, text)``; the bar closes when the block ends."""
    with Progress(TextColumn('[bold]{task.description}'), BarColumn(),
                  TextColumn('{task.percentage:>3.0f}%'), TextColumn('{task.fields[info]}'),
                  TimeElapsedColumn(), transient=False) as progress:
        task = progress.add_task(label, total=1.0, info='')

        def update(fraction: float, info: str = ''):
            progress.update(task, completed=max(0.0, min(1.0, fraction)), info=info)
        yield update
