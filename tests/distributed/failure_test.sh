#!/usr/bin/env bash
# A rank of a data-parallel job dies (or hangs) mid-run: the job must end within 60 s with a
# non-zero status and a message naming the lost rank, and the last checkpoint must be intact.
#
#   failure_test.sh killed|hung DIST_TRAIN WORKDIR MPIEXEC [MPIEXEC_FLAGS...]
#
# killed: rank 1 kills itself (SIGKILL) at the start of step 8; mpirun notices and ends the job.
# hung:   rank 1 stops answering at the start of step 8; loom's timeout (5 s) ends the job.
# Checkpoints are written every 3 steps, so the file must hold step 6 of an uninterrupted run.
set -uo pipefail
mode=$1 prog=$2 dir=$3
shift 3
mpiexec=("$@")
fail() { echo "failure_test ($mode): FAILED: $*"; exit 1; }

rm -rf "$dir" && mkdir -p "$dir" || fail "cannot create $dir"
case $mode in
  killed) failing=(--die-at-step 8 --die-rank 1) names_rank='(process rank 1 |from rank 1 )' ;;
  hung) failing=(--hang-at-step 8 --hang-rank 1 --timeout 5) names_rank='no gradients from rank 1' ;;
  *) fail "unknown mode (killed or hung)" ;;
esac

start=$(date +%s%N)
timeout 120 "${mpiexec[@]}" -np 2 "$prog" --out "$dir" --steps 1000 --checkpoint-every 3 "${failing[@]}" \
  >"$dir/log" 2>&1
status=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
cat "$dir/log"
echo "failure_test ($mode): the job ended with status $status after $elapsed_ms ms"

[[ $status -ne 124 ]] || fail "the job was still running after 120 s"
[[ $status -ne 0 ]] || fail "the job ended with status 0"
((elapsed_ms < 60000)) || fail "the job took $elapsed_ms ms to end (the bound is 60 s)"
grep -Eq "$names_rank" "$dir/log" || fail "no message names the lost rank (looked for /$names_rank/)"
"$prog" --verify "$dir/checkpoint.safetensors" --expect-step 6 --steps 1000 || fail "the checkpoint is not intact"
echo "failure_test ($mode): passed"
