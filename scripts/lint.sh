#!/usr/bin/env bash
# Lint inside `make test`: ruff, package.xml (catkin_pkg, as rosdep and colcon read it), launch XML.
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check .
python - <<'PY'
import sys
from pathlib import Path

from catkin_pkg.package import parse_package

for xml in sorted([*Path('.').glob('*/package.xml'), *Path('.').glob('stand_ins/*/package.xml')]):
    pkg = parse_package(xml.parent)  # raises on anything rosdep/colcon would reject
    pkg.validate()
    print(f'lint: {xml}: {pkg.name} {pkg.version} ok')
PY
python scripts/lint_launch.py real2sim2real_ros/launch/*.launch.xml
