#!/bin/sh
# The image's install steps, in one place: deploy/Dockerfile runs this script on the wheel its
# first stage builds, and CI (.ci/installed.py) runs it, on the wheel `python -m build` makes
# from the same files, into a clean virtual environment, then runs the installed daemon.
#   sh deploy/install.sh WHEEL          (installs with the `python` first on PATH)
set -eu
wheel=$1
# the serve extra (uvicorn, starlette, orjson, ...): the same install runs `streamtrain serve`;
# the compression extra (lz4, zstandard, python-snappy): topics compressed by their producers
python -m pip install --no-cache-dir "${wheel}[serve,compression]"
# numba's cache of the per-example kernels, compiled now beside the installed package (from a
# directory outside any source tree, so the installed package is the one imported): a
# container or a unit then loads them instead of compiling them at each start
cd /
python -m streamtrain.online.warm
