# A cluster of 2-3 hosts on this machine, for tests and benchmarks that need several
# machines: each host is a network namespace with its own hostname (a UTS namespace
# per command), one eth0 on a private subnet joined by a bridge, its own /etc/hosts
# naming every host, and a core of its own when the machine has one per host. Needs
# root and iproute2; a script that cannot have it here is skipped (skip_all, exit 77).
#
#   . tests/testlib.sh; . tests/netcluster.sh
#   nc_up 3 [--delay-ms D] [--loss-pct P]   # hosts node1..node3; torn down on exit
#   nc_exec node2 hostname                  # a command on a host (prints node2)
#   nc_mpirun -np 3 "$herd" train ...       # Open MPI from node1 across the hosts, TCP only
#   nc_link_down node2; nc_link_up node2    # cut and restore node2's link (a partition)
#
# Latency and loss come from tests/netrelay (this kernel has no netem): with --delay-ms
# or --loss-pct every host's link runs through a relay between two TAP devices that
# delays each frame by D/2 ms each way and drops a share q of frames with
# (1-q)^2 = 1-P, so between any two hosts a frame takes D ms one way and is lost with
# probability P. Names carry the owner's PID (namespaces herdnc-PID-hI, links
# hncPID...), so leftovers of a crashed run are found and removed by the next.
# The functions and variables are listed in docs/cluster.md ("A test cluster on one
# machine").

NC_PREFIX=herdnc
NC_DIR=""           # the running cluster's state: hosts table, agent, hostfile, relay logs
NC_HOSTS=()         # node1 .. nodeN
NC_SUBNET=""        # 10.212.X.0/24
NC_AGENT=""         # rsh/ssh agent for mpirun (plm_rsh_agent) and hydra (-launcher-exec)
NC_MPI_FLAGS=()     # Open MPI flags for a job across the hosts (agent, TCP only, subnet)
NC_HYDRA_FLAGS=()   # the same for MPICH's mpiexec.hydra (agent, hosts, eth0, UCX over TCP)
NC_TIMEOUT=${NC_TIMEOUT:-120}   # seconds nc_mpirun and nc_hydra give a job
declare -F skip_all >/dev/null || skip_all() { echo "SKIPPED: $(basename "$0" .sh): $1"; exit 77; }

# The relay binary: $NC_RELAY (ctest sets it), else next to the herd binary's build.
nc_relay_path() {
  if [ -n "${NC_RELAY:-}" ]; then echo "$NC_RELAY"; return; fi
  local d
  d=$(dirname "$(readlink -f "${herd:-/nonexistent}")")
  [ -x "$d/tests/netrelay" ] && echo "$d/tests/netrelay"
}

# nc_can_run NEED_TUN: returns 0, or prints why this machine cannot build a cluster.
nc_can_run() {
  [ "$(id -u)" = 0 ] || { echo "needs root for network namespaces"; return 1; }
  command -v ip >/dev/null || { echo "no 'ip' command (apt-get install iproute2)"; return 1; }
  command -v unshare >/dev/null && command -v taskset >/dev/null \
    || { echo "no unshare or taskset command (util-linux)"; return 1; }
  local probe="$NC_PREFIX-probe-$$" err
  if ! err=$(ip netns add "$probe" 2>&1); then
    echo "no network namespace support: $err"; return 1
  fi
  err=$(ip netns exec "$probe" unshare --uts sh -c 'hostname nc-probe' 2>&1) \
    || { ip netns del "$probe"; echo "no UTS namespace support: $err"; return 1; }
  ip netns del "$probe"
  err=$(ip link add "hncprobe$$" type bridge 2>&1) || { echo "no bridge support: $err"; return 1; }
  ip link del "hncprobe$$"
  if [ "$1" = 1 ] && ! { exec 9<>/dev/net/tun; } 2>/dev/null; then
    echo "no /dev/net/tun, needed for --delay-ms/--loss-pct"; return 1
  fi
  exec 9<&- 2>/dev/null
  return 0
}

