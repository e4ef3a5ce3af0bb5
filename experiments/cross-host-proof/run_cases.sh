#!/bin/sh
# run_cases.sh: the client/server cases of FINDINGS.md (needs exp_load running and netns.sh up).
# Each case: a server in px-b (inside the px-proof cgroup), one client in px-a as nobody.
cd "$(dirname "$0")"
port=7100
case_() { # name servermode clientmode [incg|outside] [writefirst]
  port=$((port+1))
  echo "== $1: server $2, client $3 ${4:-incg} $5"
  ./incg.sh px-b ./pxt server 10.77.0.2 $port $2 1 hs > srv.tmp 2>&1 &
  sleep 0.3
  if [ "$4" = outside ]; then ip netns exec px-b true; ip netns exec px-a setpriv --reuid=65534 --regid=65534 --clear-groups ./pxt client 10.77.0.2 $port $3 $5
  else AS=nobody ./incg.sh px-a ./pxt client 10.77.0.2 $port $3 $5; fi
  wait; cat srv.tmp
}
case_ "T2 plain client -> shunt listener" shunt plain
case_ "T3 shunt client -> plain listener" plain shunt
case_ "T4 shunt client -> listener with TCP_SAVE_SYN set after listen()" late shunt
case_ "T5 shunt client outside the cgroup (no program of ours) -> shunt listener" shunt shunt outside
case_ "T6 shunt client writes first (HTTP) -> shunt listener" shunt shunt incg writefirst
