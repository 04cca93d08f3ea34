#!/usr/bin/env bash
# The wheels benchmarks/device_check.py needs on an accelerator machine whose image has CUDA PyTorch but no
# DeepSpeed, and no registry to fetch it from: DeepSpeed 0.19.8 and the pure-python packages it needs that such an
# image lacks (hjson; pydantic with its compiled core, for DeepSpeed's config and trainfleet's stack schema).
#
#   benchmarks/device_wheels.sh [DIR]        # default build/device-wheels (ignored by .gitignore's build/)
#
# Run here, from anywhere in the repository, with network to PyPI. DeepSpeed ships an sdist only; built with
# DS_BUILD_OPS=0 it compiles nothing and is pure python (no op is prebuilt, so none is tied to this machine's
# torch or CPU; the CUDA accelerator is picked at run time there). The others are downloaded for the device
# image's interpreter (CPython 3.12, manylinux x86-64) at the versions this venv's tests run with. The folder
# is a few MB, well inside what the device tool carries (64 MiB); the one command that uses it is in
# benchmarks/device_check.py's docstring.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
dir="${1:-build/device-wheels}"
python=.venv/bin/python
deepspeed_pin="deepspeed==0.19.8"

# The same versions as this venv: what the tests here ran DeepSpeed's config (pydantic) with.
pins=()
for name in hjson pydantic pydantic-core annotated-types typing-inspection typing-extensions; do
  pins+=("$name==$("$python" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")")
done

rm -rf "$dir"
mkdir -p "$dir"
DS_ACCELERATOR=cpu DS_BUILD_OPS=0 "$python" -m pip wheel -q --no-deps --no-build-isolation --no-cache-dir \
  "$deepspeed_pin" -w "$dir"
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$dir" "${pins[@]}"
ls -l "$dir"
du -sh "$dir"