# nc_remove ID: removes every process, namespace, link, /etc/netns entry, relay and
# state file of cluster ID (its owner's PID).
nc_remove() {
  local id=$1 ns p
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NC_PREFIX-$id-h"); do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  for p in /run/$NC_PREFIX/$id/relay*.pid; do
    [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null
  done
  for p in /run/$NC_PREFIX/$id/relay*.pid; do # gone, or a zombie whose TAPs are closed
    [ -f "$p" ] && timeout 2 bash -c "while [ -d /proc/$(cat "$p") ] &&
      ! grep -q '^[0-9]* ([^)]*) Z' /proc/$(cat "$p")/stat 2>/dev/null; do sleep 0.05; done"
  done
  for p in $(ip -o link show 2>/dev/null | sed -n "s/^[0-9]*: \(hnc$id\(br\|[pab][0-9]\)\)[@:].*/\1/p"); do
    ip link del "$p" 2>/dev/null
  done
  rm -rf "/run/$NC_PREFIX/$id"
}

# Leftovers of runs whose owner died (killed by a ctest timeout, say).
nc_remove_stale() {
  local id
  for id in $( { ip netns list 2>/dev/null | sed -n "s/^$NC_PREFIX-\([0-9]*\)-h.*/\1/p"
                 ip -o link show 2>/dev/null | sed -n 's/^[0-9]*: hnc\([0-9]*\)\(br\|[pab][0-9]\)[@:].*/\1/p'
                 ls "/run/$NC_PREFIX" 2>/dev/null; } | sort -u); do
    if [ "$id" = "$$" ] || ! kill -0 "$id" 2>/dev/null; then nc_remove "$id"; fi
  done
}

nc_down() {
  [ -n "$NC_DIR" ] || return 0
  nc_remove "$$"
  NC_DIR="" NC_HOSTS=() NC_AGENT="" NC_MPI_FLAGS=() NC_HYDRA_FLAGS=()
}

# A cluster that cannot be built where it should be: the script fails (its exit trap
# removes what was built).
nc_fail() { echo "nc_up: $1" >&2; exit 1; }

# nc_up N [--delay-ms D] [--loss-pct P]: builds hosts node1..nodeN (N = 2 or 3); a
# usage error exits 2, a failure to build exits 1, a machine that cannot skips (77).
nc_up() {
  local n=$1 delay=0 loss=0 why relay=""
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --delay-ms) delay=$2; shift 2 ;;
      --loss-pct) loss=$2; shift 2 ;;
      *) echo "nc_up: unknown option '$1'" >&2; exit 2 ;;
    esac
  done
  case $n in 2|3) ;; *) echo "nc_up: 2 or 3 hosts, not '$n'" >&2; exit 2 ;; esac
  local delay_us loss_ppm
  delay_us=$(awk -v d="$delay" 'BEGIN { if (d !~ /^[0-9.]+$/) exit 1; printf "%d", d * 1000 / 2 }') \
    || { echo "nc_up: --delay-ms needs a number, got '$delay'" >&2; exit 2; }
  loss_ppm=$(awk -v p="$loss" 'BEGIN { if (p !~ /^[0-9.]+$/ || p >= 100) exit 1;
                                       printf "%d", (1 - sqrt(1 - p / 100)) * 1e6 }') \
    || { echo "nc_up: --loss-pct needs a number below 100, got '$loss'" >&2; exit 2; }
  local use_relay=0
  [ "$delay_us" -gt 0 ] || [ "$loss_ppm" -gt 0 ] && use_relay=1
  why=$(nc_can_run $use_relay) || skip_all "$why"
  if [ $use_relay = 1 ]; then
    relay=$(nc_relay_path)
    [ -x "$relay" ] || { echo "nc_up: netrelay not built (set NC_RELAY or build tests/netrelay)" >&2; exit 1; }
  fi
  nc_remove_stale

  local id=$$ x old
  x=$((id % 250 + 1))
  NC_SUBNET="10.212.$x.0/24"
  NC_DIR="/run/$NC_PREFIX/$id"
  mkdir -p "$NC_DIR"
  # Tear down on any exit, before whatever the script already does on exit.
  if [ -z "${NC_TRAPPED:-}" ]; then
    old=$(trap -p EXIT)
    eval "local -a prev=($old)"
    trap "nc_down; ${prev[2]:-}" EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    NC_TRAPPED=1
  fi

  local br="hnc${id}br" i ns name port cores cpus
  cores=$(getconf _NPROCESSORS_ONLN)
  # A core per host when there are enough; else every host gets every core, because
  # two processes pinned to one core can starve each other (MPICH/UCX ranks then hang
  # in MPI_Finalize until killed).
  cpus=0-$((cores - 1))
  ip link add "$br" type bridge && ip link set "$br" up || nc_fail "cannot create bridge $br"
  : >"$NC_DIR/hosts"
  for i in $(seq 1 "$n"); do
    name="node$i" ns="$NC_PREFIX-$id-h$i"
    NC_HOSTS+=("$name")
    [ "$n" -le "$cores" ] && cpus=$((i - 1))
    ip netns add "$ns" && ip -n "$ns" link set lo up || nc_fail "cannot create namespace $ns"
    if [ $use_relay = 1 ]; then
      port="hnc${id}a$i"
      setsid "$relay" "$port" "hnc${id}b$i" "$delay_us" "$loss_ppm" "$((id + i))" \
        >"$NC_DIR/relay$i.log" 2>&1 &
      echo $! >"$NC_DIR/relay$i.pid"
      disown
      local tries=0
      until grep -q ready "$NC_DIR/relay$i.log" 2>/dev/null; do
        tries=$((tries + 1))
        if [ $tries -gt 50 ] || ! kill -0 "$(cat "$NC_DIR/relay$i.pid")" 2>/dev/null; then
          nc_fail "netrelay for $name did not start: $(cat "$NC_DIR/relay$i.log")"
        fi
        sleep 0.1
      done
      ip link set "hnc${id}b$i" netns "$ns" && ip -n "$ns" link set "hnc${id}b$i" name eth0 \
        || nc_fail "cannot give $name its eth0"
    else
      port="hnc${id}p$i"
      ip link add "$port" type veth peer name "hnc${id}b$i" && ip link set "hnc${id}b$i" netns "$ns" &&
        ip -n "$ns" link set "hnc${id}b$i" name eth0 || nc_fail "cannot give $name its eth0"
    fi
    ip link set "$port" master "$br" && ip link set "$port" up &&
      ip -n "$ns" addr add "10.212.$x.$i/24" dev eth0 && ip -n "$ns" link set eth0 up \
      || nc_fail "cannot attach $name to $br"
    echo "$name $ns 10.212.$x.$i $cpus $port" >>"$NC_DIR/hosts"
  done
  for i in $(seq 1 "$n"); do
    mkdir -p "/etc/netns/$NC_PREFIX-$id-h$i"
    { echo "127.0.0.1 localhost"
      awk '{ print $3, $1 }' "$NC_DIR/hosts"; } >"/etc/netns/$NC_PREFIX-$id-h$i/hosts"
  done
  nc_hostfile "$NC_DIR/hostfile" 1
  nc_write_agent
  NC_MPI_FLAGS=(--mca plm_rsh_agent "$NC_AGENT" --mca plm_rsh_no_tree_spawn 1
                --mca pml ob1 --mca btl tcp,self
                --mca btl_tcp_if_include "$NC_SUBNET" --mca oob_tcp_if_include "$NC_SUBNET")
  # MPICH's UCX would reach the other hosts through shared memory (sysv, cma): TCP only.
  NC_HYDRA_FLAGS=(-launcher ssh -launcher-exec "$NC_AGENT" -hosts "$(IFS=,; echo "${NC_HOSTS[*]}")"
                  -iface eth0 -genv UCX_TLS tcp,self -genv UCX_NET_DEVICES eth0)
  nc_wait_reachable || nc_fail "the hosts do not reach each other within 10 s"
}

