#!/bin/bash
# The live identify stage (the live fixture of test_object_identification_integration.py:
# emulated bringup, default cell, 2 arm + 3 strike probes), two checkouts alternated, each
# with its own install (bash scripts/setup.sh in each). Usage:
#   OLD=/path/to/main NEW=/path/to/work OUT=/tmp/identify_ab bash results/identify_time/live_ab.sh
# Prints each run's stage time and profile; each run's folder stays under $OUT.
set -u
OUT=${OUT:-/tmp/identify_ab}
mkdir -p "$OUT"
for i in 1 2; do
  for tree in "$OLD" "$NEW"; do
    cd "$tree"
    b="$OUT/$(basename "$tree")_$i"
    rm -rf "$b"
    scripts/env.sh python -m pytest -p no:cacheprovider -o addopts="" -q -s \
      real2sim2real_ros/test/integration/test_object_identification_integration.py \
      --basetemp="$b" -k live_strikes > "$b.log" 2>&1
    echo "== $tree run $i: $(grep -a 'identify: done in' "$b.log" | sed 's/.*done in/done in/' | cut -c1-20) | $(tail -1 "$b.log")"
    grep -a "^identify profile" "$b.log"
  done
done
