#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# build_venv.sh PYTHON SRC VENV STAMP DEPFILE: the test environment of the torch backend,
# made once per build directory: VENV (a venv of PYTHON with its site packages, so Debian's
# torch) with gradsync_torch pip-installed from SRC (python/), as README.md says a user
# does. The objects stay in VENV.build, so a rebuild compiles only what changed; DEPFILE
# lists every header they include, so that ninja rebuilds the
# venv when a gradsync header changes.
set -euo pipefail
py=${1:?python} src=${2:?python/ source} venv=${3:?venv} stamp=${4:?stamp} depfile=${5:?depfile}
[ -x "$venv/bin/python" ] || "$py" -m venv --system-site-packages "$venv"
GRADSYNC_TORCH_BUILD_DIR="$venv.build" "$venv/bin/pip" install --no-build-isolation --no-deps \
  --no-index --disable-pip-version-check --quiet "$src"
(cd / && "$venv/bin/python" -c "import gradsync_torch")  # not the source tree's copy
# The extension's own ninja keeps what each object includes in its .ninja_deps.
{
  printf '%s:' "$stamp"
  for d in "$venv.build"/temp.*; do
    ninja -C "$d" -t deps 2>/dev/null | sed -n 's/^    / /p' | sort -u | tr -d '\n'
  done
  echo
} >"$depfile"
touch "$stamp"