# Every host answers node1 (ARP and the bridge settle), up to 10 s.
nc_wait_reachable() {
  local h ip t
  for h in "${NC_HOSTS[@]:1}"; do
    ip=$(nc_ip "$h")
    for t in $(seq 1 100); do
      # A refused connection is an answer; not a pipe into grep, so pipefail callers work.
      [[ $(nc_exec "${NC_HOSTS[0]}" timeout 1 bash -c "exec 3<>/dev/tcp/$ip/9" 2>&1) == *refused* ]] && continue 2
      sleep 0.1
    done
    return 1
  done
}

nc_field() { # nc_field HOST COLUMN: name ns ip cores port from the hosts table
  awk -v h="$1" -v c="$2" '$1 == h || $3 == h { print $c; found = 1 } END { exit !found }' "$NC_DIR/hosts" \
    || { echo "netcluster: no host '$1' in this cluster (${NC_HOSTS[*]})" >&2; return 1; }
}
nc_ip() { nc_field "$1" 3; }

# nc_exec HOST COMMAND...: runs COMMAND on HOST (its namespace, hostname and cores).
nc_exec() {
  local h=$1 ns core
  shift
  ns=$(nc_field "$h" 2) && core=$(nc_field "$h" 4) || return 1
  taskset -c "$core" ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$h" "$@"
}

