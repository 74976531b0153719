#!/usr/bin/env bash
# The program of docs/distributed.md trains on 2 processes to a small loss, and one process
# alone (the same 4 micro-batches per step) writes a checkpoint equal to theirs byte for byte.
#
#   doc_program_test.sh DOC_PROGRAM WORKDIR MPIEXEC [MPIEXEC_FLAGS...]
set -uo pipefail
prog=$1 dir=$2
shift 2
mpiexec=("$@")
fail() { echo "doc program test: FAILED: $*"; exit 1; }
rm -rf "$dir" && mkdir -p "$dir/two" "$dir/one" || fail "cannot create $dir"
"${mpiexec[@]}" -np 2 "$prog" "$dir/two/fit.safetensors" >"$dir/two.log" 2>&1 || { cat "$dir/two.log"; fail "mpirun -np 2"; }
cat "$dir/two.log"
loss=$(sed -n 's/^final loss //p' "$dir/two.log")
[[ -n $loss ]] || fail "no final loss printed"
python3 -c "import sys; sys.exit(0 if float('$loss') < 1e-3 else 1)" || fail "final loss $loss is not below 1e-3"
"$prog" "$dir/one/fit.safetensors" >"$dir/one.log" 2>&1 || { cat "$dir/one.log"; fail "one process"; }
cmp "$dir/two/fit.safetensors" "$dir/one/fit.safetensors" || fail "the checkpoints of 2 processes and of 1 differ"
echo "doc program test: passed (final loss $loss; the checkpoints of 2 processes and 1 are equal)"
