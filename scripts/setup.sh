#!/usr/bin/env bash
# make setup: Debian packages (when missing), the pinned venv, then a colcon build of both packages.
# Idempotent: every step is skipped when its inputs have not changed since it last succeeded.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VENV:-$ROOT/.venv}
PYTHON=${PYTHON:-}
UV_VERSION=0.13.9

log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# --- Debian packages --------------------------------------------------------------------------
# libusb: open3d-cpu's pybind module links it. cmake/g++: the interface package. The Mesa EGL
# libraries let MuJoCo render offscreen on the CPU (MUJOCO_GL=egl).
DEB_PKGS=(libusb-1.0-0 cmake g++ make libegl1 libgl1 libgles2 libegl-mesa0 libgl1-mesa-dri)
missing=()
for p in "${DEB_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) == 0 ]]; then
    log "installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "[setup] missing Debian packages: ${missing[*]}" >&2
    echo "[setup] run: sudo apt-get install -y ${missing[*]}   (then run make setup again)" >&2
    exit 1
  fi
fi

# --- Python 3.11 venv with every pin ------------------------------------------------------------
if [[ -z $PYTHON ]]; then
  for c in python3.11 python3; do
    if command -v "$c" >/dev/null && "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      PYTHON=$(command -v "$c"); break
    fi
  done
fi
[[ -n $PYTHON ]] || { echo "[setup] Python 3.11 is required (the ROS 2 Kilted wheels are cp311)" >&2; exit 1; }

# The stamp covers the bytecode too: a venv installed before it was compiled is installed
# (and compiled) once more.
req_hash=$( (sha256sum requirements.txt; echo "bytecode: compiled") | sha256sum | cut -d' ' -f1)
stamp=$VENV/.requirements.sha256
if [[ ! -x $VENV/bin/python ]] || [[ ! -f $stamp ]] || [[ $(cat "$stamp") != "$req_hash" ]]; then
  log "creating $VENV with $PYTHON and installing requirements.txt"
  [[ -x $VENV/bin/python ]] || "$PYTHON" -m venv "$VENV"
  # uv (pinned) installs the pinned set in ~20 s where pip took ~3 min on a fresh machine,
  # with pip's own index, find-links and constraint settings (scripts/uv_args.py). pip
  # installs it when uv cannot. Both compile the bytecode up front (uv: --compile-bytecode,
  # ~20 s more): where PYTHONDONTWRITEBYTECODE is set (this machine sets it for every process)
  # nothing else writes it, and every process compiles what it imports (about 3 s of the 6 s
  # of CPU that importing torch, open3d, scipy and mujoco takes; docs/results.md).
  if "$VENV/bin/python" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION" &&
     mapfile -t uv_opts < <("$VENV/bin/python" scripts/uv_args.py) && ((${#uv_opts[@]})) &&
     "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" "${uv_opts[@]}" \
       --compile-bytecode -r requirements.txt
  then
    log "installed requirements.txt with uv $UV_VERSION"
  else
    log "uv could not install requirements.txt; installing with pip"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt
  fi
  echo "$req_hash" > "$stamp"
else
  log "venv up to date"
fi

# --- interface stand-ins -----------------------------------------------------------------------
# stand_ins/<pkg> (control_msgs, moveit_msgs) is built only where no real <pkg> is importable
# from the venv or a sourced ROS underlay (scripts/stand_ins.py decides and says why). Where the
# real one is there, a stand-in built earlier is removed from install/ so it can never shadow it.
stand_in_out=$("$VENV/bin/python" scripts/stand_ins.py --root "$ROOT")
read -r -a stand_ins <<< "${stand_in_out//$'\n'/ }"
for dir in stand_ins/*/; do
  name=$(basename "$dir")
  if [[ " ${stand_ins[*]} " != *" $name "* ]] && [[ -d install/$name || -d build/$name ]]; then
    log "removing the $name stand-in from install/ (the real package wins)"
    rm -rf "install/$name" "build/$name"
    rm -f install/.source.sha256
  fi
done
stand_in_paths=()
for name in "${stand_ins[@]}"; do stand_in_paths+=("stand_ins/$name"); done

# --- colcon build -------------------------------------------------------------------------------
# rosidl finds its typesupports through AMENT_PREFIX_PATH: the venv is the prefix of the wheels.
src_hash=$( (echo "stand-ins: ${stand_ins[*]}"
  find real2sim2real_msgs real2sim2real_ros stand_ins -type f \
  -not -path '*/__pycache__/*' -not -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -d' ' -f1)
bstamp=install/.source.sha256
if [[ -f $bstamp ]] && [[ $(cat "$bstamp") == "$src_hash" ]]; then
  log "build up to date"
  exit 0
fi
log "colcon build"
(
  # shellcheck disable=SC1091
  source "$VENV/bin/activate"
  export AMENT_PREFIX_PATH="$VENV${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}"
  colcon --log-base log build --base-paths real2sim2real_msgs real2sim2real_ros \
    "${stand_in_paths[@]}" \
    --cmake-args -DPython3_EXECUTABLE="$VENV/bin/python" -DBUILD_TESTING=OFF
  # The built packages' bytecode, for the same reason as the venv's.
  python -m compileall -q -j 0 install
)
echo "$src_hash" > "$bstamp"
log "done"