# nc_hostfile FILE [SLOTS]: an Open MPI hostfile naming every host with SLOTS (1).
nc_hostfile() {
  local h
  for h in "${NC_HOSTS[@]}"; do echo "$h slots=${2:-1}"; done >"$1"
}

# The agent: mpirun (plm_rsh_agent) and hydra (-launcher ssh -launcher-exec) call it
# as they would call ssh: [ssh options] HOST COMMAND...; like sshd it runs the words of
# COMMAND joined through sh -c, here inside HOST's namespace with HOST's hostname.
# It inherits the caller's environment, which a real ssh would not pass.
nc_write_agent() {
  NC_AGENT="$NC_DIR/agent"
  cat >"$NC_AGENT" <<EOF
#!/bin/bash
# ssh stand-in for the herd test cluster in $NC_DIR (tests/netcluster.sh)
table=$NC_DIR/hosts
EOF
  cat >>"$NC_AGENT" <<'EOF'
while [ $# -gt 0 ]; do
  case $1 in
    -[bcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;  # ssh options that take a value
    -*) shift ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then echo "netcluster agent: usage: agent [ssh options] HOST COMMAND..." >&2; exit 255; fi
host=$1; shift
while read -r name ns ip core port; do
  if [ "$host" = "$name" ] || [ "$host" = "$ip" ]; then
    exec taskset -c "$core" ip netns exec "$ns" unshare --uts \
      sh -c 'hostname "$0" && exec sh -c "$*"' "$name" "$@"
  fi
done <"$table"
echo "netcluster agent: no host '$host' in $table" >&2
exit 255
EOF
  chmod +x "$NC_AGENT"
}

# nc_mpirun ARGS...: Open MPI's mpirun on node1 with the hostfile (1 slot per host),
# TCP between hosts only, under timeout $NC_TIMEOUT. --bind-to none keeps each host's
# core: Open MPI's hwloc sees the whole machine and its default binding would widen a
# rank to every core (or, with --bind-to core, put every host's rank on core 0). A
# --bind-to in ARGS comes later and wins.
nc_mpirun() {
  nc_exec "${NC_HOSTS[0]}" timeout -k 5 "$NC_TIMEOUT" mpirun --allow-run-as-root \
    "${NC_MPI_FLAGS[@]}" --hostfile "$NC_DIR/hostfile" --bind-to none "$@"
}

# nc_hydra ARGS...: MPICH's mpiexec.hydra ($NC_HYDRA) on node1 with $NC_HYDRA_FLAGS,
# under timeout $NC_TIMEOUT.
nc_hydra() {
  nc_exec "${NC_HOSTS[0]}" timeout -k 5 "$NC_TIMEOUT" "${NC_HYDRA:-mpiexec.hydra}" \
    "${NC_HYDRA_FLAGS[@]}" "$@"
}

# nc_link_down HOST / nc_link_up HOST: HOST's link leaves / rejoins the bridge. Its
# eth0 stays up with its address (no carrier change, no reset): frames to and from it
# vanish, as when a switch port or cable between machines fails.
nc_link_down() { local p; p=$(nc_field "$1" 5) && ip link set "$p" nomaster; }
nc_link_up() { local p; p=$(nc_field "$1" 5) && ip link set "$p" master "hnc$$br"; }

# nc_pids HOST: the PIDs (in this machine's view) of every process on HOST.
nc_pids() { local ns; ns=$(nc_field "$1" 2) && ip netns pids "$ns"; }
