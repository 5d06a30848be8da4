"""A real rclpy node for the launch runner tests: it reports what rcl made of its command
line (node name, namespace, parameters with their types) as one JSON line, then exits 0."""
import json
import sys

import rclpy
from rclpy.node import Node


def main() -> int:
    rclpy.init(args=sys.argv)
    try:
        node = Node('echo_default', automatically_declare_parameters_from_overrides=True)
        params = {name: [p.value, type(p.value).__name__]
                  for name, p in node.get_parameters_by_prefix('').items()
                  if name not in ('use_sim_time', 'start_type_description_service')}
        print(json.dumps({'name': node.get_name(), 'namespace': node.get_namespace(),
                          'params': params,
                          'remapped': node.resolve_topic_name('joint_states')}), flush=True)
        node.destroy_node()
    finally:
        rclpy.try_shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
