"""The resolved launch plan (what to start) and the command line of each node.

The command line follows launch_ros ``Node``:
``<exe> [args] [--ros-args <ros_args>] --ros-args -r __node:=<name> -r __ns:=<ns>
--params-file <file> | -p <name>:=<value> ... -r <from>:=<to> ... [--log-level <lvl>]``.
Parameter sources keep their order in the launch file: rcl applies them left to right, so a
later definition wins, as with ``ros2 launch``.
"""
from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import yaml

LOG_LEVELS = ('debug', 'info', 'warn', 'error', 'fatal')
OUTPUT_MODES = ('screen', 'log', 'both')


@dataclass(frozen=True)
class ParamFile:
    """``<param from="..."/>``: a params YAML passed whole; rclpy picks its own section."""

    path: Path


@dataclass(frozen=True)
class ParamValue:
    """``<param name="..." value="..."/>`` (nested names joined with '.'), typed like YAML."""

    name: str
    value: Any


ParameterSource = Union[ParamFile, ParamValue]


@dataclass
class NodeSpec:
    """One ``<node>`` after every substitution, include and group has been resolved."""

    package: str | None
    executable: str
    executable_path: Path
    name: str | None = None  # None: the node keeps the name its code gives it
    namespace: str | None = None  # absolute, or None: no __ns remap
    parameters: list[ParameterSource] = field(default_factory=list)
    remappings: list[tuple[str, str]] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    ros_args: list[str] = field(default_factory=list)
    output: str = 'log'  # screen | log | both (launch's default is log)
    respawn: bool = False
    respawn_delay: float = 0.0
    respawn_max_retries: int = -1  # negative: unlimited
    required: bool = False  # on_exit="shutdown": its exit ends the launch
    label: str = ''  # unique name used as the output prefix and in pids()
    source: str = ''  # file:line of the <node> tag

    @property
    def parameter_files(self) -> list[Path]:
        return [p.path for p in self.parameters if isinstance(p, ParamFile)]

    @property
    def inline_parameters(self) -> dict[str, Any]:
        return {p.name: p.value for p in self.parameters if isinstance(p, ParamValue)}

    @property
    def full_name(self) -> str | None:
        """``/ns/name`` when the name is given, else None."""
        if self.name is None:
            return None
        ns = self.namespace or '/'
        return ('' if ns == '/' else ns) + '/' + self.name


@dataclass
class LaunchPlan:
    """Everything ``parse_launch_file`` resolved: the file, its arguments and the nodes."""

    file: Path
    launch_arguments: dict[str, str]  # top-level arguments after defaults were applied
    nodes: list[NodeSpec]


def parameter_value_text(value: Any) -> str:
    """Render a typed value as the YAML text rcl parses after ``-p name:=``."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, float) and not math.isfinite(value):
        return '.nan' if math.isnan(value) else ('.inf' if value > 0 else '-.inf')
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30)
    if text.endswith('\n...\n'):
        text = text[:-5]
    return text.strip()


def node_command(spec: NodeSpec, log_level: str | None = None) -> list[str]:
    """The argv that starts ``spec`` (the same shape launch_ros builds)."""
    cmd = [str(spec.executable_path), *spec.args]
    if spec.ros_args:
        cmd += ['--ros-args', *spec.ros_args]
    cmd.append('--ros-args')
    if spec.name is not None:
        cmd += ['-r', f'__node:={spec.name}']
    if spec.namespace is not None:
        cmd += ['-r', f'__ns:={spec.namespace}']
    for source in spec.parameters:
        if isinstance(source, ParamFile):
            cmd += ['--params-file', str(source.path)]
        else:
            cmd += ['-p', f'{source.name}:={parameter_value_text(source.value)}']
    for src, dst in spec.remappings:
        cmd += ['-r', f'{src}:={dst}']
    if log_level:
        cmd += ['--log-level', log_level]
    return cmd


def launch_plan_commands(plan: LaunchPlan, log_level: str | None = None) -> list[list[str]]:
    """The command line of every node of ``plan``, in launch order."""
    return [node_command(spec, log_level) for spec in plan.nodes]


def format_plan(plan: LaunchPlan, log_level: str | None = None) -> str:
    """Human-readable plan for ``--print``: a comment line per node, then its command."""
    lines = [f'# launch file: {plan.file}']
    for key, value in plan.launch_arguments.items():
        lines.append(f'#   {key}:={value}')
    for spec in plan.nodes:
        flags = [f'output={spec.output}']
        if spec.respawn:
            flags.append(f'respawn (delay {spec.respawn_delay:g} s)')
        if spec.required:
            flags.append('on_exit=shutdown')
        lines.append(f'# [{spec.label}] {spec.package or ""}/{spec.executable} '
                     f'({", ".join(flags)}) from {spec.source}')
        lines.append(shlex.join(node_command(spec, log_level)))
    return '\n'.join(lines)
