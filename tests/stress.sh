#!/usr/bin/env bash
# The suite on a busy machine: one spinning process per core (two on CI's 2 cores) keeps every
# core busy while pytest runs, as on a CI machine shared with other work. The spinners start
# here and are stopped here, however pytest ends (a failure, Ctrl-C, a kill of this script).
#
#   tests/stress.sh -n auto            # the default suite as CI runs it, under load
#   tests/stress.sh -m reliability     # any pytest arguments pass through
#   STRESS_SPINNERS=4 tests/stress.sh  # more load than cores
#
# Exit status: pytest's own (5 when it collected nothing).
set -uo pipefail
cd "$(dirname "$0")/.."

spinners="${STRESS_SPINNERS:-$(nproc)}"
pids=()
stop_spinners() {
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null
    done
    wait "${pids[@]}" 2>/dev/null
    pids=()
}
trap stop_spinners EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

for _ in $(seq "$spinners"); do
    # a busy loop in the shell itself: no interpreter to start, nothing to install
    ( trap - INT TERM HUP; while :; do :; done ) &
    pids+=("$!")
done
echo "stress: $spinners spinning processes (${pids[*]}) beside pytest on $(nproc) cores" >&2

start=$SECONDS
python -m pytest "$@"
status=$?
echo "stress: pytest exited $status after $((SECONDS - start)) s under load" >&2
exit "$status"
