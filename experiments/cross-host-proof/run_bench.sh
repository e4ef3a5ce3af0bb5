#!/bin/sh
# run_bench.sh [-n] [-m]: (CLIENTMODE=lowat with -m) per-connection cost of the experimental program (FINDINGS.md).
# Starts exp_load (with -n: without counters), a shunt listener in px-b, then
# 3000 connects from a shunt client and 3000 from a plain client (px-a), printing
# the program's (and, read-only, the root cgroup's shunt_synopt's) run count and run time after each (kernel.bpf_stats_enabled=1
# during the run, restored after).
cd "$(dirname "$0")"
old=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -q kernel.bpf_stats_enabled=1
./exp_load $1 $2 > bench.log 2>&1 & pid=$!
sleep 0.5
./incg.sh px-b ./pxt server 10.77.0.2 7301 shunt 6000 > srv.tmp 2>&1 &
sleep 0.3
kill -USR1 $pid; sleep 0.2
./query | sed "s/^/root before: /"
./incg.sh px-a ./pxt bench 10.77.0.2 7301 ${CLIENTMODE:-shunt} 3000
sleep 0.3; kill -USR1 $pid; sleep 0.2
./query | sed "s/^/root after shunt: /"
./incg.sh px-a ./pxt bench 10.77.0.2 7301 plain 3000
sleep 0.5; kill -USR1 $pid; sleep 0.2
./query | sed "s/^/root after plain: /"
wait %2 2>/dev/null
kill $pid; wait $pid
sysctl -q kernel.bpf_stats_enabled=$old
cat bench.log
