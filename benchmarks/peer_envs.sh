#!/usr/bin/env bash
# The two pythons benchmarks/side_by_side.py runs the other trainers with, built beside their checkouts:
#   bash benchmarks/peer_envs.sh SD_SCRIPTS_CHECKOUT OUT_FOLDER
# OUT_FOLDER/venv-diffusers: for the diffusers examples (which need the diffusers, transformers and peft Atelier
#   uses): .venv's packages plus torchvision, datasets and the few image/text packages the examples import.
# OUT_FOLDER/venv-sd-scripts: the same base, with the versions sd-scripts' requirements.txt pins for the libraries
#   it imports (accelerate, transformers, huggingface-hub, diffusers, safetensors, einops, ...): it imports names
#   that transformers 5 removed. Its optimizer extras (bitsandbytes, lion, prodigy, schedulefree) are left out: the
#   benchmark trains with torch's AdamW.
# Both see .venv's site-packages through a .pth file (torch is not installed twice); their own packages come first.
# torchvision is the CUDA wheel of the version that matches torch; its C++ ops cannot load against a CPU torch and
# neither trainer calls them, so its two fake-kernel registrations (which look the ops up at import) are skipped.
set -euo pipefail
[ $# = 2 ] || { echo "usage: bash benchmarks/peer_envs.sh SD_SCRIPTS_CHECKOUT OUT_FOLDER" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
pins=$1/requirements.txt
[ -f "$pins" ] || { echo "peer_envs.sh: $pins not found: give an sd-scripts checkout" >&2; exit 2; }
mkdir -p "$2" && out=$(cd "$2" && pwd)
base=$("$repo/.venv/bin/python" -c 'import sys; print(sys._base_executable)')
site=$("$repo/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
torchvision=${TORCHVISION:-torchvision==0.28.0}  # the release built against torch 2.13

pin() {  # "name==version" as sd-scripts' requirements.txt pins it
  local line
  line=$(grep -iE "^$1(\[[a-z]+\])?==" "$pins" | head -1) || { echo "peer_envs.sh: $pins pins no $1" >&2; exit 1; }
  echo "$1==${line#*==}"
}

make_env() {  # folder, then its packages
  local env=$out/$1; shift
  [ -x "$env/bin/python" ] || "$base" -m venv "$env"
  local own
  own=$("$env/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$site" > "$own/atelier-venv.pth"
  "$env/bin/python" -m pip install --quiet --no-deps "$torchvision"
  "$env/bin/python" -m pip install --quiet "$@"
  sed -i -E 's/^@torch\.library\.register_fake\("torchvision::(q?nms)"\)$/@(lambda f: f)  # \1: its op cannot load here/' \
    "$own/torchvision/_meta_registrations.py"
  "$env/bin/python" -c 'import torchvision.transforms' || { echo "peer_envs.sh: torchvision does not import in $env" >&2; exit 1; }
}

make_env venv-diffusers opencv-python-headless voluptuous imagesize ftfy datasets
make_env venv-sd-scripts "$(pin accelerate)" "$(pin transformers)" "$(pin huggingface-hub)" "$(pin diffusers)" \
  "$(pin safetensors)" "$(pin einops)" "$(pin ftfy)" "$(pin voluptuous)" "$(pin imagesize)" "$(pin toml)" \
  "opencv-python-headless==$(pin opencv-python | cut -d= -f3)"
for env in venv-diffusers venv-sd-scripts; do
  echo "$out/$env/bin/python:"
  "$out/$env/bin/python" -c 'import accelerate, diffusers, huggingface_hub, torch, transformers
print("  torch", torch.__version__, "accelerate", accelerate.__version__, "transformers", transformers.__version__,
      "huggingface-hub", huggingface_hub.__version__, "diffusers", diffusers.__version__)'
done
