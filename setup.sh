#!/usr/bin/env bash
# Creates .venv and installs everything pinned in requirements.txt. Safe to run again.
#   bash setup.sh          the app and trainers (no root needed)
#   bash setup.sh --dev    also the test tools (pytest, playwright); as root it apt-installs chromium
set -euo pipefail
cd "$(dirname "$0")"

dev=0
for arg in "$@"; do
  case "$arg" in
    --dev) dev=1 ;;
    *) echo "setup.sh: unknown argument '$arg' (use --dev for the test tools)" >&2; exit 2 ;;
  esac
done

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "setup.sh: Python 3.10 or newer is needed ($python is $("$python" --version 2>&1))." >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  echo "Creating .venv with $("$python" --version)"
  "$python" -m venv .venv
fi

stamp=.venv/.installed-$(cat requirements.txt $( [ $dev = 1 ] && echo requirements-dev.txt ) | sha1sum | cut -c1-12)
if [ -f "$stamp" ]; then
  echo "Dependencies already installed (.venv is up to date)."
else
  # torch first and alone, by its exact pin, so no other package can pull a different build.
  .venv/bin/python -m pip install --quiet "$(grep -E '^torch==' requirements.txt)"
  .venv/bin/python -m pip install --quiet -r requirements.txt
  [ $dev = 1 ] && .venv/bin/python -m pip install --quiet -r requirements-dev.txt
  touch "$stamp"
fi

if [ $dev = 1 ] && [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "Installing Debian's chromium for the browser tests"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "note: /usr/bin/chromium is missing; browser tests will be skipped (install the 'chromium' package)."
  fi
fi
echo "Setup done."
