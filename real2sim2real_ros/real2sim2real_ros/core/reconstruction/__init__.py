"""Scene reconstruction without ROS: RGB-D views -> table and objects -> meshes -> MJCF.

The pipeline's names (``reconstruct``, its result types) load on first use: importing the
package, its settings or its views does not import open3d, trimesh or scipy."""
from .config import ReconstructionConfig
from .errors import ErrorCode, ReconstructionError
from .views import CameraIntrinsics, CaptureView

__all__ = ['CameraIntrinsics', 'CaptureView', 'ErrorCode', 'ReconstructedObject',
           'ReconstructionConfig', 'ReconstructionError', 'ReconstructionResult', 'reconstruct']
_PIPELINE = ('ReconstructedObject', 'ReconstructionResult', 'reconstruct')


def __getattr__(name: str):
    if name in _PIPELINE:
        from . import pipeline
        return getattr(pipeline, name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
