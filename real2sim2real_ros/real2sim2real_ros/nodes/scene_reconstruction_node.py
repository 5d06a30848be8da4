"""scene_reconstruction: capture set -> table plane, objects (pose, size, mesh, hulls) -> MJCF.

Action ``~/reconstruct`` (real2sim2real_msgs/action/Reconstruct): goal ``capture_manifest``
(a capture set's manifest.json, its folder or its bag; empty = the newest ``capture_*`` in the
run directory) and ``run_dir`` (empty = parameter ``run_dir``). Feedback: ``stage`` (load,
validate, table, fusion, objects, meshes, scene) and ``progress`` 0..1 over the whole stage;
cancel -> CANCELED. The stage writes ``<run_dir>/reconstruct_NNN/`` (core/reconstruction/
stage.py: scene.xml, meshes/, points.npz, manifest.json). Every failure is a result with its
Reconstruct.action code and a message naming the problem; the node keeps serving.

The arm is masked out of the views with its URDF (``robot_description_file``, else the one the
capture set recorded, else the latched ``robot_description`` topic) at the joint positions the
capture set recorded from ``/joint_states``.

Publishes, latched (qos.LATCHED), after each success:
* ``scene`` (real2sim2real_msgs/Scene): what the action returned
* ``scene/markers`` (visualization_msgs/MarkerArray): table, objects (primitives or meshes),
  their ids
* ``scene/points`` (sensor_msgs/PointCloud2): the fused object points, x y z + ``intensity`` =
  the object's index in ``scene.objects``, frame ``world_frame``.
Exit code 2 with one line on stderr for an unusable ``robot_description_file``.
"""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
from geometry_msgs.msg import Point, Pose, Quaternion, Vector3
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import PointCloud2, PointField
from std_msgs.msg import ColorRGBA, String
from visualization_msgs.msg import Marker, MarkerArray

from real2sim2real_msgs.action import Reconstruct
from real2sim2real_msgs.msg import ObjectEstimate, Scene

from ..core.reconstruction import ErrorCode, ReconstructionConfig, ReconstructionError
from ..core.reconstruction import stage as recon_stage
from ..core.reconstruction.scene_mjcf import TABLE_THICKNESS
from ..ros import qos
from ..ros.params import declare
from ..ros.ros_main import ConfigurationError, run_node

NODE_NAME = 'scene_reconstruction'


