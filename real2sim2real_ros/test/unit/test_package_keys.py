"""Every dependency key in package.xml is one rosdep resolves on Jazzy and Kilted (a bad key
stops `rosdep install` for a lab), and every ROS interface/runtime package the source
imports is declared.

ROSDEP_KEYS is data: the keys this package may use and where each resolves. ROS packages
resolve through the rosdistro's distribution.yaml (jazzy and kilted both release them);
python3-* keys through rosdistro's rosdep/python.yaml; real2sim2real_msgs from the
workspace (`rosdep install --from-paths src --ignore-src`). A key not listed fails here: add
it only after checking it resolves (e.g. `rosdep resolve KEY --rosdistro jazzy`)."""
from __future__ import annotations

import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[2]
ROS = 'rosdistro jazzy + kilted distribution.yaml (ROS package)'
PY = 'rosdistro rosdep/python.yaml'
ROSDEP_KEYS = {
    'real2sim2real_msgs': 'this workspace (--from-paths src --ignore-src)',
    **{k: ROS for k in (
        'rclpy', 'builtin_interfaces', 'std_msgs', 'std_srvs', 'sensor_msgs', 'geometry_msgs',
        'trajectory_msgs', 'visualization_msgs', 'rosgraph_msgs', 'action_msgs',
        'unique_identifier_msgs', 'rcl_interfaces', 'ament_index_python', 'launch',
        'launch_ros', 'launch_xml', 'launch_pytest', 'robot_state_publisher', 'xacro',
        'control_msgs', 'moveit_msgs', 'tf2_msgs', 'ament_cmake', 'rosidl_default_generators',
        'rosidl_default_runtime')},
    **{k: PY for k in (
        'python3-numpy', 'python3-scipy', 'python3-yaml', 'python3-matplotlib',
        'python3-transforms3d', 'python3-pytest', 'python3-pytest-timeout')},
}
# Keys that exist nowhere (what `rosdep install` stopped on before): never again.
NOT_KEYS = {'ament_python'}


def _keys() -> dict[str, list[str]]:
    from catkin_pkg.package import parse_package
    pkg = parse_package(PKG)
    groups = {
        'buildtool_depend': pkg.buildtool_depends, 'build_depend': pkg.build_depends,
        'exec_depend': pkg.exec_depends, 'test_depend': pkg.test_depends,
        'build_export_depend': pkg.build_export_depends, 'doc_depend': pkg.doc_depends,
    }
    return {g: [d.name for d in deps] for g, deps in groups.items()}


def test_every_package_xml_key_resolves():
    keys = _keys()
    bad = {g: [k for k in names if k not in ROSDEP_KEYS] for g, names in keys.items()}
    assert not any(bad.values()), f'keys rosdep may not resolve: {bad}'
    assert not NOT_KEYS & {k for names in keys.values() for k in names}


def test_every_imported_ros_package_is_declared():
    pattern = re.compile(r'^\s*(?:from|import) ([a-z0-9_]+)', re.M)
    imported = set()
    for py in (PKG / 'real2sim2real_ros').rglob('*.py'):
        imported |= set(pattern.findall(py.read_text()))
    ros = {m for m in imported if re.search(r'_(msgs|srvs|interfaces)$', m)
           or m in ('rclpy', 'ament_index_python')}
    declared = set(_keys()['exec_depend'])
    assert ros - declared == set(), f'imported but not in package.xml: {sorted(ros - declared)}'


def test_the_test_runner_plugins_are_declared():
    ini = (PKG.parent / 'pytest.ini').read_text()
    tests = set(_keys()['test_depend'])
    assert 'python3-pytest' in tests
    if re.search(r'^timeout\s*=', ini, re.M):
        assert 'python3-pytest-timeout' in tests
