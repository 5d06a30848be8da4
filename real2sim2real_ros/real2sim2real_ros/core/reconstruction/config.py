"""The reconstruction's settings and stage names: light (numpy only), so that the node and
the stage wrapper load open3d, trimesh and scipy with the pipeline, when they reconstruct,
not at start-up (about 4 s of CPU per node start)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

# (stage name, progress 0..1); raise or return False from it to cancel
ProgressCallback = Callable[[str, float], object]

STAGES = ('validate', 'table', 'fusion', 'objects', 'meshes', 'scene')


@dataclass
class ReconstructionConfig:
    """Reconstruction settings: TSDF voxel and truncation, table and object fitting, robot mask."""
    voxel: float = 0.0025                 # m, TSDF voxel
    trunc_voxels: float = 6.0             # TSDF truncation in voxels (wider averages out
    #                                       calibration error instead of carving walls)
    depth_trunc: float = 2.0              # m, depth beyond this is not integrated
    min_depth_coverage: float = 0.3       # a view with fewer valid depth pixels is rejected
    up: tuple[float, float, float] = (0.0, 0.0, 1.0)   # world up (REP 103: +z)
    plane_distance: float = 0.004         # m, RANSAC inlier distance
    max_table_tilt_deg: float = 15.0
    min_table_points: int = 2000
    min_object_height: float = 0.006      # m above the plane (below: table noise)
    max_object_height: float = 0.40       # m above the plane (above: not on the table)
    outline_margin: float = 0.01          # m, ignore points this close to the table's edge
    cluster_eps: float = 0.008            # m, DBSCAN neighbourhood
    cluster_min_points: int = 40
    min_object_size: float = 0.015        # m, smaller clusters are noise
    min_object_top: float = 0.012         # m, a cluster whose top is lower is table noise
    min_object_thickness: float = 0.005   # m across the footprint's narrow axis: a thinner
    #                                       cluster (under two voxels) is a ghost surface
    roi_seed_height: float = 0.015        # m, raw points above this seed object regions
    roi_margin: float = 0.03              # m around each coarse object region that is fused
    fit_tolerance: float = 0.0035         # m RMS; worse fits get a mesh, not a primitive
    allow_irregular: bool = False         # False: a cluster no primitive explains that looks
    #                                       like several objects is an OBJECTS_TOUCHING error
    solidity_min: float = 0.85            # footprint solidity below this = not one primitive
    border_margin_px: int = 3             # a cluster this close to an image edge is cut off
    refine_poses: bool = True             # point-to-plane ICP of every view before fusion
    density: float = 600.0                # kg/m^3 prior for the mass (flagged as a prior)
    max_hull_vertices: int = 32           # CoACD hull vertex cap
    coacd_threshold: float = 0.08         # CoACD concavity threshold
    robot_mask: Callable[[np.ndarray], np.ndarray] | None = field(default=None, repr=False)
    workspace_min: tuple[float, float, float] | None = None   # world AABB of interest
    workspace_max: tuple[float, float, float] | None = None

    def parameters(self) -> dict:
        """The settings as a JSON-ready dict (the robot mask as a bool)."""
        out = asdict(self)
        out.pop('robot_mask')
        out['robot_mask'] = self.robot_mask is not None
        return out
