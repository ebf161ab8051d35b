#!/usr/bin/env bash
# Runs the C tests of one build variant.
#   run_tests.sh OUT_DIR [SANITIZER_RUNTIME] [CASE...]
# OUT_DIR holds testlib/libalnair_cuda.so, fake/ and tests/ (make tests). Each case of
# tests/cases.txt runs with a fresh workspace under OUT_DIR/workspaces/<case>
# (left in place: the Python region reader tests decode them), the test library
# preloaded (after the sanitizer runtime, which must come first), the fake driver on
# LD_LIBRARY_PATH and no fixed limits file (OUT_DIR/trusted/, the test library's
# container-mode path, is removed before each case and after the last; container cases
# write it, and a test library run by hand would otherwise take it for its fixed file).
# Prints one line per case; exits 1 if any failed.
set -u
out=$(cd "$1" && pwd)
rt=${2:-}
shift $(( $# > 1 ? 2 : 1 ))
here=$(cd "$(dirname "$0")" && pwd)
want=("$@")
failed=0
ran=0
while read -r name prog args; do
    [[ -z "$name" || "$name" == \#* ]] && continue
    if (( ${#want[@]} )) && [[ ! " ${want[*]} " == *" $name "* ]]; then continue; fi
    ws="$out/workspaces/$name"
    rm -rf "$ws" "$out/trusted" && mkdir -p "$ws"
    preload="$out/testlib/libalnair_cuda.so"
    [[ -n "$rt" ]] && preload="$rt $preload"
    case "$prog" in test_controller|test_limits_parse) preload="$rt" ;; esac
    start=$EPOCHREALTIME
    # shellcheck disable=SC2086
    env -u ALNAIR_VGPU_MEMORY_BYTES -u ALNAIR_VGPU_COMPUTE_PERCENT -u ALNAIR_WORKLOAD_ID \
        ALNAIR_WORKSPACE="$ws" LD_PRELOAD="$preload" LD_LIBRARY_PATH="$out/fake" \
        CI_TEST_BIN="$out/tests" CI_TEST_VARIANT="$(basename "$out")" \
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:verify_asan_link_order=0" \
        TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:die_after_fork=0" \
        UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
        "$out/tests/$prog" $args >"$ws/output.txt" 2>&1
    rc=$?
    secs=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b - a}')
    ran=$((ran + 1))
    if [[ $rc -eq 0 ]]; then
        echo "PASS $name (${secs}s)"
    else
        echo "FAIL $name (exit $rc, ${secs}s)"; sed 's/^/    /' "$ws/output.txt" | tail -40
        failed=$((failed + 1))
    fi
done < "$here/cases.txt"
rm -rf "$out/trusted"
echo "$((ran - failed))/$ran C test cases passed"
[[ $failed -eq 0 ]]
