#!/usr/bin/env bash
# An emulated cluster on one machine: N hosts, each a network namespace with its
# own host name and address, on one bridge; a launcher namespace runs a command
# (normally mpirun) that reaches the hosts through a namespace "rsh" agent.
#
#   tests/cluster/cluster.sh [options] N -- command [args...]
#
# Options (each may be given once, --loss-host several times):
#   --rate RATE        limit every link to RATE in both directions (tc tbf, e.g. 100mbit)
#   --burst BYTES      bytes a link may send at once above RATE (tbf burst; default 16kb).
#                      A real link has none: 3kb (two full frames) keeps even small
#                      messages at the link's speed
#   --loss PCT         every host drops PCT % of the multicast UDP datagrams it receives (nftables)
#   --loss-host K=PCT  host K (1..N) drops PCT % instead
#   --send-loss PCT    every host drops PCT % of the multicast UDP packets its processes
#                      send (nftables, output hook): the send fails ("Operation not
#                      permitted"); a batch that UDP segmentation offload sends is one packet there
#   --no-multicast K   host K's interface has no MULTICAST flag
#   --slots S          CLUSTER_HOSTS offers S slots per host (S ranks per host)
#   --slots-host K=S   host K (1..N) offers S slots instead
#   --mtu BYTES        the MTU of every link (default 1500; 9000: jumbo frames)
#   --mtu-host K=BYTES host K's link has this MTU instead
#   --no-ipv4 HOSTS    these hosts get no IPv4 address: "all" (the launcher too) or a
#                      comma-separated list of K (1..N)
#   --no-ula HOSTS     these hosts get no unique-local IPv6 address, only the automatic
#                      link-local one (fe80::/64); "all" or a list as for --no-ipv4
#   --dad              hosts run duplicate address detection as real ones do: their
#                      link-local addresses are unusable (tentative) for a second or two
#
# The command runs inside the launcher namespace with these variables set:
#   CLUSTER_HOSTS   comma-separated host names (for mpirun --host)
#   CLUSTER_SUBNET  the hosts' IPv4 subnet in CIDR form
#   CLUSTER_SUBNET6 the hosts' IPv6 subnet (unique local addresses) in CIDR form
#   CLUSTER_MPIRUN  mpirun options that launch through the namespaces; with
#                   --no-ipv4 they name the interface (eth0) instead of the IPv4
#                   subnet, so that Open MPI's own traffic runs over IPv6
# Names and subnet are unique per run; every namespace is deleted when the run
# ends, fails or is interrupted. Nothing is created in the machine's own
# network namespace, and no address outside the cluster is ever used.
set -euo pipefail

usage() { echo "usage: $0 [--rate R] [--burst B] [--loss PCT] [--loss-host K=PCT] [--send-loss PCT] [--no-multicast K] [--slots S] [--slots-host K=S] [--mtu BYTES] [--mtu-host K=BYTES] [--no-ipv4 HOSTS] [--no-ula HOSTS] [--dad] N -- command [args...]" >&2; exit 2; }
rate="" burst=16kb loss=0 send_loss=0 slots=1 no_mcast="" no_ipv4="" no_ula="" dad=0 mtu=1500
hosts_arg() { [[ "$1" =~ ^(all|[0-9]+(,[0-9]+)*)$ ]] || usage; }
# Whether host $2 is in the list $1 ("all" names the launcher, 0, too).
listed() { [ "$1" = all ] || [[ ",$1," == *",$2,"* ]]; }
declare -A host_loss=() host_mtu=() host_slots=()
pct() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -le 100 ] || usage; }
while [ $# -gt 0 ]; do
    case "$1" in
        --rate) [ $# -ge 2 ] || usage; rate=$2; shift 2 ;;
        --burst) [ $# -ge 2 ] || usage; burst=$2; shift 2 ;;
        --loss) [ $# -ge 2 ] || usage; pct "$2"; loss=$2; shift 2 ;;
        --loss-host) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+=[0-9]+$ ]] || usage
                     pct "${2#*=}"; host_loss[${2%%=*}]=${2#*=}; shift 2 ;;
        --send-loss) [ $# -ge 2 ] || usage; pct "$2"; send_loss=$2; shift 2 ;;
        --no-multicast) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || usage; no_mcast=$2; shift 2 ;;
        --slots) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || usage; slots=$2; shift 2 ;;
        --slots-host) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+=[1-9][0-9]*$ ]] || usage
                      host_slots[${2%%=*}]=${2#*=}; shift 2 ;;
        --mtu) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || usage; mtu=$2; shift 2 ;;
        --mtu-host) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+=[0-9]+$ ]] || usage
                    host_mtu[${2%%=*}]=${2#*=}; shift 2 ;;
        --no-ipv4) [ $# -ge 2 ] || usage; hosts_arg "$2"; no_ipv4=$2; shift 2 ;;
        --no-ula) [ $# -ge 2 ] || usage; hosts_arg "$2"; no_ula=$2; shift 2 ;;
        --dad) dad=1; shift ;;
        *) break ;;
    esac
