#!/bin/sh
# sanitize.sh - what `make sanitize` runs (NVIDIA): the GPU sweep (`test_gpu --quick`, every
# test) under compute-sanitizer's memcheck, racecheck and synccheck. Each tool's run splits the
# tests into SANITIZE_GROUPS processes that share the GPU (the whole sweep under racecheck in one
# process takes far longer than the groups side by side). Logs go to LOG; one line per tool
# and group; exits non-zero when any run reports an error, a hazard, a failed check or no
# summary.
#   sh tests/sanitize.sh TEST_GPU [LOG]      (environment: SANITIZER, SANITIZE_TOOLS, SANITIZE_GROUPS, QUICK)
set -u
TEST_GPU=${1:?usage: sanitize.sh path/to/test_gpu [log dir]}
LOG=${2:-$(dirname "$TEST_GPU")/sanitize-logs}
SANITIZER=${SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
SANITIZE_TOOLS=${SANITIZE_TOOLS:-memcheck racecheck synccheck}
SANITIZE_GROUPS=${SANITIZE_GROUPS:-6}
QUICK=${QUICK---quick} # QUICK= (empty) runs the full sweep
[ -x "$SANITIZER" ] || { echo "sanitize.sh: no compute-sanitizer (set SANITIZER=)"; exit 1; }
mkdir -p "$LOG"
tests=$("$TEST_GPU" --list) || { echo "sanitize.sh: $TEST_GPU --list failed"; exit 1; }

bad=0
for tool in $SANITIZE_TOOLS; do
    g=0
    while [ $g -lt "$SANITIZE_GROUPS" ]; do # group g: the tests at positions g, g + SANITIZE_GROUPS, ...
        names=$(echo "$tests" | awk -v n="$SANITIZE_GROUPS" -v g=$g '(NR - 1) % n == g')
        # shellcheck disable=SC2086 # QUICK (maybe empty) and the names split into arguments
        [ -n "$names" ] && "$SANITIZER" --tool "$tool" --print-limit 20 "$TEST_GPU" $QUICK $names \
            >"$LOG/$tool$g.log" 2>&1 &
        g=$((g + 1))
    done
    wait
    g=0
    while [ $g -lt "$SANITIZE_GROUPS" ]; do
        f=$LOG/$tool$g.log
        if [ -f "$f" ]; then
            checks=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$f" | tail -n 1)
            summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tail -n 1 | sed 's/^========= //')
            echo "$tool, group $g: ${checks:-no summary}; ${summary:-no sanitizer summary} ($f)"
            case "$checks" in *" 0 failed") ;; *) bad=1 ;; esac
            case "$summary" in "ERROR SUMMARY: 0 errors" | "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)") ;; *) bad=1 ;; esac
        fi
        g=$((g + 1))
    done
done
[ $bad -eq 0 ] && echo "sanitize: clean" || echo "sanitize: FAILED (logs in $LOG)"
exit $bad
