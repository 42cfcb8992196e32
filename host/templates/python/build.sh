#!/bin/sh
# Builds {{name}}.wasm from src/. The first run makes the virtualenv .venv
# and installs requirements.txt into it (the SDK and the componentize-py it
# pins), again whenever requirements.txt changes; nothing is installed
# outside this directory.
set -eu
cd "$(dirname "$0")"
if [ ! -f .venv/.installed ] || [ requirements.txt -nt .venv/.installed ]; then
  python3 -m venv .venv || {
    echo "build.sh: python3 -m venv failed (on Debian and Ubuntu: apt-get install python3-venv)" >&2
    exit 1
  }
  .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
  touch .venv/.installed
fi
# componentize-py imports the sources at build time with its own CPython,
# which leaves __pycache__ in each directory it reads (whatever
# PYTHONDONTWRITEBYTECODE says): it reads a copy. VIRTUAL_ENV tells it where
# the SDK is installed.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
tar -C src --exclude=__pycache__ -cf - . | tar -C "$stage" -xf -
mkdir "$stage/out"
VIRTUAL_ENV=$PWD/.venv .venv/bin/componentize-py --quiet -d wit -w tool-provider \
  componentize app -p "$stage" -o "$stage/out/{{name}}.wasm"
mv -f "$stage/out/{{name}}.wasm" {{name}}.wasm
echo "built {{name}}.wasm"
