#!/usr/bin/env bash
# Two "hosts" on this machine: two network namespaces made here, joined by a veth pair whose
# addresses (10.233.0.1 and 10.233.0.2) exist only inside them, so no other address can be
# contacted. mpirun starts in the first with a hostfile naming both addresses and reaches the
# second through an rsh agent that enters its namespace (where a real cluster would use ssh);
# the ranks talk over TCP on the veth only. The job trains 6 steps and its checkpoint must hold
# step 6 of one process accumulating the same micro-batches, bit for bit. The namespaces are
# removed on every exit. Exit status 77 (skipped) when this machine cannot make namespaces.
#
#   two_hosts_test.sh DIST_TRAIN WORKDIR MPIEXEC [MPIEXEC_FLAGS...]
set -uo pipefail
prog=$1 dir=$2
shift 2
mpiexec=("$@")
fail() { echo "two-hosts test: FAILED: $*"; exit 1; }
skip() { echo "two-hosts test: skipped: $*"; exit 77; }

command -v ip >/dev/null || skip "no ip command (iproute2) to make network namespaces"
unshare --uts true 2>/dev/null || skip "this machine cannot create UTS namespaces (each host's own name)"
a=loomA$$ b=loomB$$ va=lmva$$ vb=lmvb$$
cleanup() { ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; }
trap cleanup EXIT
ip netns add "$a" 2>/dev/null || skip "this machine cannot create network namespaces (needs root and CAP_SYS_ADMIN)"
ip netns add "$b" || fail "ip netns add $b"
ip link add "$va" type veth peer name "$vb" || skip "this machine cannot create a veth pair"
ip link set "$va" netns "$a" && ip link set "$vb" netns "$b" || fail "moving the veth ends into the namespaces"
ip -n "$a" addr add 10.233.0.1/24 dev "$va" && ip -n "$b" addr add 10.233.0.2/24 dev "$vb" || fail "addresses"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up || fail "lo up in $ns"; done
ip -n "$a" link set "$va" up && ip -n "$b" link set "$vb" up || fail "veth up"

rm -rf "$dir" && mkdir -p "$dir/out" || fail "cannot create $dir"
printf '10.233.0.1 slots=1\n10.233.0.2 slots=1\n' >"$dir/hosts"
# mpirun calls the agent as ssh: [options] host command; the command runs in that host's namespace
cat >"$dir/agent.sh" <<AGENT
#!/bin/sh
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
case \$host in
  10.233.0.2) echo "started on \$host" >>"$dir/agent.log"
              exec ip netns exec $b unshare --uts sh -c "hostname hostB; \$*" ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
AGENT
chmod +x "$dir/agent.sh"

start=$(date +%s)
timeout 120 ip netns exec "$a" unshare --uts sh -c 'hostname hostA; exec "$@"' sh \
  "${mpiexec[@]}" --hostfile "$dir/hosts" -np 2 --map-by node \
  --mca plm_rsh_agent "$dir/agent.sh" --mca btl tcp,self \
  --mca btl_tcp_if_include 10.233.0.0/24 --mca oob_tcp_if_include 10.233.0.0/24 \
  "$prog" --out "$dir/out" --steps 6 --checkpoint-every 3 --timeout 20 >"$dir/log" 2>&1
status=$?
cat "$dir/log"
echo "two-hosts test: mpirun ended with status $status after $(($(date +%s) - start)) s"
[[ $status -ne 124 ]] || fail "the job was still running after 120 s"
[[ $status -eq 0 ]] || fail "the job failed"
grep -qx "started on 10.233.0.2" "$dir/agent.log" 2>/dev/null || fail "mpirun never started the second host's daemon"
"$prog" --verify "$dir/out/checkpoint.safetensors" --expect-step 6 --steps 6 ||
  fail "the checkpoint differs from one process accumulating the same micro-batches"
echo "two-hosts test: passed"
