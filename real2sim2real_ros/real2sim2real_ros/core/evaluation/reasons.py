"""Why a cell did not complete: one specific, documented reason per failed cell.

Every cell the prior allows either completes or ends with one of :data:`REASONS` (the
harness's record ``reason``; ``summary.reasons`` counts them). ``UNCLASSIFIED`` is a failure
the harness has no reason for: a bug to fix, never a figure to report as a reason.
"""
from __future__ import annotations

REASONS = {
    'RECONSTRUCTION_NO_TABLE_PLANE': 'no horizontal plane big enough in the capture views: '
                                     'more views of the table, or a less cluttered table',
    'RECONSTRUCTION_EMPTY_TABLE': 'no object found on the table (object below ~2 cm high or '
                                  'outside every view)',
    'RECONSTRUCTION_OBJECT_OUT_OF_VIEW': 'an object is cut by the image border in every view '
                                         'that sees it: add a view that sees it whole',
    'RECONSTRUCTION_OBJECTS_TOUCHING': 'objects touch (one cluster fits no primitive): '
                                       'separate them by at least 1 cm',
    'RECONSTRUCTION_OTHER': 'reconstruction stopped (its error code in the message)',
    'OBJECT_NOT_FOUND': 'the reconstruction did not find the task object',
    'UNSUPPORTED_OBJECT': 'the task object was reconstructed as a shape the task does not '
                          'act on (slide_to_target: boxes and cylinders; push_to_pose: boxes)',
    'ARM_PROBES_BLOCKED': 'no arm identification probe about the ready pose keeps the arm '
                          'clear of the reconstructed table and objects: clear that space',
    'OBJECT_WOULD_TIP': 'the object is tall for its footprint: friction up to its bound x '
                        'centre height > 0.75 x the distance to its edge, and even the gentle '
                        'strike whose release cannot tip it (below 0.9 x sqrt(2 g dh)) would be '
                        'under 0.15 m/s or slide it under 3 mm; a lower / wider object',
    'NO_SAFE_STRIKE': 'no identification strike keeps the object on the table and clear of '
                      'the others (its message names each heading\'s reason)',
    'TRACKER_LOST': 'the depth tracker does not see the task object before a strike',
    'OUT_OF_REACH': 'the tool cannot reach the task\'s start or goals tool-down (table height '
                    'or placement): move the object nearer the arm',
    'GOALS_UNREACHABLE': 'the arm\'s fastest strike (or the fastest that leaves the object '
                         'upright in the identified twin) cannot slide the identified object to '
                         'any goal worth training on: a lighter, smoother, lower or wider '
                         'object, nearer goals',
    'NO_DEMONSTRATIONS': 'no scripted demonstration succeeded in the twin',
    'TWIN_UNSTABLE': 'the twin\'s simulation diverged at the identified values',
    'TRUTH_LEAK': 'a stage read the cell\'s truth outside scoring (a harness bug)',
    'UNCLASSIFIED': 'a failure without a documented reason (a bug)',
}


class CellEnded(RuntimeError):
    """A cell that ends with a documented reason (``code`` in :data:`REASONS`)."""

    def __init__(self, code: str, message: str):
        if code not in REASONS:
            raise ValueError(f'unknown cell reason {code!r}')
        super().__init__(f'{code}: {message}')
        self.code = code


def classify(exc: BaseException) -> str:
    """The reason code of a cell's exception (UNCLASSIFIED when none applies)."""
    from ..policies.pipeline import NoDemonstrationsError
    from ..reconstruction.errors import ReconstructionError
    from ..sysid.bags import MissingTopicsError
    from ..sysid.probes import ProbeError
    from ..sysid.stage import ProbeExecutionError
    from ..tasks.kinematics import IKError
    from ..truth import TruthLeak
    from ..twin import UnstableTwinError
    from .goals import GoalsUnreachable
    if isinstance(exc, CellEnded):
        return exc.code
    # The identification stage (core/sysid/stage.run_strikes) wraps a first strike's
    # ProbeError in ProbeExecutionError and reports an unseen object as MissingTopicsError.
    if isinstance(exc, (ProbeError, ProbeExecutionError)) and 'struck safely' in str(exc):
        return 'OBJECT_WOULD_TIP' if 'could tip over' in str(exc) else 'NO_SAFE_STRIKE'
    if isinstance(exc, MissingTopicsError) and 'tracker does not see' in str(exc):
        return 'TRACKER_LOST'
    if isinstance(exc, ProbeExecutionError) and 'is lost' in str(exc):
        return 'TRACKER_LOST'
    if isinstance(exc, ReconstructionError):
        code = f'RECONSTRUCTION_{getattr(exc.code, "name", exc.code)}'
        return code if code in REASONS else 'RECONSTRUCTION_OTHER'
    if isinstance(exc, GoalsUnreachable):
        return 'GOALS_UNREACHABLE'
    if isinstance(exc, NoDemonstrationsError):
        return 'NO_DEMONSTRATIONS'
    if isinstance(exc, IKError):
        return 'OUT_OF_REACH'
    if isinstance(exc, TruthLeak):
        return 'TRUTH_LEAK'
    if isinstance(exc, UnstableTwinError):
        return 'TWIN_UNSTABLE'
    return 'UNCLASSIFIED'


__all__ = ['CellEnded', 'REASONS', 'classify']
