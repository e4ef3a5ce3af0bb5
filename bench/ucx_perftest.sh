#!/bin/bash
# ucx_perftest.sh: a program's own UCX under shunt (docs/benchmarks.md,
# "A program's own UCX"): Debian's ucx_perftest, server and client on
# loopback, over UCX's TCP lanes without shunt ("tcp"), the same under
# shunt ("shunt"), and over UCX's shared-memory lanes, its default on one
# host ("shm"); rounds interleaved, each figure printed as it comes.
#
#   bench/ucx_perftest.sh [ROUNDS]        # default 3; about 10 s a round
#
# tag_lat: UCP tag-matching latency of 8 B, µs (20,000 iterations);
# stream_bw: UCP stream bandwidth of 64 KiB messages, MB/s (5,000).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
shunt=${SHUNT:-$here/build/shunt}
rounds=${1:-3}
command -v ucx_perftest >/dev/null || { echo "ucx_perftest is needed (apt-get install ucx-utils)" >&2; exit 2; }

one() {   # mode test port
    local mode=$1 t=$2 port=$3 args col env wrap=()
    if [ "$t" = tag_lat ]; then args="-t tag_lat -n 20000 -w 1000 -s 8"; col=3
    else args="-t stream_bw -n 5000 -w 200 -s 65536"; col=6; fi
    case $mode in
        tcp) env=(UCX_TLS=tcp,self UCX_NET_DEVICES=lo) ;;
        shunt) env=(UCX_TLS=tcp,self UCX_NET_DEVICES=lo); wrap=("$shunt" run --) ;;
        shm) env=() ;;
    esac
    env "${env[@]}" timeout 60 "${wrap[@]}" ucx_perftest -p "$port" $args >/dev/null 2>&1 &
    local server=$!
    # listening, read from /proc: a probe connection would be taken for the client
    for _ in $(seq 1 200); do
        grep -q ":$(printf %04X "$port") 00000000:0000 0A" /proc/net/tcp && break
        sleep 0.05
    done
    env "${env[@]}" timeout 60 "${wrap[@]}" ucx_perftest 127.0.0.1 -p "$port" $args 2>&1 |
        awk -v c=$col '/^Final/ {print $c}'
    wait $server
}

for r in $(seq 1 "$rounds"); do
    modes="tcp shunt shm"
    [ $((r % 2)) = 0 ] && modes="shm shunt tcp"
    for m in $modes; do
        for t in tag_lat stream_bw; do
            echo "round $r $m $t $(one "$m" "$t" $((14000 + r)))"
        done
    done
done
