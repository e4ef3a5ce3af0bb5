#!/usr/bin/env bash
# netns_compare.sh: kernel TCP against shunt between two network namespaces of
# one host (issue 19), the way containers on one machine talk: namespaces a and b
# joined by a veth pair (10.99.0.1 and 10.99.0.2, inside them only), the host
# fabric-enabled for the run (`shunt fabric enable`, disabled at the end), every
# program started with `ip netns exec`.  Root; sockperf, iperf3 and NPtcp
# (scripts/install-deps --bench).  Rounds alternate kernel TCP and shunt:
#   sockperf ping-pong, 64 B: the median latency (one-way, µs)
#   iperf3, 3 s, 64 KiB writes: the receiver's Gbit/s
# then one NetPIPE run of each (1 B to 8 MiB): the sizes where shunt is below
# kernel TCP, and six sizes side by side; then, against a server WITHOUT shunt,
# the connect rate of a client without shunt and of one under shunt (3000
# connect/close each, 4 x ROUNDS rounds, the order alternating): what a client
# under shunt pays to find that nobody in any namespace listens accelerated.
#
#   bench/netns_compare.sh [ROUNDS] [BUILD]      (defaults: 3, build)
set -euo pipefail
ROUNDS=${1:-3}
BUILD=$(realpath "${2:-build}")
S=$BUILD/shunt
PEER=$BUILD/tests/programs/synopt_peer   # its "serve" and "rate" modes
NS_A=shunt-cmp-a-$$ NS_B=shunt-cmp-b-$$ VA=scmpa$$ VB=scmpb$$
OUT=$(mktemp -d)
cleanup() {
    "$S" fabric disable >/dev/null 2>&1 || true
    ip netns del "$NS_A" 2>/dev/null || true
    ip netns del "$NS_B" 2>/dev/null || true
    rm -rf "$OUT"
}
trap cleanup EXIT
for tool in ip sockperf iperf3 NPtcp; do
    command -v "$tool" >/dev/null || { echo "netns_compare: $tool is missing (scripts/install-deps --bench)" >&2; exit 1; }
done
ip netns add "$NS_A"
ip netns add "$NS_B"
ip link add "$VA" type veth peer name "$VB"
ip link set "$VA" netns "$NS_A"
ip link set "$VB" netns "$NS_B"
ip -n "$NS_A" addr add 10.99.0.1/24 dev "$VA"
ip -n "$NS_B" addr add 10.99.0.2/24 dev "$VB"
for n in "$NS_A" "$NS_B"; do ip -n "$n" link set lo up; done
ip -n "$NS_A" link set "$VA" up
ip -n "$NS_B" link set "$VB" up
"$S" fabric enable >/dev/null
export SHUNT_LOG=warn

# $1: "" for kernel TCP, or "shunt" (both ends under shunt run)
prefix() { [ "$1" = shunt ] && echo "$S run --" || true; }

pingpong() {
    local p; p=$(prefix "$1")
    ip netns exec "$NS_A" $p sockperf server -i 10.99.0.1 -p 11111 --tcp >/dev/null 2>&1 &
    local srv=$!
    sleep 1
    # --mps: sockperf's table of send times is sized by the rate (bench/stdtools.py)
    ip netns exec "$NS_B" $p sockperf ping-pong -i 10.99.0.1 -p 11111 --tcp -m 64 -t 3 --mps=4000000 2>&1 |
        grep -o "percentile 50.000 = *[0-9.]*" | awk '{print $NF}'
    kill "$srv"; wait "$srv" 2>/dev/null || true
}

stream() {
    local p; p=$(prefix "$1")
    ip netns exec "$NS_A" $p iperf3 -s -1 -B 10.99.0.1 -p 5301 >/dev/null 2>&1 &
    local srv=$!
    sleep 1
    ip netns exec "$NS_B" $p iperf3 -c 10.99.0.1 -p 5301 -t 3 -l 65536 -J 2>/dev/null |
        python3 -c "import json,sys; print(round(json.load(sys.stdin)['end']['sum_received']['bits_per_second']/1e9,2))"
    wait "$srv" 2>/dev/null || true
}

netpipe() {
    local p; p=$(prefix "$1")
    (cd "$OUT" && ip netns exec "$NS_A" $p NPtcp >/dev/null 2>&1) &
    local srv=$!
    sleep 1
    (cd "$OUT" && ip netns exec "$NS_B" $p NPtcp -h 10.99.0.1 -o "$OUT/np_$1.out" -u 8388608 >/dev/null 2>&1)
    wait "$srv" 2>/dev/null || true
}

connect_rate() {   # $1: "" or shunt (the client only), $2: port
    local p; p=$(prefix "$1")
    ip netns exec "$NS_A" "$PEER" serve 10.99.0.1 "$2" 3000 >/dev/null &
    local srv=$!
    sleep 0.3
    ip netns exec "$NS_B" $p "$PEER" rate 10.99.0.1 "$2" 3000 | awk '{printf "%.0f", $2/$3}'
    wait "$srv" 2>/dev/null || true
}

for r in $(seq "$ROUNDS"); do
    echo "round $r: ping-pong 64 B median µs: kernel $(pingpong kernel) shunt $(pingpong shunt);" \
         "stream Gbit/s: kernel $(stream kernel) shunt $(stream shunt)"
done
netpipe kernel
netpipe shunt
python3 - "$OUT" <<'PY'
import sys
d = sys.argv[1]
def load(name):
    return {int(l.split()[0]): float(l.split()[1]) for l in open("%s/np_%s.out" % (d, name)) if l.strip()}
k, s = load("kernel"), load("shunt")
sizes = sorted(set(k) & set(s))
below = ["%d (%.2fx)" % (n, s[n] / k[n]) for n in sizes if s[n] < k[n]]
print("NetPIPE: %d sizes, shunt below kernel TCP at: %s" % (len(sizes), ", ".join(below) or "none"))
for want in (1, 64, 1024, 65536, 1048576, 8388608):
    n = min(sizes, key=lambda x: abs(x - want))
    print("  %8d B: kernel TCP %9.0f Mbit/s, shunt %9.0f Mbit/s, %6.1fx" % (n, k[n], s[n], s[n] / k[n]))
PY
port=13000
for r in $(seq $((4 * ROUNDS))); do
    port=$((port + 2))
    if [ $((r % 2)) = 0 ]; then
        a=$(connect_rate kernel $port); b=$(connect_rate shunt $((port + 1)))
    else
        b=$(connect_rate shunt $((port + 1))); a=$(connect_rate kernel $port)
    fi
    echo "$a $b"
done | python3 -c "
import statistics, sys
rows = [tuple(map(int, l.split())) for l in sys.stdin if l.strip()]
r = sorted(b / a for a, b in rows)
print('connect rate to a server without shunt, %d rounds: client without shunt %.0f/s, under shunt %.0f/s (medians);'
      ' ratio median %.3f, quartiles %.3f to %.3f' % (len(rows), statistics.median(a for a, b in rows),
      statistics.median(b for a, b in rows), statistics.median(r), r[len(r) // 4], r[3 * len(r) // 4]))"
