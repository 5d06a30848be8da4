"""Scene reconstruction without ROS: RGB-D views -> table and objects -> meshes -> MJCF."""
from .errors import ErrorCode, ReconstructionError
from .pipeline import ReconstructedObject, ReconstructionConfig, ReconstructionResult, reconstruct
from .views import CameraIntrinsics, CaptureView

__all__ = ['CameraIntrinsics', 'CaptureView', 'ErrorCode', 'ReconstructedObject',
           'ReconstructionConfig', 'ReconstructionError', 'ReconstructionResult', 'reconstruct']