done
[ $# -ge 3 ] && [ "$2" = "--" ] || usage
n=$1; shift 2
[[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] || usage
[ "$(id -u)" = 0 ] || { echo "$0: needs root (ip netns)" >&2; exit 2; }

id="ipmc$$x$RANDOM"
net="10.$((RANDOM % 200 + 20)).$((RANDOM % 250))"
net6="fd$(printf '%02x' $((RANDOM % 256))):$(printf '%x' $RANDOM):$(printf '%x' $RANDOM)::"
sw="${id}sw"
work=$(mktemp -d)
created=()

cleanup() {
    local ns
    for ns in "${created[@]}"; do ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true; done
    for ns in "${created[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$sw"; created+=("$sw")
ip -n "$sw" link add br0 type bridge
# No IGMP querier on this segment: flood multicast rather than let snooped
# memberships expire in long runs.
ip -n "$sw" link set br0 type bridge mcast_snooping 0
ip -n "$sw" link set br0 mtu 65535 2>/dev/null || true
ip -n "$sw" link set br0 up

# Makes host $1 drop $2 % of the UDP multicast packets at nftables hook $3
# (input: those it receives; output: those its processes send), each packet
# matched by one of the rules $4...
drop_multicast() {
    local h=$1 pct=$2 hook=$3 rules="" match
    shift 3
    # numgen yields 0..99, and nft refuses "< 100": drop all without it.
    local chance="numgen random mod 100 < $pct"
    if [ "$pct" -ge 100 ]; then chance=""; fi
    for match in "$@"; do rules+="        meta l4proto udp $match $chance drop"$'\n'; done
    ip netns exec "$h" nft -f - <<NFT
table inet ipmc_loss_$hook {
    chain $hook {
        type filter hook $hook priority 0;
$rules    }
}
NFT
}

hosts=()
for i in $(seq 0 "$n"); do
    h="${id}h$i"
    ip netns add "$h"; created+=("$h")
    # Addresses usable at once: no duplicate address detection on a private bridge.
    if [ "$dad" = 0 ]; then
        ip netns exec "$h" sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
    fi
    ip link add eth0 netns "$h" type veth peer name "p$i" netns "$sw"
    # The switch's ports take the largest frame; each host's link its own MTU.
    ip -n "$sw" link set "p$i" mtu "$(( ${host_mtu[$i]:-$mtu} > mtu ? ${host_mtu[$i]:-$mtu} : mtu ))"
    ip -n "$h" link set eth0 mtu "${host_mtu[$i]:-$mtu}"
    ip -n "$sw" link set "p$i" master br0
    ip -n "$sw" link set "p$i" up
    ip -n "$h" link set lo up
    ip -n "$h" link set eth0 up
    if ! listed "$no_ipv4" "$i"; then
        ip -n "$h" addr add "$net.$((i + 1))/24" dev eth0
        ip -n "$h" route add 224.0.0.0/4 dev eth0
    fi
    if ! listed "$no_ula" "$i"; then ip -n "$h" addr add "$net6$((i + 1))/64" dev eth0 nodad; fi
    if [ -n "$rate" ]; then
        # Both directions of the link: the host's sending side and the switch port towards it.
        ip netns exec "$h" tc qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 200ms
        ip netns exec "$sw" tc qdisc add dev "p$i" root tbf rate "$rate" burst "$burst" latency 200ms
    fi
    if [ "$i" -eq 0 ]; then continue; fi  # the launcher
    s=${host_slots[$i]:-$slots}
    if [ "$s" -gt 1 ]; then hosts+=("$h:$s"); else hosts+=("$h"); fi
    drop=${host_loss[$i]:-$loss}
    if [ "$drop" -gt 0 ]; then
        drop_multicast "$h" "$drop" input "meta pkttype multicast"
    fi
    if [ "$send_loss" -gt 0 ]; then
        # A sent packet's type is the host's until it leaves: match the address.
        drop_multicast "$h" "$send_loss" output "ip daddr 224.0.0.0/4" "ip6 daddr ff00::/8"
    fi
    if [ "$i" = "$no_mcast" ]; then ip -n "$h" link set eth0 multicast off; fi
done

# mpirun starts its daemon on host hK by calling this agent with "hK command...".
cat > "$work/rsh" <<'AGENT'
#!/bin/sh
h=$1; shift
# No exec before the command: PRRTE's (5.0) starts with variable assignments.
exec ip netns exec "$h" unshare --uts sh -c "hostname $h; $*"
AGENT
chmod +x "$work/rsh"

export CLUSTER_HOSTS
CLUSTER_HOSTS=$(IFS=,; echo "${hosts[*]}")
export CLUSTER_SUBNET="$net.0/24"
export CLUSTER_SUBNET6="$net6/64"
nets=$CLUSTER_SUBNET
if [ -n "$no_ipv4" ]; then nets=eth0; fi
# The launcher's options differ by series: ORTE (Open MPI 4.1) and PRRTE (5.0).
if ompi_info --version 2>/dev/null | grep -q 'Open MPI) 5\.\|Open MPI v5\.'; then
    # PRRTE binds each rank to a core by default: the hosts share the machine's.
    export CLUSTER_MPIRUN="--prtemca plm_ssh_agent $work/rsh --bind-to none --mca btl tcp,self --mca btl_tcp_if_include $nets"
else
    export CLUSTER_MPIRUN="--mca plm_rsh_agent $work/rsh --mca btl tcp,self --mca btl_tcp_if_include $nets --mca oob_tcp_if_include $nets"
fi
ip netns exec "${id}h0" unshare --uts sh -c 'hostname launcher; exec "$@"' sh "$@"
