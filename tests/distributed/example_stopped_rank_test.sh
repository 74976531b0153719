#!/usr/bin/env bash
# The translation example under `mpirun -np 2`, rank 1 stopped (SIGSTOP) while training: the
# example catches the library's error itself and returns 1, and the job must still end within
# its timeout (--timeout 5) + 5 s, with a line naming rank 1, leaving no process behind.
#
#   example_stopped_rank_test.sh TRANSLATE WORKDIR MPIEXEC [MPIEXEC_FLAGS...]
set -uo pipefail
prog=$1 dir=$2
shift 2
mpiexec=("$@")
fail() { echo "stopped-rank test: FAILED: $*"; [[ -n ${rank1:-} ]] && kill -CONT "$rank1" 2>/dev/null; exit 1; }

rm -rf "$dir" && mkdir -p "$dir" || fail "cannot create $dir"
out="$dir/out"  # unique to this test: finds this job's processes, and only them
"${mpiexec[@]}" -np 2 "$prog" --threads 1 --steps 100000 --minutes 10 --timeout 5 --checkpoint-every 0 \
  --out "$out" >"$dir/log" 2>&1 &
job=$!
for _ in $(seq 1 1200); do  # at most 120 s of set-up
  grep -q "^training for" "$dir/log" && break
  kill -0 "$job" 2>/dev/null || { cat "$dir/log"; fail "the job ended before training"; }
  sleep 0.1
done
grep -q "^training for" "$dir/log" || fail "training did not start within 120 s"
sleep 1  # a few steps

rank1=""
for pid in $(pgrep -f -- "--out $out"); do
  [[ $pid == "$job" ]] && continue
  tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && rank1=$pid
done
[[ -n $rank1 ]] || fail "no process of rank 1 found"
kill -STOP "$rank1"
start=$(date +%s%N)
for _ in $(seq 1 600); do  # mpirun ends, or 60 s pass
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
if kill -0 "$job" 2>/dev/null; then
  cat "$dir/log"
  kill -CONT "$rank1" 2>/dev/null
  pkill -KILL -f -- "--out $out"
  fail "the job was still running 60 s after rank 1 stopped"
fi
wait "$job"
status=$?
kill -CONT "$rank1" 2>/dev/null
cat "$dir/log"
echo "stopped-rank test: the job ended with status $status, $elapsed_ms ms after rank 1 stopped"
[[ $status -ne 0 ]] || fail "the job ended with status 0"
((elapsed_ms < 10000)) || fail "the job took $elapsed_ms ms to end (bound: the timeout 5 s + 5 s)"
# rank 0 waits for rank 1's gradients, or (stopped between steps) its answer to a collective
grep -Eq "rank 0: no (gradients|answer) from rank 1 for 5" "$dir/log" || fail "no line names rank 1"
sleep 1
left=$(pgrep -f -- "--out $out")
[[ -z $left ]] || { pkill -KILL -f -- "--out $out"; fail "processes left behind: $left"; }
echo "stopped-rank test: passed"
