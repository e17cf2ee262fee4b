#!/usr/bin/env bash
# `make test`, phase by phase, each timed; the table of phases and their durations is printed at the
# end (and on failure, up to the phase that failed). What it runs:
#
#   prewarm      in the background once the venv is there: tests/tools/podman_image.sh (podman from Debian, the
#                Debian rootfs by debootstrap, the molecule image), then tests/tools/operator_image.sh (the
#                operator image on it, for the end-to-end test) -- network and disk bound, so it
#                overlaps the Debian packages, lint and type check instead of stalling the first
#                container test; the tests that need it wait on its lock. Its output: tests/.build/prewarm.log
#   setup        the venv with the development toolchain (make setup)
#   system-deps  Debian packages the integration tests need (make system-deps)
#   stubs        the gcc-built vendor stand-ins (make stubs)
#   lint         ruff check + format --check (make lint)
#   typecheck    mypy (make typecheck)
#   pytest       the whole suite; it prints its own per-file durations at the end (tests/conftest.py)
#
# Everything slow is cached per machine (tests/tools/cache_dir.sh), so a second run on the same
# machine -- a clean clone included -- skips debootstrap, the wheel downloads and the lowest-core venv.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
MAKE=${MAKE:-make}
mkdir -p tests/.build
PHASES=tests/.build/phases.txt
: >"$PHASES"
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
seconds() { local ms=$(( $(now_ms) - $1 )); printf '%d.%d' $(( ms / 1000 )) $(( ms % 1000 / 100 )); }
start=$(now_ms)
prewarm_pid=

record() { printf '%-12s %8s s  %s\n' "$1" "$2" "$3" >>"$PHASES"; }
table() {
    echo "==> phases (tests/.build/phases.txt):"
    cat "$PHASES"
    printf '%-12s %8s s\n' "total" "$(seconds "$start")"
}
trap table EXIT

phase() {
    local name=$1 t0 rc
    shift
    echo "==> $name: $*"
    t0=$(now_ms)
    "$@"
    rc=$?
    record "$name" "$(seconds "$t0")" "$([ $rc -eq 0 ] && echo ok || echo "exit $rc")"
    if [ $rc -ne 0 ]; then
        [ -n "$prewarm_pid" ] && wait "$prewarm_pid"
        exit $rc
    fi
    return 0
}

phase setup "$MAKE" --no-print-directory setup
# after setup: the image build takes the containers.podman collection out of a wheel with .venv's pip
if [ "$(id -u)" -eq 0 ] && [ -z "${GPUSTACK_NO_PREWARM:-}" ]; then
    (
        t0=$(now_ms)
        # then the operator image on it (tests/cluster/test_end_to_end.py loads it into the cluster)
        if bash tests/tools/podman_image.sh >tests/.build/prewarm.log 2>&1 &&
            bash tests/tools/operator_image.sh >>tests/.build/prewarm.log 2>&1; then rc=ok; else
            rc="failed (tests/.build/prewarm.log; the tests that need it run it again and report)"
        fi
        record prewarm "$(seconds "$t0")" "in the background: $rc"
    ) &
    prewarm_pid=$!
fi

phase system-deps "$MAKE" --no-print-directory system-deps
phase stubs "$MAKE" --no-print-directory stubs
phase lint "$MAKE" --no-print-directory lint
phase typecheck "$MAKE" --no-print-directory typecheck
# pytest starts whether or not the background build is done: the tests that need its image wait on
# its lock, the others run meanwhile
phase pytest "${VENV:-.venv}/bin/pytest" -q
[ -n "$prewarm_pid" ] && wait "$prewarm_pid"
exit 0
