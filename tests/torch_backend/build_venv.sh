#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# build_venv.sh PYTHON SRC VENV STAMP: the test environment of the torch backend, made once
# per build directory: VENV (a venv of PYTHON with its site packages, so Debian's torch)
# with gradsync_torch pip-installed from SRC (python/), as README.md says a user does.
# The objects stay in VENV.build, so a rebuild compiles only what changed.
set -euo pipefail
py=${1:?python} src=${2:?python/ source} venv=${3:?venv} stamp=${4:?stamp}
[ -x "$venv/bin/python" ] || "$py" -m venv --system-site-packages "$venv"
GRADSYNC_TORCH_BUILD_DIR="$venv.build" "$venv/bin/pip" install --no-build-isolation --no-deps \
  --no-index --disable-pip-version-check --quiet "$src"
(cd / && "$venv/bin/python" -c "import gradsync_torch")  # not the source tree's copy
touch "$stamp"
