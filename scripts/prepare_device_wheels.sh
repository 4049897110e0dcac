#!/usr/bin/env bash
# Fetch, here, the wheels scripts/device_check.sh installs on the GPU machine, whose image lacks them
# (scripts/device_image.txt): the distributions of scripts/device_wheels.txt at requirements.lock's versions,
# built for the machine's CPython 3.12 on manylinux x86_64. No dependencies are fetched: the list is the whole
# set the check needs beyond the image (tests/test_device_check.py checks it against an emulated image).
#
#   bash scripts/prepare_device_wheels.sh [DIR]     # default .device-wheels (git-ignored); then, on the device:
#   run(command="bash scripts/device_check.sh --out $OUT", carry=[".device-wheels"])
#
# PYTHON_VERSION (default 3.12) fetches another interpreter's wheels (the tests fetch this machine's); PYTHON
# (default python3) runs pip. Fails when a distribution is not in requirements.lock, has no such wheel, or the
# folder passes 32 MiB: a device call carries at most 64 MiB with the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.device-wheels}
PYTHON=${PYTHON:-python3}
pins=()
while read -r line; do
  name=${line%%#*}
  name=${name//[[:space:]]/}
  [ -n "$name" ] || continue
  pin=$(grep -i -E "^${name//-/[-_]}==" requirements.lock | head -1) || { echo "$name: not in requirements.lock" >&2; exit 1; }
  pins+=("$pin")
done < scripts/device_wheels.txt
rm -rf "$dir" && mkdir -p "$dir"
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version "${PYTHON_VERSION:-3.12}" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$dir" "${pins[@]}"
count=$(find "$dir" -name '*.whl' | wc -l)
[ "$count" -eq "${#pins[@]}" ] || { echo "$count wheels for ${#pins[@]} distributions in $dir" >&2; exit 1; }
bytes=$(du -sb "$dir" | cut -f1)
[ "$bytes" -le $((32 * 1024 * 1024)) ] || { echo "$dir holds $bytes bytes: over 32 MiB" >&2; exit 1; }
echo "$count wheels, $((bytes / 1024)) KiB in $dir: ${pins[*]}"
