"""Lint launch XML: well-formed, and every tag and substitution inside the runner's subset
(the same check `r2s2r launch --print` makes, without needing the nodes installed)."""
import sys
import xml.etree.ElementTree as ET

from real2sim2real_ros.launch_runner import LaunchError, parse_launch_file

failed = 0
for path in sys.argv[1:]:
    try:
        ET.parse(path)
        parse_launch_file(path, {})
    except (ET.ParseError, LaunchError) as exc:
        print(f'lint: {path}: {exc}', file=sys.stderr)
        failed += 1
    else:
        print(f'lint: {path}: ok')
sys.exit(1 if failed else 0)