class SceneReconstructionNode(Node):

    def __init__(self):
        super().__init__(NODE_NAME)
        self.p = self._declare()
        if self.p['robot_description_file']:
            path = Path(self.p['robot_description_file']).expanduser()
            try:
                recon_stage.load_robot_cached(str(path))
            except Exception as exc:  # noqa: BLE001 - any URDF problem is a config error
                raise ConfigurationError(f'robot_description_file {path}: {exc}') from None
        self._topic_urdf = ''
        self._busy = threading.Lock()
        self.create_subscription(String, 'robot_description', self._on_description,
                                 qos.LATCHED, callback_group=ReentrantCallbackGroup())
        self.pub_scene = self.create_publisher(Scene, 'scene', qos.LATCHED)
        self.pub_markers = self.create_publisher(MarkerArray, 'scene/markers', qos.LATCHED)
        self.pub_points = self.create_publisher(PointCloud2, 'scene/points', qos.LATCHED)
        self._action = ActionServer(
            self, Reconstruct, '~/reconstruct', execute_callback=self._execute,
            goal_callback=self._on_goal, cancel_callback=lambda _g: CancelResponse.ACCEPT,
            callback_group=MutuallyExclusiveCallbackGroup())
        self.get_logger().info(
            f'scene_reconstruction ready: run_dir={self.p["run_dir"]} voxel '
            f'{self.p["voxel_size"] * 1000:.1f} mm, density {self.p["density"]:.0f} kg/m^3')

    def _declare(self) -> dict:
        def d(*a, **k):
            return declare(self, *a, **k)
        return {
            'voxel_size': d('voxel_size', 0.0025, 'm, TSDF voxel (finer: slower, more memory)',
                            lo=0.0005, hi=0.02),
            'density': d('density', 600.0, 'kg/m^3, prior density for object masses '
                         '(mass_is_prior=true until identified)', lo=1.0, hi=25000.0),
            'max_hull_vertices': d('max_hull_vertices', 32, 'vertex cap of each CoACD '
                                   'collision hull (non-primitive objects)', lo=4, hi=256),
            'refine_poses': d('refine_poses', True, 'ICP-refine every view\'s pose before '
                              'fusion (absorbs calibration error)'),
            'allow_irregular': d('allow_irregular', False, 'true: a cluster no box/cylinder '
                                 'fits becomes a mesh object instead of OBJECTS_TOUCHING'),
            'robot_mask_margin': d('robot_mask_margin', 0.01, 'm added around the arm\'s '
                                   'geoms when masking it out', lo=0.0, hi=0.1),
            'robot_description_file': d('robot_description_file', '', 'URDF for the robot '
                                        'mask; empty = the capture set\'s, else the '
                                        'robot_description topic', read_only=True),
            'run_dir': d('run_dir', '/tmp/r2s2r_runs', 'run directory: capture sets in, '
                         'reconstruct_NNN stage folders out'),
            'world_frame': d('world_frame', 'world', 'frame of the capture set\'s camera '
                             'poses and of the published scene', read_only=True),
        }

    def _on_description(self, msg: String):
        self._topic_urdf = msg.data

    def _config(self) -> ReconstructionConfig:
        # Parameters are re-read per goal: `ros2 param set` between goals takes effect.
        get = self.get_parameter
        return ReconstructionConfig(
            voxel=get('voxel_size').value, density=get('density').value,
            max_hull_vertices=get('max_hull_vertices').value,
            refine_poses=get('refine_poses').value,
            allow_irregular=get('allow_irregular').value)

    # ------------------------------------------------------------------ action
    def _on_goal(self, _goal):
        return GoalResponse.REJECT if self._busy.locked() else GoalResponse.ACCEPT

    def _execute(self, goal_handle):
        with self._busy:
            code, message, scene = self._reconstruct(goal_handle)
        result = Reconstruct.Result(error_code=int(code), error_msg=message)
        if scene is not None:
            result.scene = scene
        if code == ErrorCode.NONE:
            goal_handle.succeed()
        elif code == ErrorCode.CANCELED:
            goal_handle.canceled()
        else:
            self.get_logger().error(f'reconstruction failed: {code.name}: {message}')
            goal_handle.abort()
        return result

    def _reconstruct(self, goal_handle):
        req = goal_handle.request
        run_dir = req.run_dir or self.get_parameter('run_dir').value

        def progress(stage: str, fraction: float):
            if goal_handle.is_cancel_requested:
                return False
            goal_handle.publish_feedback(Reconstruct.Feedback(
                stage=stage, progress=recon_stage.overall_fraction(stage, fraction)))
            return True

        try:
            out = recon_stage.run_stage(
                req.capture_manifest, run_dir, self._config(),
                robot_file=self.p['robot_description_file'], fallback_urdf=self._topic_urdf,
                mask_margin=self.get_parameter('robot_mask_margin').value, progress=progress,
                parameters={'node': self.get_fully_qualified_name()})
        except ReconstructionError as exc:
            return exc.code, exc.message, None
        except Exception as exc:  # noqa: BLE001 - keep serving; the result names the problem
            self.get_logger().error(f'unexpected failure: {exc!r}')
            return ErrorCode.INVALID_CAPTURE, f'unexpected failure: {exc!r}', None
        scene = self._scene_msg(out)
        self._publish(scene, out)
        objs = ', '.join(f'{o.id}' for o in out.result.objects)
        self.get_logger().info(
            f'reconstructed {len(out.result.objects)} objects ({objs}) in {out.duration_s:.2f} s'
            f' (robot mask: {out.robot_mask}): {out.manifest_path}')
        return ErrorCode.NONE, '', scene

    # ------------------------------------------------------------------ messages
    def _scene_msg(self, out) -> Scene:
        res = out.result
        scene = Scene(table_plane=[float(v) for v in res.table_plane],
                      table_height=float(res.table_height), mjcf_path=res.mjcf_path,
                      artifact_dir=str(out.folder))
        scene.header.stamp = self.get_clock().now().to_msg()
        scene.header.frame_id = self.p['world_frame']
        for o in res.objects:
            w, x, y, z = (float(v) for v in o.quat_wxyz)
            scene.objects.append(ObjectEstimate(
                id=o.id, shape=o.shape,
                pose=Pose(position=Point(x=float(o.position[0]), y=float(o.position[1]),
                                         z=float(o.position[2])),
                          orientation=Quaternion(x=x, y=y, z=z, w=w)),
                extents=Vector3(x=float(o.extents[0]), y=float(o.extents[1]),
                                z=float(o.extents[2])),
                mass=float(o.mass), mass_is_prior=bool(o.mass_is_prior),
                mesh_path=o.mesh_path, collision_paths=list(o.collision_paths),
                fit_residual=float(o.fit_residual)))
        return scene

    def _publish(self, scene: Scene, out):
        self.pub_scene.publish(scene)
        self.pub_markers.publish(scene_markers(scene, out.result.table_outline))
        pts = [np.asarray(o.points, np.float32).reshape(-1, 3) for o in out.result.objects
               if o.points is not None]
        labels = [np.full(len(p), k, np.float32) for k, p in enumerate(pts)]
        self.pub_points.publish(point_cloud(
            np.vstack(pts) if pts else np.zeros((0, 3), np.float32),
            np.concatenate(labels) if labels else np.zeros(0, np.float32), scene.header))


