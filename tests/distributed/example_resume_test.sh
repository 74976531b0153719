#!/usr/bin/env bash
# The translation example trained with the same micro-batches per step on 2 processes and on
# one process accumulating 2 gives checkpoints equal byte for byte (cmp); a run stopped after
# step 6 resumes on the other world size to the same file as the uninterrupted run, both ways;
# a resume with other micro-batches per step is refused in one line saying what to change. With
# the optimizer sharded over the 2 processes (--shard-optimizer) the files are the same too.
#
#   example_resume_test.sh TRANSLATE WORKDIR MPIEXEC [MPIEXEC_FLAGS...]
set -uo pipefail
prog=$1 dir=$2
shift 2
mpiexec=("$@")
fail() { echo "resume test: FAILED: $*"; exit 1; }
rm -rf "$dir" && mkdir -p "$dir" || fail "cannot create $dir"

common=(--threads 1 --steps 12 --batch 16 --max 100000 --checkpoint-every 0 --test-numbers 32)
two() { "${mpiexec[@]}" -np 2 "$prog" "${common[@]}" "$@" >>"$dir/log" 2>&1 || { cat "$dir/log"; fail "mpirun -np 2 translate $*"; }; }
one() { "$prog" "${common[@]}" --accumulate 2 "$@" >>"$dir/log" 2>&1 || { cat "$dir/log"; fail "translate --accumulate 2 $*"; }; }
same() { cmp "$1/checkpoint.safetensors" "$2/checkpoint.safetensors" || fail "$3"; echo "resume test: $3: equal"; }

two --out "$dir/two"
one --out "$dir/one"
same "$dir/two" "$dir/one" "2 processes and 1 process accumulating 2, uninterrupted"

two --out "$dir/two_sharded" --shard-optimizer
same "$dir/two_sharded" "$dir/two" "2 processes with the optimizer sharded and unsharded"

two --out "$dir/sharded_then_one" --stop-after 6 --shard-optimizer
one --out "$dir/sharded_then_one" --resume
same "$dir/sharded_then_one" "$dir/two" "stopped on 2 processes sharding the optimizer, resumed on 1"

two --out "$dir/two_then_one" --stop-after 6
cp -r "$dir/two_then_one" "$dir/refused"
one --out "$dir/two_then_one" --resume
same "$dir/two_then_one" "$dir/two" "stopped on 2 processes at step 6, resumed on 1"

one --out "$dir/one_then_two" --stop-after 6
two --out "$dir/one_then_two" --resume
same "$dir/one_then_two" "$dir/two" "stopped on 1 process at step 6, resumed on 2"

"$prog" "${common[@]}" --out "$dir/refused" --resume >/dev/null 2>"$dir/refused.log"
status=$?
cat "$dir/refused.log"
[[ $status -eq 2 ]] || fail "a resume with 1 micro-batch per step from a checkpoint of 2 ended with status $status, not 2"
[[ $(wc -l <"$dir/refused.log") -eq 1 ]] || fail "the refusal is not one line (on stderr)"
grep -q "was trained with 2 micro-batches per step, this run has 1 (1 process(es) x --accumulate 1)" \
  "$dir/refused.log" || fail "the refusal does not say what differs"
echo "resume test: passed"
