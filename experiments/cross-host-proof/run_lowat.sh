#!/bin/sh
# run_lowat.sh: experiment 3 (FINDINGS.md): the client's mark is TCP_NOTSENT_LOWAT=magic.
cd "$(dirname "$0")"
./exp_load -m > lowat.log 2>&1 & pid=$!
sleep 0.5
port=7400
case_() { # name servermode clientmode [outside]
  port=$((port+1))
  echo "== $1"
  ./incg.sh px-b ./pxt server 10.77.0.2 $port $2 1 hs > srv.tmp 2>&1 &
  sleep 0.3
  if [ "$4" = outside ]; then ip netns exec px-a setpriv --reuid=65534 --regid=65534 --clear-groups ./pxt client 10.77.0.2 $port $3
  else AS=nobody ./incg.sh px-a ./pxt client 10.77.0.2 $port $3; fi
  sleep 0.2; cat srv.tmp
}
case_ "L1 magic client -> shunt listener" shunt lowat
case_ "L2 client with TCP_SAVE_SYN=1 (a non-shunt program doing so) -> shunt listener" shunt shunt
case_ "L3 magic client outside the cgroup (no program) -> shunt listener" shunt lowat outside
case_ "L4 plain client -> shunt listener" shunt plain
kill $pid; wait $pid
cat lowat.log
