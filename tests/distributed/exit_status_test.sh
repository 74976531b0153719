#!/usr/bin/env bash
# How a job ends when bodies return non-zero (loom::distributed::run): the mpirun status is
# non-zero and the job ends within seconds, whether one rank returns 3 while the other returns 0
# (the others had finished: they meet, and each exits with its own status) or every rank
# returns 3 (a bad setting each found: the same). Before, a rank returning non-zero could wait
# for ever for one that had gone on to finalise.
#
#   exit_status_test.sh DIST_TRAIN WORKDIR MPIEXEC [MPIEXEC_FLAGS...]
set -uo pipefail
prog=$1 dir=$2
shift 2
mpiexec=("$@")
fail() { echo "exit-status test: FAILED: $*"; exit 1; }
for case in "1" "0" "-1"; do
  rm -rf "$dir" && mkdir -p "$dir" || fail "cannot create $dir"
  start=$(date +%s)
  timeout 60 "${mpiexec[@]}" -np 2 "$prog" --out "$dir" --steps 3 --checkpoint-every 100 --timeout 10 \
    --fail-rank "$case" --fail-status 3 >"$dir/log" 2>&1
  status=$?
  seconds=$(($(date +%s) - start))
  echo "exit-status test: --fail-rank $case: mpirun ended with status $status after $seconds s"
  [[ $status -ne 124 ]] || { cat "$dir/log"; fail "--fail-rank $case: the job was still running after 60 s"; }
  [[ $status -ne 0 ]] || { cat "$dir/log"; fail "--fail-rank $case: the job ended with status 0"; }
  grep -q "returns 3" "$dir/log" || { cat "$dir/log"; fail "--fail-rank $case: no rank said it returned 3"; }
done
echo "exit-status test: passed"
