"""A runner for the ROS 2 XML launch files of this package, for machines without ros2 launch.

It mirrors launch_xml/launch_ros for the subset the package uses: ``launch``, ``arg``
(name, default, description, ``<choice value=>``), ``let``, ``node`` (pkg, exec, name,
namespace, output, respawn, respawn_delay, respawn_max_retries, args, ros_args,
on_exit="shutdown"; ``<param name value>``, nested ``<param>``, ``<param from=>``,
``<remap from to>``), ``include`` (file, ``<arg name value>``), ``group`` (scoped),
``push-ros-namespace``; ``if``/``unless`` on every action; substitutions ``$(var)``,
``$(env NAME [default])``, ``$(find-pkg-share)``. Anything else is refused with an error
naming it and ``file:line``.

API:
- ``parse_launch_file(path, launch_args) -> LaunchPlan`` (raises LaunchError; starts nothing)
- ``launch_plan_commands(plan, log_level=None) -> list[list[str]]`` (launch_ros command lines)
- ``LaunchedGraph(plan_or_file, launch_args, ...)``: context manager running the plan in the
  background; ``.stop()``, ``.alive()``, ``.pids()``, ``.exit_code``
- ``Supervisor(plan, ...).run()`` / ``run_plan(plan)``: run in the foreground
- ``main(argv) -> int``: ``r2s2r launch``; exit 0 ok, 1 a node failed, 2 bad input
"""
from .cli import main, resolve_launch_file, ros2_launch_available
from .errors import EXIT_BAD_INPUT, EXIT_NODE_FAILED, EXIT_OK, LaunchError
from .graph import LaunchedGraph
from .parser import parse_launch_file, prefix_namespace
from .plan import (
    LaunchPlan,
    NodeSpec,
    ParamFile,
    ParamValue,
    format_plan,
    launch_plan_commands,
    node_command,
)
from .supervisor import Supervisor, run_plan

__all__ = [
    'EXIT_BAD_INPUT', 'EXIT_NODE_FAILED', 'EXIT_OK', 'LaunchError', 'LaunchPlan',
    'LaunchedGraph', 'NodeSpec', 'ParamFile', 'ParamValue', 'Supervisor', 'format_plan',
    'launch_plan_commands', 'main', 'node_command', 'parse_launch_file', 'prefix_namespace',
    'resolve_launch_file', 'ros2_launch_available', 'run_plan',
]
