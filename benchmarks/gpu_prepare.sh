#!/usr/bin/env bash
# The Python packages our trainers import that the GPU machine's python lacks, as wheels: downloaded here (that
# machine reaches no network), carried with the call (carry [".gpu_wheels"]) and installed there, offline.
#   bash benchmarks/gpu_prepare.sh             # here: download them into .gpu_wheels/ (versions: requirements.txt)
#   bash benchmarks/gpu_prepare.sh --install   # there: install them into its python3, no index, no dependencies
# The machine (docs/performance.md, GPU) has torch, accelerate, transformers 5.x, safetensors, tokenizers,
# sentencepiece, numpy, pillow, einops, pyyaml and tqdm; what it lacks is mostly pure Python (a few MB; DeepSpeed's
# dependencies add msgpack, ninja, psutil and pydantic_core binaries for python 3.12). Not carried:
# torch (its CUDA build is there), bitsandbytes (a 60 MB binary: the 8-bit optimizers stay untested there), gradio
# (the GUI needs no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=.gpu_wheels
python=${PYTHON:-python3}
# wheels of these, at requirements.txt's pins
CARRY=(diffusers peft toml tomlkit lycoris-lora prodigyopt schedulefree came-pytorch)
# published as source only: built into a wheel here (pure Python; DeepSpeed without its ops, compiled on first use)
BUILD=(dadaptation deepspeed)
# what DeepSpeed imports (its dependencies, not pinned in requirements.txt): at the versions this venv runs
DEEPSPEED_DEPS=(hjson msgpack ninja py-cpuinfo pydantic pydantic_core annotated-types typing-inspection psutil)

pin() {
  local spec
  spec=$(grep -iE "^$1==" requirements.txt) || { echo "gpu_prepare.sh: $1 is not pinned in requirements.txt" >&2; exit 1; }
  echo "$spec"
}

if [ "${1:-}" = "--install" ]; then
  shopt -s nullglob
  found=("$wheels"/*.whl)
  if [ ${#found[@]} = 0 ]; then
    echo "gpu_prepare.sh: no wheels in $wheels: run 'bash benchmarks/gpu_prepare.sh' where pip reaches an index, and carry $wheels" >&2
    exit 1
  fi
  "$python" -m pip install --quiet --no-index --no-deps --no-cache-dir --disable-pip-version-check "${found[@]}"
  echo "installed ${#found[@]} wheels into $("$python" -c 'import sys; print(sys.prefix)')"
  exit 0
fi
if [ -n "${1:-}" ]; then
  echo "gpu_prepare.sh: unknown argument '$1' (none: download here; --install: install there)" >&2
  exit 2
fi

pip=("$python" -m pip)
[ -x .venv/bin/python ] && pip=(.venv/bin/python -m pip)
rm -rf "$wheels"
mkdir -p "$wheels"
specs=()
for name in "${CARRY[@]}"; do specs+=("$(pin "$name")"); done
for name in "${DEEPSPEED_DEPS[@]}"; do
  specs+=("$name==$("${pip[0]}" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$name")")
done
"${pip[@]}" download --quiet --no-deps --python-version 3.12 --only-binary=:all: -d "$wheels" "${specs[@]}"
for name in "${BUILD[@]}"; do
  "${pip[@]}" wheel --quiet --no-deps -w "$wheels" "$(pin "$name")"
done
ls -1 "$wheels"
du -sh "$wheels"
