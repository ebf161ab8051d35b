#!/usr/bin/env bash
# On the GPU machine (no network, no Go, no apt): unpack the test servers carried in
# .gpu-carry/ (versitygw.xz; redis-server with the three libraries Debian links it against
# that an Ubuntu image may lack) into a test-binary directory and print it, for
# ALNAIR_TESTBIN. Made here with (see scripts/gpu/README.md):
#   mkdir -p .gpu-carry/redis && xz -c "$(scripts/testbin | tail -1)/versitygw" > .gpu-carry/versitygw.xz
#   cp /usr/bin/redis-server /lib/x86_64-linux-gnu/{libjemalloc.so.2,liblzf.so.1,libatomic.so.1} .gpu-carry/redis/
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-/tmp/alnair-testbin}
mkdir -p "$bin/lib"
[ -x "$bin/versitygw" ] || { xz -dc "$root/.gpu-carry/versitygw.xz" > "$bin/versitygw"; chmod +x "$bin/versitygw"; }
if [ -f "$root/.gpu-carry/redis/redis-server" ]; then
  cp "$root"/.gpu-carry/redis/* "$bin/lib/"
  chmod +x "$bin/lib/redis-server"
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/lib exec %s/lib/redis-server "$@"\n' "$bin" "$bin" > "$bin/redis-server"
  chmod +x "$bin/redis-server"
fi
echo "$bin"
