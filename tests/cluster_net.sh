#!/usr/bin/env bash
# The test cluster itself (tests/netcluster.sh): hostnames, name resolution, each host
# alone with lo and eth0, the ssh agent, a cut link and its return, traffic through the
# delay/loss relay, teardown when the script fails or is terminated, and the removal
# of a crashed run's leftovers.
set -u
. "$(dirname "$0")/testlib.sh"
. "$here/netcluster.sh"
# reach FROM TO: a TCP connection attempt from FROM to TO's port 9 is refused (TO is
# there and answers) within 2 s.
reach() { nc_exec "$1" timeout 2 bash -c "exec 3<>/dev/tcp/$(nc_ip "$2")/9" 2>&1 | grep -q refused; }
unreachable() { ! reach "$@"; }
# Through a lossy relay a SYN or its reply can be lost twice within reach's 2 s (about
# 4% of attempts at 10% loss each way): try a few times before calling it unreachable.
reach_lossy() { local i; for i in 1 2 3 4 5; do reach "$@" && return 0; done; return 1; }
leftovers() { # leftovers ID: namespaces, links or files of cluster ID still present
  { ip netns list | grep "^$NC_PREFIX-$1-"; ip -o link show | grep ": hnc$1"
    ls -d "/run/$NC_PREFIX/$1" /etc/netns/$NC_PREFIX-$1-* 2>/dev/null; } | grep -q .
}
no_leftovers() { ! leftovers "$1"; }

nc_up 3
for h in node1 node2 node3; do
  check "$h: hostname is $h" test "$(nc_exec $h hostname)" = $h
  check "$h: only lo and eth0" test "$(nc_exec $h ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | tr '\n' ' ')" = "lo eth0 "
done
check "node1 resolves node3 to its address" test "$(nc_exec node1 getent hosts node3 | awk '{print $1}')" = "$(nc_ip node3)"
check "node1 reaches node2" reach node1 node2
check "node1 reaches node3" reach node1 node3
check "the agent runs a shell command on node3 (ssh style: words joined)" \
  test "$("$NC_AGENT" -x node3 echo '$(hostname)' on '$(ip -o -4 addr show eth0 | wc -l)')" = "node3 on 1"
check "the agent refuses an unknown host" bash -c "! '$NC_AGENT' node9 true 2>/dev/null"

nc_link_down node2
check "node2's link down: node1 cannot reach node2" unreachable node1 node2
check "node2's link down: node1 still reaches node3" reach node1 node3
check "node2's link down: node2 keeps its address" nc_exec node2 ip -o -4 addr show eth0
nc_link_up node2
check "node2's link up again: node1 reaches node2" reach node1 node2
nc_down

# Through the relays: 2 ms one way and 10% loss; TCP still connects, ping gets replies.
nc_up 2 --delay-ms 2 --loss-pct 10
check "relay: one netrelay per host" test "$(ls "$NC_DIR"/relay*.pid | wc -l)" -eq 2
check "relay: node1 reaches node2 through it" reach_lossy node1 node2
if command -v ping >/dev/null; then
  nc_exec node1 timeout 20 ping -n -q -c 50 -i 0.01 node2 >"$tmp/ping" 2>&1
  check "relay: ping gets replies, some lost ($(grep -o '[0-9.]*% packet loss' "$tmp/ping"))" \
    grep -qE " [1-9][0-9]* received" "$tmp/ping"
else
  skipped_part "ping through the relay (no ping: apt-get install iputils-ping)"
fi
id=$$ relays=$(cat "$NC_DIR"/relay*.pid)
nc_down
check "nc_down removed everything" no_leftovers $id
gone() { local p; for p; do [ -d /proc/$p ] && ! grep -q '^[0-9]* ([^)]*) Z' /proc/$p/stat && return 1; done; return 0; }
check "nc_down stopped the relays" gone $relays

# A script that fails, and one terminated, leave nothing behind.
script=". '$here/testlib.sh' '$herd'; . '$here/netcluster.sh'; nc_up 2; echo \$\$ >'$tmp/pid';"
bash -c "$script exit 3" >/dev/null 2>&1
rc=$?
check "failing script: its exit code kept ($rc)" test $rc -eq 3
check "failing script: its cluster removed on exit" no_leftovers "$(cat "$tmp/pid")"
rm -f "$tmp/pid"
bash -c "$script while :; do sleep 0.2; done" >/dev/null 2>&1 &
for _ in $(seq 1 100); do [ -s "$tmp/pid" ] && break; sleep 0.1; done
kill -TERM $!
wait $!
check "terminated script: its cluster removed" no_leftovers "$(cat "$tmp/pid")"

# A crashed run (its owner killed with SIGKILL) is cleaned up by the next nc_up.
rm -f "$tmp/pid"
bash -c "$script exec sleep 60" >/dev/null 2>&1 &
for _ in $(seq 1 100); do [ -s "$tmp/pid" ] && break; sleep 0.1; done
kill -KILL $!
wait $! 2>/dev/null
dead=$(cat "$tmp/pid")
check "SIGKILLed script: its cluster is left" leftovers $dead
nc_up 2
check "the next nc_up removed the leftovers" no_leftovers $dead
nc_down

finish
