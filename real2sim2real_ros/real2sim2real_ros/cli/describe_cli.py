"""``r2s2r describe [NODE ...] [--markdown FILE]``: what each running node offers, read from the
graph (``ros2 node info`` and ``ros2 param describe`` in one, for machines without ros2cli).

Contract:

* :func:`describe_graph` asks the live graph, through a :class:`~real2sim2real_ros.ros.commander.
  Commander`, for each node's publishers, subscriptions, services, service clients, action
  servers and action clients (``get_*_names_and_types_by_node``), and for its declared
  parameters over the node's own parameter services (list, describe, get). ROS's own
  plumbing is left out: ``/rosout``, ``/parameter_events``, the parameter services, the hidden
  ``_action/`` topics and services, and the standard parameters every node has.
* :func:`to_markdown` renders that deterministically (sorted), with absolute paths in values
  shown as ``<share>/...`` (the package's share directory) or ``<path>``, so the same bringup
  gives the same text on every machine. ``docs/nodes.md`` is this output for the emulated
  bringup; a test keeps it equal to the live graph.
* Subscriptions a node makes only while a goal runs (``subscriptions.subscribed``) are not in
  the graph between goals and so are not listed; each node's module docstring names them.

Exit codes: 0 ok, 1 a named node is not in the graph, 2 the graph could not be read.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

HIDDEN_TOPICS = {'/rosout', '/parameter_events'}
PARAMETER_SERVICES = ('describe_parameters', 'get_parameter_types', 'get_parameters',
                      'list_parameters', 'set_parameters', 'set_parameters_atomically',
                      'get_type_description')
STANDARD_PARAMETERS = ('use_sim_time', 'start_type_description_service', 'qos_overrides.')
_TYPE_NAMES = {1: 'bool', 2: 'int', 3: 'double', 4: 'string', 5: 'byte[]', 6: 'bool[]',
               7: 'int[]', 8: 'double[]', 9: 'string[]'}
KINDS = (('publishes', 'topic'), ('subscribes', 'topic'), ('services', 'service'),
         ('service clients', 'service'), ('action servers', 'action'),
         ('action clients', 'action'))


def _visible(name: str, kind: str) -> bool:
    if '/_action/' in name or name in HIDDEN_TOPICS:
        return False
    return not (kind == 'service' and name.rsplit('/', 1)[-1] in PARAMETER_SERVICES)


def _parameter_value(value):
    from rcl_interfaces.msg import ParameterType as T
    return {T.PARAMETER_BOOL: value.bool_value, T.PARAMETER_INTEGER: value.integer_value,
            T.PARAMETER_DOUBLE: value.double_value, T.PARAMETER_STRING: value.string_value,
            T.PARAMETER_BOOL_ARRAY: list(value.bool_array_value),
            T.PARAMETER_INTEGER_ARRAY: list(value.integer_array_value),
            T.PARAMETER_DOUBLE_ARRAY: list(value.double_array_value),
            T.PARAMETER_STRING_ARRAY: list(value.string_array_value)}.get(value.type)


def _parameters(cmd, node_path: str, timeout: float) -> list[dict]:
    clients = {}

    def call(srv, suffix, request):
        if suffix not in clients:
            clients[suffix] = cmd.node.create_client(srv, f'{node_path}/{suffix}')
            if not clients[suffix].wait_for_service(timeout_sec=timeout):
                raise RuntimeError(f'{node_path}/{suffix} is not available')
        return cmd._wait(clients[suffix].call_async(request), timeout, f'{node_path}/{suffix}')

    try:
        return _read_parameters(call)
    finally:
        for client in clients.values():
            cmd.node.destroy_client(client)


def _read_parameters(call) -> list[dict]:
    from rcl_interfaces.srv import DescribeParameters, GetParameters, ListParameters
    names = sorted(n for n in call(ListParameters, 'list_parameters',
                                   ListParameters.Request()).result.names
                   if not n.startswith(STANDARD_PARAMETERS))
    if not names:
        return []
    descs = call(DescribeParameters, 'describe_parameters',
                 DescribeParameters.Request(names=names)).descriptors
    # rclpy answers a get for a set holding one declared-but-unset parameter (an empty list
    # declared by type) with no values at all, so ask one name at a time.
    values = [(call(GetParameters, 'get_parameters', GetParameters.Request(names=[name])).values
               or [None])[0] for name in names]
    out = []
    for d, v in zip(descs, values):
        rng = ''
        if d.floating_point_range:
            r = d.floating_point_range[0]
            rng = f'[{r.from_value:g}, {r.to_value:g}]'
        elif d.integer_range:
            r = d.integer_range[0]
            rng = f'[{r.from_value}, {r.to_value}]'
        out.append({'name': d.name, 'type': _TYPE_NAMES.get(d.type, '?'),
                    'value': '(unset)' if v is None else _parameter_value(v), 'range': rng,
                    'constraints': d.additional_constraints, 'read_only': d.read_only,
                    'description': d.description})
    return out


def describe_graph(cmd, nodes=None, timeout: float = 10.0) -> dict[str, dict]:
    """``{node path: {kind: [(name, type), ...], 'parameters': [...]}}`` for the graph's nodes
    (or only ``nodes``, relative to the commander's namespace) as the graph shows them now."""
    from rclpy.action.graph import (
        get_action_client_names_and_types_by_node,
        get_action_server_names_and_types_by_node,
    )
    n = cmd.node
    present = {(ns.rstrip('/') + '/' + name): (name, ns)
               for name, ns in n.get_node_names_and_namespaces()}
    wanted = ([cmd.name(x) for x in nodes] if nodes else
              sorted(p for p in present if p != f'{n.get_namespace().rstrip("/")}/{n.get_name()}'))
    missing = [p for p in wanted if p not in present]
    if missing:
        raise LookupError(f'not in the graph: {", ".join(missing)}')
    out = {}
    for path in wanted:
        name, ns = present[path]
        getters = (n.get_publisher_names_and_types_by_node,
                   n.get_subscriber_names_and_types_by_node,
                   n.get_service_names_and_types_by_node,
                   n.get_client_names_and_types_by_node,
                   lambda a, b: get_action_server_names_and_types_by_node(n, a, b),
                   lambda a, b: get_action_client_names_and_types_by_node(n, a, b))
        entry = {}
        services = {t for t, _ in n.get_service_names_and_types_by_node(name, ns)}
        for (kind, what), get in zip(KINDS, getters):
            entry[kind] = sorted((t, ', '.join(types)) for t, types in get(name, ns)
                                 if _visible(t, what))
        # A helper node created without parameter services has no parameters to list.
        entry['parameters'] = (_parameters(cmd, path, timeout)
                               if f'{path}/list_parameters' in services else [])
        out[path] = entry
    return out


def _shown(value, share: str) -> str:
    def one(v):
        if v == '(unset)':
            return v
        if isinstance(v, str) and v.startswith('/'):
            return '<share>' + v[len(share):] if share and v.startswith(share) else '<path>'
        if isinstance(v, float):
            return f'{v:g}'
        return repr(v) if isinstance(v, str) else str(v)
    if isinstance(value, list):
        return '[' + ', '.join(one(v) for v in value) + ']'
    return one(value)


def _cell(text: str) -> str:
    return str(text).replace('|', '\\|').replace('\n', ' ')


def to_markdown(graph: dict[str, dict], share: str = '') -> str:
    """The reference page for ``graph`` (from :func:`describe_graph`)."""
    lines = ['<!-- Generated by `r2s2r describe --markdown docs/nodes.md` on the emulated '
             'bringup; test_cell_integration keeps it equal to the live graph. -->',
             '# Node reference', '',
             'Every node of `bringup.launch.xml cell:=emulated` as the running graph shows it: '
             'topics, services and actions with their types, and each declared parameter '
             'with its value in the bringup (`config/params.yaml`), range and description. '
             'Subscriptions a node makes only while a goal runs are not listed (see the '
             "node's module docstring). Names are as resolved in the root namespace.", '']
    for path in sorted(graph):
        entry = graph[path]
        lines += [f'## `{path}`', '', '| interface | name | type |', '|---|---|---|']
        for kind, _ in KINDS:
            lines += [f'| {kind} | `{t}` | `{ty}` |' for t, ty in entry[kind]]
        lines.append('')
        if entry['parameters']:
            lines += ['| parameter | type | value | range | description |',
                      '|---|---|---|---|---|']
            for p in entry['parameters']:
                rng = p['range'] or p['constraints']
                desc = p['description'] + (' (read-only)' if p['read_only'] else '')
                lines.append(f'| `{p["name"]}` | {p["type"]} | `{_cell(_shown(p["value"], share))}`'
                             f' | {_cell(rng)} | {_cell(desc)} |')
            lines.append('')
    return '\n'.join(lines).rstrip('\n') + '\n'


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser('describe', help='each running node\'s topics, services, actions '
                              'and parameters (ros2 node info + ros2 param describe)')
    p.add_argument('nodes', nargs='*', help='node names (default: every node in the graph)')
    p.add_argument('--markdown', default='', metavar='FILE', help='write the reference page '
                   '(docs/nodes.md) instead of printing')
    p.add_argument('--namespace', default='', help='namespace of the graph')
    p.add_argument('--wait', type=float, default=10.0, help='seconds to wait for the graph')
    p.set_defaults(func=cmd_describe)
    return p


def _share() -> str:
    from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
    try:
        return get_package_share_directory('real2sim2real_ros')
    except PackageNotFoundError:
        return ''


def _wait_for_nodes(cmd, nodes, timeout: float):
    """Until the whole bringup (no names) or the named nodes are in the graph, or timeout."""
    import time

    from ..ros.commander import CommanderError
    if not nodes:
        try:
            cmd.wait_until_up(timeout=timeout)
        except CommanderError:
            pass   # describe what is there; a missing node is simply not on the page
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        present = {f'{ns.rstrip("/")}/{n}' for n, ns in cmd.node.get_node_names_and_namespaces()}
        if all(cmd.name(x) in present for x in nodes):
            return
        time.sleep(0.2)


def cmd_describe(args) -> int:
    from ..ros.commander import Commander, CommanderError, expected_graph
    with Commander(namespace=args.namespace, node_name='r2s2r_describe',
                   expected=expected_graph()) as cmd:
        try:
            _wait_for_nodes(cmd, args.nodes, args.wait)
            graph = describe_graph(cmd, args.nodes or None, timeout=args.wait)
        except LookupError as exc:
            print(f'r2s2r describe: {exc}', file=sys.stderr)
            return 1
        except (CommanderError, RuntimeError) as exc:
            print(f'r2s2r describe: {exc}', file=sys.stderr)
            return 2
    text = to_markdown(graph, _share())
    if args.markdown:
        from ..core.artifacts import atomic_write_text
        atomic_write_text(Path(args.markdown), text)
        print(f'r2s2r describe: wrote {args.markdown} ({len(graph)} nodes)')
    else:
        print(text, end='')
    return 0
