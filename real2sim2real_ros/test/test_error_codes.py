"""Error codes have one source, the ``.action`` files: the generated interfaces, the core's
error enums and error kinds, and the names the CLI prints all agree with them."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from real2sim2real_ros.ros.goal_client import code_name, error_codes

ACTION_DIR = Path(__file__).resolve().parents[2] / 'real2sim2real_msgs' / 'action'
_CONSTANT = re.compile(r'^\s*int32\s+([A-Z][A-Z0-9_]*)\s*=\s*(-?\d+)')


def _result_constants(action_file: Path) -> dict[int, str]:
    """The integer constants of the result part (between the first and second ``---``)."""
    parts = action_file.read_text().split('\n---\n')
    assert len(parts) == 3, f'{action_file.name}: goal --- result --- feedback'
    found = [_CONSTANT.match(line) for line in parts[1].splitlines()]
    return {int(m.group(2)): m.group(1) for m in found if m}


ACTIONS = sorted(p.stem for p in ACTION_DIR.glob('*.action'))


def test_every_action_file_is_found():
    assert len(ACTIONS) >= 9 and 'ExecuteTrajectory' in ACTIONS


@pytest.mark.parametrize('name', ACTIONS)
def test_generated_result_constants_equal_the_action_file(name):
    import real2sim2real_msgs.action as actions
    want = _result_constants(ACTION_DIR / f'{name}.action')
    assert want and want[0] == 'NONE', f'{name}: error codes start at NONE = 0'
    assert len(set(want.values())) == len(want), f'{name}: a name is used twice'
    assert error_codes(getattr(actions, name).Result) == want


def test_core_error_enums_equal_their_actions():
    from real2sim2real_ros.core.capture_set import CaptureErrorCode
    from real2sim2real_ros.core.reconstruction.errors import ErrorCode
    for enum_cls, action in ((CaptureErrorCode, 'Capture'), (ErrorCode, 'Reconstruct')):
        assert {m.value: m.name for m in enum_cls} == _result_constants(
            ACTION_DIR / f'{action}.action'), enum_cls.__name__


def test_core_error_kinds_are_names_of_their_actions():
    from real2sim2real_ros.core import execution_safety, policy_execution
    trajectory = set(_result_constants(ACTION_DIR / 'ExecuteTrajectory.action').values())
    kinds = {v for k, v in vars(execution_safety).items() if k.isupper() and isinstance(v, str)}
    assert kinds and kinds <= trajectory, kinds - trajectory
    policy = set(_result_constants(ACTION_DIR / 'ExecutePolicy.action').values())
    kinds = {v for k, v in vars(policy_execution).items()
             if k.isupper() and isinstance(v, str) and v.isupper()}
    # INVALID_GOAL has no ExecutePolicy code of its own: the node answers INVALID_CHECKPOINT.
    assert kinds - {'INVALID_GOAL'} <= policy, kinds - policy


def test_code_name_names_a_code_and_falls_back_to_the_number():
    from real2sim2real_msgs.action import Train
    assert code_name(Train.Result, Train.Result.TRAINING_FAILED) == 'TRAINING_FAILED'
    assert code_name(Train.Result, 9999) == '9999'
