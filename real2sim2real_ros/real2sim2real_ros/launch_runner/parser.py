"""Parse a launch_xml file (and everything it includes) into a LaunchPlan.

Two passes per file, like launch: first the whole file is checked against the supported
subset (tags, attributes, substitution syntax), then its actions are visited in order with
a LaunchContext, so conditions, ``arg`` defaults and ``let`` take effect where they appear.
Nothing is started here; every problem is a LaunchError naming ``file:line``.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import yaml

from .ament import package_prefix
from .errors import LaunchError
from .plan import OUTPUT_MODES, LaunchPlan, NodeSpec, ParamFile, ParamValue
from .substitutions import LaunchContext, evaluate, evaluate_cmdline, parse_template
from .xmltree import XmlElement, read_xml

_CONDITION = {'if', 'unless'}
_ACTIONS = ('arg', 'let', 'node', 'include', 'group', 'push-ros-namespace',
            'push_ros_namespace')
# tag -> (required attributes, optional attributes, allowed child tags)
_SCHEMA: dict[str, tuple[set[str], set[str], tuple[str, ...]]] = {
    'launch': (set(), {'version'}, _ACTIONS),
    'arg': ({'name'}, {'default', 'description'} | _CONDITION, ('choice',)),
    'choice': ({'value'}, set(), ()),
    'let': ({'name', 'value'}, _CONDITION, ()),
    'node': ({'exec'}, {'pkg', 'name', 'namespace', 'output', 'respawn', 'respawn_delay',
                        'respawn_max_retries', 'args', 'ros_args', 'on_exit'} | _CONDITION,
             ('param', 'remap')),
    'param': (set(), {'name', 'value', 'from'}, ('param',)),
    'remap': ({'from', 'to'}, set(), ()),
    'include': ({'file'}, _CONDITION, ('arg',)),
    'group': (set(), {'scoped'} | _CONDITION, _ACTIONS),
    'push-ros-namespace': ({'namespace'}, _CONDITION, ()),
    'push_ros_namespace': ({'namespace'}, _CONDITION, ()),
}
_INCLUDE_ARG = ({'name', 'value'}, set(), ())  # <arg> inside <include> passes a value
_LITERAL_ATTRS = {('arg', 'name'), ('arg', 'description'), ('choice', 'value'),
                  ('launch', 'version')}
_MAX_INCLUDE_DEPTH = 32
_NODE_NAME = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')
_NS_TOKEN = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')


def parse_launch_file(path: str | os.PathLike, launch_args: dict[str, str] | None = None
                      ) -> LaunchPlan:
    """Resolve ``path`` with ``launch_args`` into a LaunchPlan (no process is started).

    As in ``ros2 launch``, a top-level argument may be one that an included file declares
    (launch configurations are visible to every file the launch includes), e.g.
    ``bringup.launch.xml cell:=real executor_backend:=moveit``. One declared by no file the
    launch visits is refused (``ros2 launch`` would ignore it silently).

    Raises LaunchError for: unsupported tag/attribute/substitution, an undeclared or missing
    launch argument, a missing file (launch, include, params), a missing executable.
    """
    launch_args = dict(launch_args or {})
    file = Path(os.path.abspath(path))
    root = _load(file, where=None)
    declared = [el.attrib['name'] for el in _walk(root) if el.tag == 'arg'
                and 'value' not in el.attrib]  # <arg value=> inside <include> passes, not declares
    ctx = LaunchContext(configs=dict(launch_args))
    nodes: list[NodeSpec] = []
    _visit_actions(root.children, ctx, nodes, depth=0)
    unknown = [n for n in launch_args if n not in declared and n not in ctx.declared]
    if unknown:
        everywhere = declared + sorted(n for n in ctx.declared if n not in declared)
        raise LaunchError(f"unknown launch argument '{unknown[0]}' (declared: "
                          f"{', '.join(everywhere) or 'none'})", str(file))
    _assign_labels(nodes)
    top_args = {name: ctx.configs[name] for name in declared if name in ctx.configs}
    top_args.update({k: v for k, v in launch_args.items() if k not in top_args})
    return LaunchPlan(file=file, launch_arguments=top_args, nodes=nodes)


# --- loading and the structural check -------------------------------------------------

def _load(file: Path, where: str | None) -> XmlElement:
    if not file.is_file():
        raise LaunchError(f'launch file {file} does not exist', where)
    if not file.name.endswith('.xml'):
        raise LaunchError(f'launch file {file} is not an XML launch file; the runner reads '
                          'only launch_xml (use ros2 launch for .py/.yaml)', where)
    root = read_xml(file)
    if root.tag != 'launch':
        raise LaunchError(f'root tag must be <launch>, got <{root.tag}>', root.where)
    _check(root, 'launch', parent=None)
    return root


def _check(el: XmlElement, kind: str, parent: str | None) -> None:
    """Refuse anything outside the supported subset; parse every substitution once."""
    required, optional, children = _INCLUDE_ARG if (kind, parent) == ('arg', 'include') \
        else _SCHEMA[kind]
    for attr in el.attrib:
        if attr not in required and attr not in optional:
            raise LaunchError(f"unsupported attribute '{attr}' on <{el.tag}> (supported: "
                              f"{', '.join(sorted(required | optional)) or 'none'})", el.where)
    for attr in required:
        if attr not in el.attrib:
            raise LaunchError(f"<{el.tag}> needs the attribute '{attr}'", el.where)
    if 'if' in el.attrib and 'unless' in el.attrib:
        raise LaunchError(f"<{el.tag}> cannot have both 'if' and 'unless'", el.where)
    for attr, value in el.attrib.items():
        if (el.tag, attr) in _LITERAL_ATTRS and parent != 'include':
            if '$(' in value:
                raise LaunchError(f"attribute '{attr}' of <{el.tag}> cannot use substitutions",
                                  el.where)
        else:
            parse_template(value, el.where)  # refuses unknown substitutions early
    if kind == 'param':
        _check_param(el, nested=parent == 'param')
    for child in el.children:
        if child.tag not in children:
            raise LaunchError(f'unsupported tag <{child.tag}> inside <{el.tag}> (supported: '
                              f"{', '.join(children) or 'none'})", child.where)
        _check(child, child.tag, parent=kind)


def _check_param(el: XmlElement, nested: bool) -> None:
    has = {k for k in ('name', 'value', 'from') if k in el.attrib}
    if 'from' in has:
        if has != {'from'} or el.children or nested:
            raise LaunchError("<param from=...> takes no name, value or nested <param>",
                              el.where)
    elif 'name' not in has:
        raise LaunchError("<param> needs 'name' (with 'value' or nested <param>) or 'from'",
                          el.where)
    elif ('value' in has) == bool(el.children):
        raise LaunchError(f"<param name=\"{el.attrib['name']}\"> needs exactly one of 'value' "
                          'or nested <param> tags', el.where)


def _walk(el: XmlElement):
    yield el
    for child in el.children:
        yield from _walk(child)


# --- visiting actions ------------------------------------------------------------------

def _attr(el: XmlElement, name: str, ctx: LaunchContext, default: str | None = None
          ) -> str | None:
    if name not in el.attrib:
        return default
    return evaluate(parse_template(el.attrib[name], el.where), ctx, el.where)


def _bool(text: str, what: str, where: str) -> bool:
    low = text.strip().lower()
    if low in ('true', '1'):
        return True
    if low in ('false', '0'):
        return False
    raise LaunchError(f"{what} must be true/false/1/0, got '{text}'", where)


def _condition_holds(el: XmlElement, ctx: LaunchContext) -> bool:
    if 'if' in el.attrib:
        return _bool(_attr(el, 'if', ctx), "condition 'if'", el.where)
    if 'unless' in el.attrib:
        return not _bool(_attr(el, 'unless', ctx), "condition 'unless'", el.where)
    return True


def _visit_actions(elements: list[XmlElement], ctx: LaunchContext, nodes: list[NodeSpec],
                   depth: int) -> None:
    for el in elements:
        if not _condition_holds(el, ctx):
            continue
        if el.tag == 'arg':
            _declare_argument(el, ctx)
        elif el.tag == 'let':
            ctx.configs[_attr(el, 'name', ctx)] = _attr(el, 'value', ctx)
        elif el.tag in ('push-ros-namespace', 'push_ros_namespace'):
            pushed = _attr(el, 'namespace', ctx)
            ctx.ros_namespace = _validated_namespace(
                prefix_namespace(ctx.ros_namespace, pushed), el.where)
        elif el.tag == 'group':
            scoped = _bool(_attr(el, 'scoped', ctx, 'true'), "'scoped'", el.where)
            _visit_actions(el.children, ctx.copy() if scoped else ctx, nodes, depth)
        elif el.tag == 'include':
            _include(el, ctx, nodes, depth)
        elif el.tag == 'node':
            nodes.append(_node(el, ctx))
        else:  # pragma: no cover - _check refuses other tags
            raise AssertionError(el.tag)


def _declare_argument(el: XmlElement, ctx: LaunchContext) -> None:
    name = el.attrib['name']
    ctx.declared.add(name)
    if name not in ctx.configs:
        if 'default' not in el.attrib:
            desc = el.attrib.get('description')
            raise LaunchError(f"required launch argument '{name}' was not provided"
                              + (f' ({desc})' if desc else ''), el.where)
        ctx.configs[name] = _attr(el, 'default', ctx)
    choices = [c.attrib['value'] for c in el.children]
    if choices and ctx.configs[name] not in choices:
        raise LaunchError(f"launch argument '{name}' is '{ctx.configs[name]}', not one of: "
                          f"{', '.join(choices)}", el.where)


def _include(el: XmlElement, ctx: LaunchContext, nodes: list[NodeSpec], depth: int) -> None:
    if depth >= _MAX_INCLUDE_DEPTH:
        raise LaunchError(f'includes nested deeper than {_MAX_INCLUDE_DEPTH} (a cycle?)',
                          el.where)
    file = Path(os.path.abspath(_attr(el, 'file', ctx)))
    # As in launch, the values are set one after the other in the including context
    # (an include is not scoped: wrap it in <group> to keep them local).
    for arg in el.children:
        ctx.configs[_attr(arg, 'name', ctx)] = _attr(arg, 'value', ctx)
    root = _load(file, where=el.where)
    _visit_actions(root.children, ctx, nodes, depth + 1)


# --- nodes -----------------------------------------------------------------------------

def _node(el: XmlElement, ctx: LaunchContext) -> NodeSpec:
    where = el.where
    package = _attr(el, 'pkg', ctx)
    executable = _attr(el, 'exec', ctx)
    name = _attr(el, 'name', ctx)
    if name is not None and not _NODE_NAME.match(name):
        raise LaunchError(f"invalid node name '{name}' (letters, digits, '_'; not starting "
                          'with a digit)', where)
    namespace = prefix_namespace(ctx.ros_namespace, _attr(el, 'namespace', ctx))
    if namespace is not None:
        namespace = _validated_namespace(namespace, where)
    output = _attr(el, 'output', ctx, 'log')
    if output not in OUTPUT_MODES:
        raise LaunchError(f"output must be one of {', '.join(OUTPUT_MODES)}, got '{output}'",
                          where)
    on_exit = _attr(el, 'on_exit', ctx)
    if on_exit not in (None, 'shutdown'):
        raise LaunchError(f"on_exit supports only 'shutdown', got '{on_exit}'", where)
    respawn_delay = _number(_attr(el, 'respawn_delay', ctx, '0'), 'respawn_delay', where, float)
    retries = _number(_attr(el, 'respawn_max_retries', ctx, '-1'), 'respawn_max_retries', where,
                      int)
    parameters = []
    remappings = []
    for child in el.children:
        if child.tag == 'remap':
            remappings.append((_attr(child, 'from', ctx), _attr(child, 'to', ctx)))
        elif 'from' in child.attrib:
            parameters.append(ParamFile(_params_file(_attr(child, 'from', ctx), child.where)))
        else:
            parameters.extend(_inline_params(child, ctx, prefix=''))
    return NodeSpec(
        package=package, executable=executable,
        executable_path=_resolve_executable(package, executable, where),
        name=name, namespace=namespace, parameters=parameters, remappings=remappings,
        args=_cmdline(el, 'args', ctx), ros_args=_cmdline(el, 'ros_args', ctx),
        output=output, respawn=_bool(_attr(el, 'respawn', ctx, 'false'), 'respawn', where),
        respawn_delay=respawn_delay, respawn_max_retries=retries,
        required=on_exit == 'shutdown', source=where)


def _number(text: str, what: str, where: str, kind):
    try:
        value = kind(text)
    except ValueError:
        raise LaunchError(f"{what} must be a {kind.__name__}, got '{text}'", where) from None
    if kind is float and not value >= 0.0:
        raise LaunchError(f"{what} must be >= 0, got '{text}'", where)
    return value


def _cmdline(el: XmlElement, attr: str, ctx: LaunchContext) -> list[str]:
    if attr not in el.attrib:
        return []
    return evaluate_cmdline(parse_template(el.attrib[attr], el.where), ctx, el.where)


def _params_file(text: str, where: str) -> Path:
    path = Path(os.path.abspath(text))
    if not path.is_file():
        raise LaunchError(f'parameters file {path} does not exist', where)
    try:
        content = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise LaunchError(f'parameters file {path} is not readable YAML: {first}',
                          where) from None
    if not isinstance(content, dict):
        raise LaunchError(f'parameters file {path} must map node names to ros__parameters',
                          where)
    return path


def _inline_params(el: XmlElement, ctx: LaunchContext, prefix: str) -> list[ParamValue]:
    name = prefix + _attr(el, 'name', ctx)
    if 'value' in el.attrib:
        return [ParamValue(name, typed_parameter_value(_attr(el, 'value', ctx)))]
    result = []
    for child in el.children:
        result.extend(_inline_params(child, ctx, prefix=name + '.'))
    return result


def typed_parameter_value(text: str):
    """Type a parameter text as launch_ros does: YAML scalars and flat lists, else a string."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    scalar = (bool, int, float, str)
    if isinstance(value, scalar):
        return value
    if isinstance(value, list) and value and all(isinstance(v, scalar) for v in value):
        kinds = {type(v) for v in value}
        if len(kinds) == 1 or kinds == {int, float}:
            return [float(v) for v in value] if kinds == {int, float} else value
    return text