def point_cloud(points: np.ndarray, intensity: np.ndarray, header) -> PointCloud2:
    """An unordered x, y, z, intensity float32 cloud built straight from a numpy buffer."""
    buf = np.empty(len(points), dtype=[('x', '<f4'), ('y', '<f4'), ('z', '<f4'),
                                       ('intensity', '<f4')])
    buf['x'], buf['y'], buf['z'] = (np.asarray(points, np.float32)[:, k] for k in range(3))
    buf['intensity'] = intensity
    fields = [PointField(name=n, offset=4 * k, datatype=PointField.FLOAT32, count=1)
              for k, n in enumerate(('x', 'y', 'z', 'intensity'))]
    return PointCloud2(header=header, height=1, width=len(points), fields=fields,
                       is_bigendian=False, point_step=16, row_step=16 * len(points),
                       data=buf.tobytes(), is_dense=True)


_COLOURS = {'box': (0.85, 0.4, 0.15), 'cylinder': (0.2, 0.45, 0.85), 'mesh': (0.4, 0.7, 0.4)}


def scene_markers(scene: Scene, table_outline) -> MarkerArray:
    """DELETEALL, then the table (a slab under the fitted top), every object, its id."""
    out = MarkerArray(markers=[Marker(header=scene.header, action=Marker.DELETEALL)])
    outline = np.asarray(table_outline, float)
    if len(outline):
        lo, hi = outline.min(axis=0), outline.max(axis=0)
        table = Marker(header=scene.header, ns='table', id=0, type=Marker.CUBE,
                       action=Marker.ADD, color=ColorRGBA(r=0.62, g=0.52, b=0.40, a=0.6))
        table.pose.position = Point(x=float(lo[0] + hi[0]) / 2, y=float(lo[1] + hi[1]) / 2,
                                    z=float(scene.table_height - TABLE_THICKNESS / 2))
        table.pose.orientation.w = 1.0
        table.scale = Vector3(x=float(hi[0] - lo[0]), y=float(hi[1] - lo[1]),
                              z=TABLE_THICKNESS)
        out.markers.append(table)
    for k, obj in enumerate(scene.objects):
        r, g, b = _COLOURS.get(obj.shape, (0.6, 0.6, 0.6))
        m = Marker(header=scene.header, ns='objects', id=k, action=Marker.ADD, pose=obj.pose,
                   color=ColorRGBA(r=r, g=g, b=b, a=0.9))
        if obj.shape == 'box':
            m.type, m.scale = Marker.CUBE, obj.extents
        elif obj.shape == 'cylinder':
            m.type, m.scale = Marker.CYLINDER, obj.extents
        else:
            m.type, m.mesh_resource = Marker.MESH_RESOURCE, f'file://{obj.mesh_path}'
            m.scale = Vector3(x=1.0, y=1.0, z=1.0)
        out.markers.append(m)
        label = Marker(header=scene.header, ns='labels', id=k, type=Marker.TEXT_VIEW_FACING,
                       action=Marker.ADD, text=obj.id, color=ColorRGBA(r=1.0, g=1.0, b=1.0,
                                                                      a=1.0))
        label.pose.position = Point(x=obj.pose.position.x, y=obj.pose.position.y,
                                    z=obj.pose.position.z + obj.extents.z / 2 + 0.03)
        label.pose.orientation.w = 1.0
        label.scale.z = 0.025
        out.markers.append(label)
    return out


def main(args=None) -> int:
    return run_node(SceneReconstructionNode, args=args)


if __name__ == '__main__':
    raise SystemExit(main())
