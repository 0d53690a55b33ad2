#!/usr/bin/env bash
# tests/lint/spdx_check.sh ROOT: every tracked C++/CUDA source names its licence in its
# first line ("// SPDX-License-Identifier: Apache-2.0"; LICENSE holds the text). The
# docs' verbatim examples (tests/fusion/readme_fusion_example.cpp, tests/torch/
# doc_example.cpp) are exempt: they must match docs/fusion.md and docs/torch.md line for
# line. Skipped (exit 77) outside a git checkout.
set -uo pipefail
root=${1:?root}
cd "$root" || exit 1
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || { echo "not a git checkout"; exit 77; }
[ -f LICENSE ] || { echo "FAIL: no LICENSE file"; exit 1; }
missing=0 n=0
while IFS= read -r f; do
  case $f in tests/fusion/readme_fusion_example.cpp | tests/torch/doc_example.cpp) continue ;; esac
  n=$((n + 1))
  if ! head -1 "$f" | grep -q '^// SPDX-License-Identifier: Apache-2.0$'; then
    echo "missing SPDX line: $f"
    missing=$((missing + 1))
  fi
done < <(git ls-files '*.hpp' '*.ipp' '*.cpp' '*.cu' '*.cuh' '*.h')
echo "$((n - missing)) of $n sources carry the SPDX line"
[ "$missing" -eq 0 ]