def _resolve_executable(package: str | None, executable: str, where: str) -> Path:
    """``<prefix of package>/lib/<package>/<exec>``, where colcon puts console scripts."""
    if package is None:
        found = shutil.which(executable)
        if found is None:
            raise LaunchError(f"executable '{executable}' not found on PATH", where)
        return Path(found)
    prefix = package_prefix(package, where, what=f" (for executable '{executable}')")
    path = Path(prefix) / 'lib' / package / executable
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise LaunchError(f"executable '{executable}' of package '{package}' not found "
                          f'(no executable file {path})', where)
    return path


def _assign_labels(nodes: list[NodeSpec]) -> None:
    """Unique output labels: the node name (or executable); ``ns/name`` where that repeats;
    then '-2', '-3'... on what still repeats."""
    def short(spec: NodeSpec) -> str:
        return spec.name or os.path.basename(spec.executable)

    counts: dict[str, int] = {}
    for spec in nodes:
        counts[short(spec)] = counts.get(short(spec), 0) + 1
    seen: dict[str, int] = {}
    for spec in nodes:
        base = short(spec)
        if counts[base] > 1 and spec.namespace not in (None, '/'):
            base = spec.namespace.strip('/') + '/' + base
        seen[base] = seen.get(base, 0) + 1
        spec.label = base if seen[base] == 1 else f'{base}-{seen[base]}'


# --- namespaces (launch_ros semantics) ------------------------------------------------

def prefix_namespace(base: str | None, ns: str | None) -> str | None:
    """Join a pushed namespace and a node namespace as launch_ros does (absolute result)."""
    if base is None and ns is None:
        return None
    if ns is None:
        combined = base
    elif not base or ns.startswith('/'):
        combined = ns
    else:
        combined = ('' if base == '/' else base) + '/' + ns
    if combined != '/':
        combined = combined.rstrip('/')
    return combined if combined.startswith('/') else '/' + combined


def _validated_namespace(ns: str, where: str) -> str:
    tokens = ns.split('/')[1:]
    if ns != '/' and not all(_NS_TOKEN.match(t) for t in tokens):
        raise LaunchError(f"invalid namespace '{ns}' (tokens of letters, digits, '_'; no "
                          "empty token, not starting with a digit)", where)
    return ns
