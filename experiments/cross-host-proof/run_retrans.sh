#!/bin/sh
# run_retrans.sh: T7 (the first SYN is lost: the peer veth is down for 0.5 s; the retransmitted SYN
# must carry P again) and T8 (syncookies forced on the server namespace).
cd "$(dirname "$0")"
echo "== T7 first SYN lost"
./incg.sh px-b ./pxt server 10.77.0.2 7201 shunt 1 hs > srv.tmp 2>&1 &
sleep 0.3
ip -n px-b link set px-vb down   # the first SYN goes nowhere
( sleep 0.5; ip -n px-b link set px-vb up ) &
start=$(date +%s.%N)
AS=nobody ./incg.sh px-a ./pxt client 10.77.0.2 7201 shunt
echo "connect+exchange took $(echo "$(date +%s.%N) - $start" | bc) s"
wait; cat srv.tmp
echo "== T8 syncookies always (net.ipv4.tcp_syncookies=2 in px-b)"
ip netns exec px-b sysctl -q net.ipv4.tcp_syncookies=2
./incg.sh px-b ./pxt server 10.77.0.2 7202 shunt 1 hs > srv.tmp 2>&1 &
sleep 0.3
AS=nobody ./incg.sh px-a ./pxt client 10.77.0.2 7202 shunt
wait; cat srv.tmp
ip netns exec px-b sysctl -q net.ipv4.tcp_syncookies=1
