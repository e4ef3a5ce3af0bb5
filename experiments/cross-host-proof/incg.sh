#!/bin/sh
# incg.sh NS CMD...: runs CMD in network namespace NS, inside the experiment's own
# cgroup (/sys/fs/cgroup/unified/px-proof), so only these processes meet the
# experimental programs.  AS=nobody in the environment drops to uid 65534.
echo $$ > /sys/fs/cgroup/unified/px-proof/cgroup.procs || exit 1
ns=$1; shift
if [ "$AS" = nobody ]; then exec ip netns exec "$ns" setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; fi
exec ip netns exec "$ns" "$@"
