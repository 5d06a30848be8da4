"""Load does not break the loop: the live strike identification through the emulated bringup
(system_identification plans strikes from the tracker's poses and runs them through the armed
executor) passes with one CPU-bound busy process per core beside the graph, as on a lab PC
that runs RViz, a browser and the camera driver next to it.

Measured before the fix (2 busy processes on this 2-core machine): the real-time cell's clock
fell 1.2 s (median) to 2.0 s behind wall time during a 5.3 s strike; the executor judged
tracking at the arrival time once a stamp was more than 2 s old and aborted the strike with
TRACKING_ERROR (0.27 rad on elbow_joint at t = 3.8 s) although the arm followed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.integration

from real2sim2real_msgs.action import ExecuteTrajectory, Identify  # noqa: E402

IdentifyResult = Identify.Result
TrajResult = ExecuteTrajectory.Result


def _stamp_lag(bag) -> np.ndarray:
    """Per joint_states message of an executor bag: receive time - header stamp (s)."""
    from real2sim2real_ros.core.bag_io import BagReader
    out = []
    with BagReader(bag) as reader:
        topic = next(t for t in reader.topics if t.endswith('joint_states'))
        for _, mt, t, raw in reader.messages([topic]):
            s = reader.deserialize(raw, mt).header.stamp
            out.append(t * 1e-9 - (s.sec + s.nanosec * 1e-9))
    return np.array(out)


def test_live_strikes_pass_with_a_busy_process_per_core(emulated_bringup):
    from helpers.latched_scene import publish_scene

    from real2sim2real_ros.core.cell_spec import default_cell_spec_path, load_cell_spec
    _graph, cmd, tmp = emulated_bringup
    # Matched and then delivered: with the goal sent right after the match (stop 57's CI,
    # idle) system_identification had no scene yet and refused the objects' parameters.
    publisher = publish_scene(load_cell_spec(default_cell_spec_path()), tmp, timeout=60)
    busy = []
    try:
        resp = cmd.arm(wait=30)
        assert resp.success, resp.message
        n = os.cpu_count() or 2
        busy = [subprocess.Popen([sys.executable, '-c', 'while True: pass'])
                for _ in range(n)]
        t0 = time.monotonic()
        # The objects only (no arm probes): the strikes are what aborted under load.
        result = cmd.identify(parameter_names=['geom/box_0/friction', 'body/box_0/mass'],
                              run_dir=str(tmp / 'loaded'), timeout=400)
        took = time.monotonic() - t0
    finally:
        for p in busy:
            p.kill()
            p.wait()
        publisher.close()
    executions = sorted((tmp / 'runs').glob('execute_[0-9]*/manifest.json'))
    lines, lags = [], []
    for m in executions:
        r = json.loads(m.read_text())['results']
        lines.append(f'{m.parent.name}: {r["error_name"]} max tracking error '
                     f'{r["max_tracking_error"]:.4f} rad ({r["worst_joint"]})')
        if r.get('bag_path'):
            lags.append(_stamp_lag(r['bag_path']))
    lag = np.concatenate(lags) if lags else np.zeros(1)
    print(f'\n{n} busy processes: identify {took:.0f} s, code {result.error_code} '
          f'{result.error_msg!r}; joint_states receive - stamp median {np.median(lag):.3f} s,'
          f' max {lag.max():.3f} s')
    print('\n'.join(lines))
    assert result.error_code == IdentifyResult.NONE, result.error_msg
    manifest = json.loads((Path(result.parameters.artifact_dir) / 'manifest.json').read_text())
    assert 2 <= len(manifest['inputs']['strike_bags']) <= 3
    assert all('NONE' in line for line in lines), lines
    f = {p.name: p for p in result.parameters.parameters}['geom/box_0/friction']
    assert 0.2 < f.value < 1.0 and f.lower_95 <= f.value <= f.upper_95
