#!/usr/bin/env bash
# Runs a command with this repository's Python packages importable on a GPU machine that
# has no network and no uv (the lent accelerator): wheels carried in .whl/ (see
# scripts/gpu/README.md) go to /tmp/alnair-site, the workspace sources go on PYTHONPATH.
#   bash scripts/gpu/repo_env.sh python3 scripts/gpu/capture_device_plugin.py --out /tmp/x
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
site=${ALNAIR_REPO_SITE:-/tmp/alnair-site}
# Installed once per set of wheels: a warm machine given more wheels installs them too.
if [ -d "$root/.whl" ]; then
  wanted=$(ls "$root/.whl")
  if [ "$(cat "$site/.done" 2>/dev/null)" != "$wanted" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$site" "$root"/.whl/*.whl
    printf '%s' "$wanted" > "$site/.done"
  fi
fi
paths="$site:$root/proto"
for src in "$root"/libs/*/src "$root"/services/*/src; do paths="$paths:$src"; done
export PYTHONPATH="$paths${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$site/bin:$PATH"
export PYTHONUNBUFFERED=1
exec "$@"
