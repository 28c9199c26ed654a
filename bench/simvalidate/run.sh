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
		timeout 600 ip netns exec hv31h$id-1 bin/hvdrun -np $np -H "$hosts" "$@"
}
H8=10.231.0.1:2,10.231.0.2:2,10.231.0.3:2,10.231.0.4:2
if [ -n "${CHECK:-}" ]; then
	run 8 $H8 sh -c 'echo rank $HOROVOD_RANK of $HOROVOD_SIZE local $HOROVOD_LOCAL_RANK'
	exit
fi
echo "# 4 netns hosts, tbf ${RATE} Mbit/s per host"
cal=$(run 2 10.231.0.1:1,10.231.0.2:1 bin/hvdbench allreduce -backend tcp -sizes 8 2>&1)
lat=$(echo "$cal" | awk '$1 == 8 {print $3; exit}')
echo "calibration, np 2 on 2 hosts, 8 B allreduce on TCP: ${lat} µs"
eng=$(run 8 $H8 bin/hvdbench engine --samples 15 2>&1)
echo "$eng" | grep -E "allreduce 8 B"
ar=$(run 8 $H8 bin/hvdbench allreduce -sizes 64M 2>&1)
echo "$ar" | grep -E "^ *67108864"
raw=$(echo "$eng" | awk '/raw allreduce 8 B/ {print $(NF-5)}')
named=$(echo "$eng" | awk '/engine allreduce 8 B \(named\)/ {print $(NF-5)}')
big=$(echo "$ar" | awk '$1 == 67108864 {print $3; exit}')
sim=$(go run ./cmd/hvdsim -q -sizes 8 -host-size 2 -net-latency "$(awk -v l=$lat 'BEGIN{printf "%.0fus", (l > 4 ? l - 4 : l)}')" \
	-net-gbps "$(awk -v r=$RATE 'BEGIN{print r/1000}')" -tensors 1 -repeat 3 -key-by-key-max 8)
echo "$sim" | grep -E "^\| 8 \|"
srow=$(echo "$sim" | awk -F'|' '$2 == " 8 " && NF == 12 {print; exit}')
arow=$(echo "$sim" | awk -F'|' '$2 == " 8 " && NF == 13 {print; exit}')
echo
echo "| np 8, 4 hosts | measured | simulated |"
echo "|---|---|---|"
echo "| 8 B allreduce, raw (hier: shm, leaders' exchange, shm) | ${raw} µs | $(echo "$srow" | awk -F'|' '{print $11}') |"
echo "| engine's cached round (named − raw) | $(awk -v a=$named -v b=$raw 'BEGIN{printf "%.0f", a-b}') µs | $(echo "$srow" | awk -F'|' '{print $4}') |"
echo "| 64 MiB allreduce | ${big} µs | $(echo "$arow" | awk -F'|' '{print $10}') |"
