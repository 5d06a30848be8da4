"""Keep DDS on this machine and give each run its own domain.

Tests, the demo and the benchmarks call ``isolate()`` before starting anything: it sets
ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST and a ROS_DOMAIN_ID that no other live process on
this machine holds (a lock file per id, released when the process exits), so parallel runs
never see each other's graphs.
"""
from __future__ import annotations

import fcntl
import os
import random
from pathlib import Path

LOCK_DIR = Path(os.environ.get('R2S2R_DOMAIN_LOCK_DIR', '/tmp/r2s2r_domain_locks'))
_held = []  # open lock files: the locks live as long as this process


def allocate_domain_id(lo: int = 1, hi: int = 200) -> int:
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    ids = list(range(lo, hi + 1))
    random.shuffle(ids)
    for i in ids:
        f = open(LOCK_DIR / f'{i}.lock', 'w')  # noqa: SIM115 - held for the process lifetime
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        _held.append(f)
        return i
    raise RuntimeError(f'no free ROS domain id in {lo}..{hi}')


def isolate(env: dict | None = None) -> int:
    """Confine ``env`` (default: os.environ) to loopback and a private domain; return the id.
    An id already chosen by a parent (R2S2R_DOMAIN_ID) is kept, so children share it."""
    env = os.environ if env is None else env
    env['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    env.pop('ROS_STATIC_PEERS', None)
    if 'R2S2R_DOMAIN_ID' not in env:
        env['R2S2R_DOMAIN_ID'] = str(allocate_domain_id())
    env['ROS_DOMAIN_ID'] = env['R2S2R_DOMAIN_ID']
    return int(env['ROS_DOMAIN_ID'])
