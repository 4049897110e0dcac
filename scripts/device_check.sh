#!/usr/bin/env bash
# The GPU check (docs/gpu.md, "The device check"): on one H100 or H200 whose python3 has torch, transformers,
# peft, accelerate and pytest but none of the project's other packages and no hub, in under 8 minutes:
#   wheels     the wheels of --wheels (scripts/prepare_device_wheels.sh fetched them here beforehand) installed
#              into a --target folder put on PYTHONPATH, then the check's imports tried;
#   pytest     pytest -m "gpu and not slow" tests/test_engine_gpu.py (no vLLM there: its tests skip, saying why);
#   generation perf/generation.py at the Qwen2-7B shape in bf16, random weights: base vs a batch mixing 8 rank-16
#              adapters on all linear modules (and adapter by adapter);
#   probe      perf/update_probe.py at the Qwen2-7B shape: the paper overlay's update, peak memory and seconds;
# each step under a time limit, writing into --out: device_check.json (every step's exit code, seconds, command
# and output tail; the device and versions), generation_7b_bf16.json, update_probe_7b.json, device_check.log.
#
#   bash scripts/prepare_device_wheels.sh                  # here, once: .device-wheels/ (git-ignored, < 64 MiB)
#   device tool: run(command="bash scripts/device_check.sh --out $OUT", carry=[".device-wheels"], timeout_s=540)
#                then copy what comes back into perf/measured/ and commit it
#   bash scripts/device_check.sh --cpu --out /tmp/check    # here: the same steps at a tiny shape on the CPU
#
# --cpu: the wiring, on this machine (tests/test_device_check.py): tiny shapes, bf16 on the CPU, the GPU tests
# skip. --out DIR: default perf/measured (with --cpu a new temporary folder, so committed figures stay).
# --wheels DIR: default .device-wheels; none there: nothing installed. PYTHON: default python3.
# Exit status: 0 when every step passed, else 1 (device_check.json says which).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
mode=gpu out="" wheels=.device-wheels
while [ $# -gt 0 ]; do
  case $1 in
    --cpu) mode=cpu ;;
    --out) out=$2; shift ;;
    --wheels) wheels=$2; shift ;;
    *) echo "unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
  shift
done
PYTHON=${PYTHON:-python3}
[ -n "$out" ] || { [ $mode = cpu ] && out=$(mktemp -d) || out=perf/measured; }
mkdir -p "$out" && out=$(cd "$out" && pwd)
steps=$(mktemp -d)
site=$(mktemp -d)
trap 'rm -rf "$steps" "$site"' EXIT
export PYTHONPATH="$site:$repo${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1  # no plugin is needed; the image's own (xdist, cov ...) stay out of the way
export DEVICE_IMAGE_ALLOW=$site  # tests/fixtures/device_image: what the wheels provide is not hidden
log=$out/device_check.log
: > "$log"

step() {  # NAME LIMIT_S COMMAND...: run under a time limit; its exit code, seconds and output kept for the summary
  local name=$1 limit=$2 start rc
  shift 2
  echo "== $name (at most ${limit} s): $*" | tee -a "$log"
  start=$(date +%s%N)
  timeout --kill-after=10 "$limit" "$@" > "$steps/$name.out" 2>&1
  rc=$?
  cat "$steps/$name.out" >> "$log"
  local command="$*"
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s%N) - start ))" "${command//$'\n'/; }" >> "$steps/summary.tsv"
  echo "== $name: exit $rc" | tee -a "$log"
}

if compgen -G "$wheels/*.whl" > /dev/null; then
  step wheels 120 "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "$wheels"/*.whl
else
  echo "no wheels in $wheels: nothing installed (scripts/prepare_device_wheels.sh fetches them)" | tee -a "$log"
fi
step imports 120 "$PYTHON" -c "import torch, transformers, peft, accelerate, pytest, yaml, pydantic
import populora.config, populora.lm.multilora, populora.lm.sampling, populora.rl.update
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'device', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)"

if [ $mode = gpu ]; then
  shape=qwen2-7b device=cuda
  generation=(--batch 64 --adapters 8 --rank 16 --tokens 64 --prompt-tokens 128 --repeats 3)
  probe=(--runs 8x1024,1x8192)
  limits=(150 180 150)  # pytest, generation, probe: 480 s at most with the steps above
else
  shape=tiny device=cpu
  generation=(--batch 8 --adapters 4 --rank 4 --tokens 8 --prompt-tokens 16 --repeats 1)
  probe=(--runs 2x32,1x64)
  limits=(600 600 600)  # a shared CPU: the wiring is checked, not the time
fi
step pytest "${limits[0]}" "$PYTHON" -m pytest -m "gpu and not slow" -rs -p no:cacheprovider tests/test_engine_gpu.py
step generation "${limits[1]}" "$PYTHON" perf/generation.py --shape $shape --device $device --dtype bfloat16 \
  --targets all "${generation[@]}" --json "$out/generation_7b_bf16.json"
step probe "${limits[2]}" "$PYTHON" perf/update_probe.py --shape $shape --device $device "${probe[@]}" \
  --json "$out/update_probe_7b.json"

"$PYTHON" - "$steps/summary.tsv" "$out/device_check.json" "$mode" "$steps" "$wheels" <<'PY'
import glob, json, os, sys
from datetime import datetime, timezone
summary, path, mode, steps, wheels = sys.argv[1:]
rows = [line.rstrip("\n").split("\t", 3) for line in open(summary)]
record = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "mode": mode,
          "command": f"bash scripts/device_check.sh{' --cpu' if mode == 'cpu' else ''}",
          "wheels": sorted(os.path.basename(w) for w in glob.glob(os.path.join(wheels, "*.whl"))), "steps": []}
for name, rc, seconds, command in rows:  # seconds: nanoseconds here
    tail = open(os.path.join(steps, name + ".out"), errors="replace").read()[-3000:]
    record["steps"].append({"name": name, "exit": int(rc), "seconds": round(int(seconds) / 1e9, 1), "command": command,
                            "output_tail": tail})
try:
    import torch
    record["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    record["versions"] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    for name in ("transformers", "peft", "accelerate", "pytest", "pydantic"):
        record["versions"][name] = __import__(name).__version__
except Exception as error:  # noqa: BLE001  (the summary is written whatever failed)
    record["versions_error"] = repr(error)
record["passed"] = all(step["exit"] == 0 for step in record["steps"])
record["seconds"] = round(sum(step["seconds"] for step in record["steps"]), 1)
open(path, "w").write(json.dumps(record, indent=1) + "\n")
print(f"device check ({mode}): {'passed' if record['passed'] else 'FAILED'} in {record['seconds']} s; "
      + ", ".join(f"{s['name']} {s['exit']} ({s['seconds']} s)" for s in record["steps"]))
sys.exit(0 if record["passed"] else 1)
PY
