"""The run_loop stages that are one child goal each: capture, reconstruct, identify, train,
evaluate (the execute stage, many goals, is execute.py).

Each ``_stage_<name>(run)`` sends its child goal through the node's goal plumbing
(``_run_child``), relays the child's feedback, records what the summary shows and returns the
stage's :class:`~real2sim2real_ros.core.loop_plan.Artifact`; a child that fails raises
:class:`StageFailed` with its error code name and text.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

from geometry_msgs.msg import Point, Pose, Quaternion, Vector3
from std_srvs.srv import Trigger

from real2sim2real_msgs.action import Capture, Evaluate, Identify, Reconstruct, Train
from real2sim2real_msgs.msg import ObjectEstimate, Scene

from ...core import loop_plan as lp
from .run import LoopRun, StageFailed, child_error, read_json


def scene_from_manifest(artifact: lp.Artifact, frame: str) -> Scene:
    """The Scene message scene_reconstruction published for a reconstruct_NNN folder."""
    res = artifact.manifest.get('results', {})
    scene = Scene(table_plane=[float(v) for v in res.get('table_plane', [0, 0, 1, 0])],
                  table_height=float(res.get('table_height', 0.0)),
                  mjcf_path=str(artifact.path), artifact_dir=str(artifact.folder))
    scene.header.frame_id = frame
    for o in res.get('objects', []):
        w, x, y, z = (float(v) for v in o.get('quat_wxyz', (1, 0, 0, 0)))
        px, py, pz = (float(v) for v in o.get('position', (0, 0, 0)))
        ex, ey, ez = (float(v) for v in o.get('extents', (0, 0, 0)))
        scene.objects.append(ObjectEstimate(
            id=str(o['id']), shape=str(o.get('shape', 'mesh')),
            pose=Pose(position=Point(x=px, y=py, z=pz),
                      orientation=Quaternion(x=x, y=y, z=z, w=w)),
            extents=Vector3(x=ex, y=ey, z=ez), mass=float(o.get('mass', 0.0)),
            mass_is_prior=bool(o.get('mass_is_prior', True)),
            mesh_path=str(o.get('mesh_path', '')),
            collision_paths=[str(p) for p in o.get('collision_paths', [])],
            fit_residual=float(o.get('fit_residual', 0.0))))
    return scene


class ChildStages:
    """LoopCoordinatorNode's one-goal stages (a mixin: ``self`` is the node)."""

    def _stage_capture(self, run: LoopRun) -> lp.Artifact:
        def fb(f):
            total = max(1, int(f.views_total))
            self._feedback(run, f'view {f.views_done}/{f.views_total}', f.views_done / total)
        res = self._run_child(run, self._capture, Capture.Goal(
            num_views=int(self.p.capture_views), run_dir=str(run.run_dir)),
            'camera_capture', fb)
        if res.error_code:
            raise StageFailed(child_error('camera_capture', res))
        manifest = Path(res.capture_set.manifest_path)
        run.records['capture']['detail'] = {'views': int(res.capture_set.num_views),
                                            'bag': res.capture_set.bag_path}
        return lp.Artifact('capture', manifest.parent, manifest, read_json(manifest))

    def _stage_reconstruct(self, run: LoopRun) -> lp.Artifact:
        capture = run.artifacts['capture']
        res = self._run_child(run, self._reconstruct, Reconstruct.Goal(
            capture_manifest=str(capture.path), run_dir=str(run.run_dir)),
            'scene_reconstruction', lambda f: self._feedback(run, f.stage, f.progress))
        if res.error_code:
            raise StageFailed(child_error('scene_reconstruction', res))
        folder = Path(res.scene.artifact_dir)
        art = lp.Artifact('reconstruct', folder, Path(res.scene.mjcf_path),
                          read_json(folder / 'manifest.json'))
        run.records['reconstruct']['detail'] = {'objects': [
            {'id': o.id, 'shape': o.shape} for o in res.scene.objects]}
        self._publish_scene(run, art)
        return art

    def _publish_scene(self, run: LoopRun, artifact: lp.Artifact):
        """The loop's scene on the latched ``scene`` topic (what the trainer trains in and
        the tracker tracks), built from the reconstruct stage's manifest."""
        if not artifact.manifest.get('results', {}).get('objects'):
            return
        scene = scene_from_manifest(artifact, self.p.world_frame)
        scene.header.stamp = self.get_clock().now().to_msg()
        self.pub_scene.publish(scene)
        time.sleep(0.5)   # latched delivery to the trainer / tracker before the next goal

    def _arm_executor(self, run: LoopRun):
        """Arm the executor, retrying for 15 s the refusals that pass on their own (the
        executor still waiting, or no fresh joint_states: measured under load beside the
        loop, a 1 s gap refused the execute stage of ``make demo CELL=panda``)."""
        from ...ros.commander import TRANSIENT_ARM_REFUSALS
        deadline = time.monotonic() + 15.0
        while True:
            resp = self._call(run, self._arm, Trigger.Request(), 'arm')
            if resp.success:
                return
            if not any(m in resp.message for m in TRANSIENT_ARM_REFUSALS) or \
                    time.monotonic() > deadline:
                raise StageFailed(f'robot_executor/arm refused: {resp.message}')
            time.sleep(0.3)

    def _disarm_executor(self, run: LoopRun):
        """Always after the stages that arm; never raises (the loop's outcome is reported)."""
        try:
            resp = self._call(run, self._disarm, Trigger.Request(), 'disarm', timeout=10.0,
                              cancelable=False)
            ok, text = resp.success, resp.message
        except StageFailed as exc:
            ok, text = False, exc.message
        run.records[run.stage]['detail']['disarmed'] = bool(ok)
        if not ok:
            self.get_logger().error(f'run_loop: disarming the executor failed: {text}')
            run.records[run.stage]['detail']['disarm_error'] = text

    def _stage_identify(self, run: LoopRun) -> lp.Artifact:
        try:
            self._arm_executor(run)
            res = self._run_child(run, self._identify, Identify.Goal(
                num_probes=int(self.p.identify_probes), run_dir=str(run.run_dir)),
                'system_identification', lambda f: self._feedback(run, f.stage, f.progress))
        finally:
            self._disarm_executor(run)
        if res.error_code:
            raise StageFailed(child_error('system_identification', res))
        folder = Path(res.parameters.artifact_dir)
        run.records['identify']['detail'].update({
            'residual_before': res.residual_before, 'residual_after': res.residual_after,
            'heldout_error_before': res.heldout_error_before,
            'heldout_error_after': res.heldout_error_after, 'report': res.report_path})
        return lp.Artifact('identify', folder, folder / 'parameters.yaml',
                           read_json(folder / 'manifest.json'))

    def _stage_train(self, run: LoopRun) -> lp.Artifact:
        params = run.artifacts['identify'].path

        def fb(f):
            extra = (f', twin success {f.twin_success_rate:.0%}'
                     if math.isfinite(f.twin_success_rate) else '')
            self._feedback(run, f'{f.stage}{extra}', f.progress)
        res = self._run_child(run, self._train, Train.Goal(
            task=run.task, parameters_path=str(params),
            randomize=bool(self.p.train_randomize),
            total_steps=int(self.p.train_total_steps), run_dir=str(run.run_dir),
            demo_bags=list(run.goal_handle.request.demo_bags)),
            'policy_trainer', fb)
        if res.error_code:
            raise StageFailed(child_error('policy_trainer', res))
        ckpt = Path(res.checkpoint_path)
        tw = res.twin_result
        run.train_twin = lp.SuccessCount(int(tw.trials), int(tw.successes)).to_dict()
        manifest = read_json(ckpt.parent / 'manifest.json')
        detail = {'twin_success': run.train_twin,
                  'total_steps': manifest.get('parameters', {}).get('training_steps')}
        scene_used = manifest.get('inputs', {}).get('scene', {}).get('mjcf_path', '')
        scene = run.artifacts.get('reconstruct')
        if scene is not None and str(Path(scene_used or '.').resolve()) != str(
                scene.path.resolve()):
            detail['warning'] = (f'the trainer used scene {scene_used or "(its task default)"}'
                                 f', not the loop\'s {scene.path}')
            self.get_logger().warning(f'run_loop: {detail["warning"]}')
        run.records['train']['detail'] = detail
        return lp.Artifact('train', ckpt.parent, ckpt, manifest)

    def _stage_evaluate(self, run: LoopRun) -> lp.Artifact:
        from ...core.artifacts import RunDirectory
        ckpt = run.artifacts['train'].path
        trials = int(self.p.twin_eval_trials)

        def fb(f):
            total = trials or max(int(f.trials_done), 1)
            self._feedback(run, f'{f.trials_done} trials, success {f.success_rate:.0%}',
                           f.trials_done / max(total, 1))
        res = self._run_child(run, self._evaluate, Evaluate.Goal(
            checkpoint_path=str(ckpt), task=run.task, trials=trials), 'policy_trainer', fb)
        if res.error_code:
            raise StageFailed(child_error('policy_trainer', res))
        twin = res.result
        run.twin = lp.SuccessCount(int(twin.trials), int(twin.successes)).to_dict()
        stage = RunDirectory(run.run_dir).new_stage('evaluate', inputs={
            'task': run.task, 'checkpoint': str(ckpt)}, parameters={'trials': trials})
        stage.results = {'twin': run.twin}
        stage.finish()
        run.records['evaluate']['detail'] = dict(run.twin)
        return lp.Artifact('evaluate', stage.folder, stage.folder / 'manifest.json',
                           read_json(stage.folder / 'manifest.json'))
