#!/bin/bash
# Validates the scale simulator (cmd/hvdsim, sdk/sim) against real
# processes: np 8 on 4 "hosts" (network namespaces joined by a bridge in a
# fifth one), each host's egress limited by tc tbf to the given rate. This
# kernel has no netem, so the link latency is the veth's own: it is
# calibrated first with np 2 on two hosts (one 8 B allreduce on TCP is one
# message each way), then the simulator, given that latency and the rate,
# predicts the np 8 runs: hvdbench engine (raw vs named 8 B allreduce: the
# difference is the engine's cached negotiation round) and hvdbench
# allreduce at 64 MiB (hierarchical: shm inside a host, TCP between).
#
#   sudo bench/simvalidate/run.sh [rate_mbit]   (default 1000)
#
# Needs root, iproute2 with tbf, bin/ built (make build). Only addresses
# of its own namespaces (10.231.0.0/24) are used; everything is removed on
# exit. CHECK=1 only builds the hosts and starts one command per rank.
set -euo pipefail
cd "$(dirname "$0")/../.."
RATE=${1:-1000}
id=$$
hub=hv31hub$id
tmp=$(mktemp -d)
cleanup() {
	for i in 1 2 3 4; do ip netns del hv31h$id-$i 2>/dev/null || true; done
	ip netns del $hub 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add $hub
ip -n $hub link add br0 type bridge
ip -n $hub link set br0 up
: >"$tmp/hosts"
for i in 1 2 3 4; do
	ns=hv31h$id-$i
	ip netns add $ns
	ip link add v31h$i-$id type veth peer name v31p$i-$id
	ip link set v31h$i-$id netns $ns
	ip link set v31p$i-$id netns $hub
	ip -n $hub link set v31p$i-$id master br0
	ip -n $hub link set v31p$i-$id up
	ip -n $ns addr add 10.231.0.$i/24 dev v31h$i-$id
	ip -n $ns link set lo up
	ip -n $ns link set v31h$i-$id up
	# The host's NIC: its egress rate.
	ip netns exec $ns tc qdisc add dev v31h$i-$id root tbf rate ${RATE}mbit burst 256kb latency 200ms
	echo "10.231.0.$i $ns" >>"$tmp/hosts"
done
run() {
	local np=$1 hosts=$2
	shift 2
	HVD_SSH=$PWD/e2e/testdata/netns-ssh HVD_TEST_NETNS_MAP=$tmp/hosts \
		timeout 600 ip netns exec hv31h$id-1 bin/hvdrun -np $np -H "$hosts" "$@" | sed 's/^\[[0-9]*\]<std[a-z]*>://'
}
H8=10.231.0.1:2,10.231.0.2:2,10.231.0.3:2,10.231.0.4:2
if [ -n "${CHECK:-}" ]; then
	run 8 $H8 sh -c 'echo rank $HOROVOD_RANK of $HOROVOD_SIZE local $HOROVOD_LOCAL_RANK'
	exit
fi
echo "# 4 netns hosts, tbf ${RATE} Mbit/s per host"
run 2 10.231.0.1:1,10.231.0.2:1 bin/hvdbench allreduce -backend tcp -sizes 8,64M >"$tmp/cal.txt" 2>&1
run 2 10.231.0.1:1,10.231.0.2:1 bin/hvdbench engine --samples 15 >"$tmp/engine2.txt" 2>&1
run 8 $H8 bin/hvdbench engine --samples 15 >"$tmp/engine.txt" 2>&1
run 8 $H8 bin/hvdbench allreduce -sizes 64M >"$tmp/ar.txt" 2>&1
cat "$tmp/cal.txt" "$tmp/engine2.txt" "$tmp/engine.txt" "$tmp/ar.txt" | grep -E "^ *(8|67108864) |allreduce 8 B"
/usr/bin/env python3 - "$tmp" "$RATE" <<'PY'
import re, subprocess, sys
tmp, rate = sys.argv[1], float(sys.argv[2])
def row(path, first):  # the first data row whose first field is `first`
    for l in open(path):
        f = l.split()
        if f and f[0] == first:
            return f
# hvdbench rows: bytes, count, dtype, time (µs), algbw, busbw, wrong
cal = float(row(f"{tmp}/cal.txt", "8")[3])          # µs: one 8 B message each way
cal64 = float(row(f"{tmp}/cal.txt", "67108864")[3]) # µs: np 2 ring, each host sends 64 MiB
big = float(row(f"{tmp}/ar.txt", "67108864")[3])    # µs
def engine(path):
    eng = open(path).read()
    raw = float(re.search(r"^\s*raw allreduce 8 B\s+([\d.]+)", eng, re.M).group(1))
    named = float(re.search(r"^\s*engine allreduce 8 B \(named\)\s+([\d.]+)", eng, re.M).group(1))
    return raw, named
raw, named = engine(f"{tmp}/engine.txt")
raw2, named2 = engine(f"{tmp}/engine2.txt")
lat = max(cal - 4, 1)  # the model's one-way latency: the exchange less 2 µs of CPU at each end
# What TCP achieves through the tbf: np 2's ring sends 64 MiB per host.
eff = 64 * 2**20 * 8 / (cal64 - 2 * lat) / 1e3  # Gb/s
def sim(gbps, n=8, host=2):
    out = subprocess.run(["go", "run", "./cmd/hvdsim", "-q", "-sizes", str(n), "-host-size", str(host), "-net-latency", f"{lat:.0f}us",
                          "-net-gbps", f"{gbps:.4f}", "-tensors", "1", "-repeat", "3", "-key-by-key-max", "8"],
                         capture_output=True, text=True, check=True).stdout
    rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in out.splitlines() if l.startswith(f"| {n} |")]
    return rows[0], rows[1]
neg, ar = sim(rate / 1000)
neg2, _ = sim(rate / 1000, 2, 1)
_, arc = sim(eff)
print(f"\ncalibration (np 2 on 2 hosts, TCP): 8 B {cal:.0f} µs -> model latency {lat:.0f} µs; 64 MiB {cal64/1000:.0f} ms -> {eff*1000:.0f} Mbit/s achieved through the {rate:.0f} Mbit/s tbf\n")
print("| np 2 on 2 hosts (a core each) | measured | simulated |")
print("|---|---|---|")
print(f"| 8 B allreduce, raw (tcp: one exchange) | {raw2:.0f} µs | {neg2[7]} |")
print(f"| engine's cached round (named − raw) | {named2 - raw2:.0f} µs | {neg2[2].split(' / ')[0]} |")
print()
print("| np 8 on 4 hosts (4 processes a core) | measured | simulated |")
print("|---|---|---|")
print(f"| 8 B allreduce, raw (hier: shm, leaders' exchange, shm) | {raw:.0f} µs | {neg[7]} |")
print(f"| engine's cached round (named − raw; flat: 8 < 64 members) | {named - raw:.0f} µs | {neg[2].split(' / ')[0]} |")
print(f"| 64 MiB allreduce (hier split), NIC at the tbf rate | {big/1000:.0f} ms | {ar[8]} |")
print(f"| 64 MiB allreduce (hier split), NIC at the rate np 2 achieved | {big/1000:.0f} ms | {arc[8]} |")
PY
