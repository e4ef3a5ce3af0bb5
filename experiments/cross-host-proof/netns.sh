#!/bin/sh
# netns.sh up|down: the experiment's network (FINDINGS.md): namespaces px-a (client,
# 10.77.0.1) and px-b (server, 10.77.0.2) joined by the veth pair px-va/px-vb.
case "$1" in
up)
  ip netns add px-a && ip netns add px-b &&
  ip link add px-va netns px-a type veth peer name px-vb netns px-b &&
  ip -n px-a addr add 10.77.0.1/24 dev px-va && ip -n px-b addr add 10.77.0.2/24 dev px-vb &&
  ip -n px-a link set px-va up && ip -n px-b link set px-vb up &&
  ip -n px-a link set lo up && ip -n px-b link set lo up ;;
down)
  ip netns del px-a; ip netns del px-b ;;
esac
