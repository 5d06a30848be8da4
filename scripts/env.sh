#!/usr/bin/env bash
# Source this file (or run `scripts/env.sh CMD ...`) for a shell with the venv, the built
# workspace and DDS confined to this machine.
_r2s2r_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck disable=SC1091
source "$_r2s2r_root/.venv/bin/activate"
# install/setup.bash rewrites AMENT_PREFIX_PATH; keep the venv on it (its share/ holds the wheels).
# shellcheck disable=SC1091
source "$_r2s2r_root/install/setup.bash"
export AMENT_PREFIX_PATH="$AMENT_PREFIX_PATH:$_r2s2r_root/.venv"
export PATH="$_r2s2r_root/install/real2sim2real_ros/lib/real2sim2real_ros:$PATH"
export ROS_AUTOMATIC_DISCOVERY_RANGE=${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}
export MUJOCO_GL=${MUJOCO_GL:-egl}
export PYOPENGL_PLATFORM=${PYOPENGL_PLATFORM:-egl}
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then exec "$@"; fi
