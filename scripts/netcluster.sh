#!/usr/bin/env bash
# netcluster.sh: an emulated multi-host cluster on one Linux machine, made of network namespaces.
#
#   netcluster.sh up --hosts H --nics K --rate 1gbit [--regions R --between 100mbit] [--prefix shoal]
#   netcluster.sh up --hosts H --nics K --rate 1gbit [--rtt 80ms] [--jitter 5ms] [--loss 0.1%]
#                    [--up 40mbit --down 200mbit] [--regions R --between RATE[,RATE...]
#                    --between-rtt 70ms[,...] [--between-jitter J] [--between-loss L]]
#                    [--queue 25ms] [--mtu 1500] [--wan]
#   netcluster.sh up --layout continents|home [--hosts H] [--nics K]
#   netcluster.sh spec [the options of a WAN-mode up]   (the WAN's spec, for shoal-sim --wan-spec)
#   netcluster.sh down [--prefix shoal]
#   netcluster.sh status [--prefix shoal]
#   netcluster.sh exec HOST [--prefix shoal] -- CMD [ARGS...]
#   netcluster.sh bw FROM TO [--rails 0,1] [--seconds 2] [--cc cubic|bbr] [--prefix shoal]
#   netcluster.sh bw --loopback [HOST] [--seconds 2]
#
# Host h is the network namespace <prefix>-h<h> with K NICs eth0..eth{K-1}. NIC k of every host
# is one end of a veth pair whose other end, <prefix>-h<h>e<k>, is a port of the rail-k bridge
# <prefix>-br<k> in the root namespace: one switch per rail, as in a rail-optimized cluster.
#
# Addresses (all inside 198.18.0.0/15, the benchmarking range of RFC 2544):
#   rail k           198.18.k.0/24                (k = 0..7)
#   host h, rail k   198.18.k.(h+1)               (h = 0..252)
#   root namespace   198.18.0.254 on the rail-0 bridge: where a launcher in the root namespace
#                    hosts the rendezvous store (shoal-run --netns without --master-addr hosts
#                    it inside the first host instead, at 198.18.0.1)
#
# Regions (--regions R, R >= 2): host h is in region h mod R (hosts alternate, as a launcher that
# knows nothing of the regions numbers them). Each region has its own switch per rail,
# <prefix>-r<r>b<k>, where its hosts' NICs are ports; its uplink, the veth pair <prefix>-r<r>u<k>
# (region end) / <prefix>-r<r>d<k> (core end), joins the rail's core bridge <prefix>-br<k>, and
# is shaped at --between each way: every flow between two regions shares the two uplinks (two
# data centres and the link between them). Inside a region hosts meet at --rate.
#
# Shaping: a tbf qdisc at --rate on both ends of every veth: the namespace end shapes what the
# host sends on that NIC, the bridge end what it receives. Traffic between two ranks of one
# host (loopback, shared memory) is not shaped. --rate takes tc's bit rates (100mbit, 1gbit,
# 10gbit) or "none" for unshaped NICs.
#
# WAN mode (any of --rtt --jitter --loss --up --down --between-rtt --between-jitter
# --between-loss --layout --wan): no veth, bridges or tc. Each NIC is a TUN device served by one
# packet forwarder, build/bin/shoal-wan (src/wan), which gives every packet its sender's uplink
# (--up, or --rate), the path's one-way delay (half the RTT), jitter (uniform, so packets
# reorder) and random loss, and the receiver's downlink (--down, or --rate); a stage's queue
# holds --queue of traffic at its rate (tail drop). Packets, not connections: TCP stays end to
# end. With regions, the hosts of two regions meet through one line each way between them
# (--between: one rate for every pair or one per pair, in the order 0-1, 0-2, ..., 1-2, ...;
# --between-rtt likewise), shared by every flow between those regions. Layouts:
#   continents  3 regions (hosts alternate), 1 Gbit/s and 1 ms inside; between them
#               0-1 300 Mbit/s 70 ms, 0-2 200 Mbit/s 140 ms, 1-2 100 Mbit/s 200 ms (RTTs)
#   home        every host its own region, 40 Mbit/s up, 200 Mbit/s down, host h one way
#               7.5-30 ms to the internet (RTTs between hosts 30-120 ms), 0.5% loss a path
#
# `bw` measures throughput from host FROM to host TO with one TCP stream per rail, all at once
# (python3 sockets; no iperf needed), and the RTT (a TCP connect, median of 5); --loopback
# measures an unshaped stream over 127.0.0.1.
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2. See docs/cluster.md.
set -Eeuo pipefail

PROG=${0##*/}
PREFIX=shoal
HOSTS=""
NICS=""
RATE=""
REGIONS=1
BETWEEN=""
RAILS=""
SECONDS_BW=2
LOOPBACK=0
CC=""
WAN=0
LAYOUT=""
RTT=""
JITTER=""
LOSS=""
UP=""
DOWN=""
BETWEEN_RTT=""
BETWEEN_JITTER=""
BETWEEN_LOSS=""
QUEUE=25ms
MTU=1500
WAN_BIN=${SHOAL_WAN:-$(cd "$(dirname "$0")/.." && pwd)/build/bin/shoal-wan}
MAX_HOSTS=253
MAX_NICS=8
STATE_DIR=/run/shoal-netcluster
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3

die() { echo "$PROG: $*" >&2; exit 1; }
usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

ns_name() { echo "$PREFIX-h$1"; }
br_name() { echo "$PREFIX-br$1"; }
port_name() { echo "$PREFIX-h$1e$2"; }     # the bridge end of host $1's NIC $2
region_br() { echo "$PREFIX-r$1b$2"; }      # region $1's switch on rail $2
addr_of() { echo "198.18.$2.$(($1 + 1))"; } # host $1, rail $2
ROOT_ADDR=198.18.0.254

check_prefix() {
  [[ $PREFIX =~ ^[a-z][a-z0-9]{0,7}$ ]] ||
    die "--prefix must be 1-8 lowercase letters or digits, starting with a letter (interface names are limited to 15 characters): '$PREFIX'"
}

need_root() {
  [[ $(id -u) == 0 ]] || die "needs root (network namespaces, veth, bridges, tc)"
  command -v ip >/dev/null || die "needs iproute2's ip (scripts/install-deps.sh)"
  command -v tc >/dev/null || die "needs iproute2's tc (scripts/install-deps.sh)"
}

# rate_bits RATE: the rate in bit/s, or 0 for "none".
rate_bits() {
  local r=${1,,}
  [[ $r == none || $r == 0 ]] && { echo 0; return; }
  [[ $r =~ ^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit|tbit)$ ]] ||
    die "--rate must look like 100mbit, 1gbit, 2.5gbit or none, not '$1'"
  local mult
  case ${BASH_REMATCH[3]} in
    bit) mult=1 ;; kbit) mult=1e3 ;; mbit) mult=1e6 ;; gbit) mult=1e9 ;; tbit) mult=1e12 ;;
  esac
  awk -v n="${BASH_REMATCH[1]}" -v m="$mult" 'BEGIN { printf "%.0f\n", n * m }'
}

# duration_ns DURATION: 80ms, 0.5ms, 500us, 1s or 0 in nanoseconds.
duration_ns() {
  local d=${1,,}
  [[ $d == 0 ]] && { echo 0; return; }
  [[ $d =~ ^([0-9]+(\.[0-9]+)?)(s|ms|us)$ ]] || die "a duration looks like 80ms, 0.5ms, 500us or 1s, not '$1'"
  local mult
  case ${BASH_REMATCH[3]} in s) mult=1e9 ;; ms) mult=1e6 ;; us) mult=1e3 ;; esac
  awk -v n="${BASH_REMATCH[1]}" -v m="$mult" 'BEGIN { printf "%.0f\n", n * m }'
}

# loss_prob LOSS: 0.1% or 0.001 as a probability below 1.
loss_prob() {
  local l=$1
  [[ $l =~ ^([0-9]+(\.[0-9]+)?)(%?)$ ]] || die "a loss looks like 0.1% or 0.001, not '$1'"
  awk -v n="${BASH_REMATCH[1]}" -v pct="${BASH_REMATCH[3]}" -v raw="$1" 'BEGIN {
    p = pct == "%" ? n / 100 : n
    if (p >= 1) { print "loss must be below 100%, not " raw > "/dev/stderr"; exit 1 }
    printf "%.9g\n", p }' || exit 1
}

# nth LIST I: the I-th (0-based) of a comma list, or its only item.
nth() {
  local -a items
  IFS=, read -r -a items <<<"$1"
  if ((${#items[@]} == 1)); then echo "${items[0]}"; else echo "${items[$2]:-}"; fi
}

# add_host_ns NS: a host's namespace, loopback up, IPv6 off.
add_host_ns() {
  ip netns add "$1"
  ip -n "$1" link set lo up
  ip netns exec "$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null || true
  ip netns exec "$1" sysctl -qw net.ipv6.conf.default.disable_ipv6=1 2>/dev/null || true
}

# hosts_present: the host indices whose namespaces exist, sorted.
hosts_present() {
  ip netns list 2>/dev/null | awk '{print $1}' | sed -n "s/^$PREFIX-h\([0-9]\{1,3\}\)\$/\1/p" | sort -n
}

# shape DEV RATE_BITS [NETNS]: tbf at the rate on DEV's egress (in NETNS when given).
shape() {
  local dev=$1 bits=$2 ns=${3:-} burst
  local tcx=(tc)
  [[ -n $ns ]] && tcx=(ip netns exec "$ns" tc)
  ((bits == 0)) && return 0
  # Burst: 2 ms at the rate, at least 64 KiB so that a veth GSO packet (up to 64 KiB) passes
  # whole; latency bounds the queue (about 25 ms of data).
  burst=$(awk -v b="$bits" 'BEGIN { x = b / 8 * 0.002; if (x < 65536 + 4096) x = 65536 + 4096; printf "%.0f", x }')
  "${tcx[@]}" qdisc replace dev "$dev" root tbf rate "$bits"bit burst "$burst" latency 25ms
}

# wan_stop: ends this cluster's shoal-wan (its TUN devices go with it).
wan_stop() {
  local pidfile=$STATE_DIR/$PREFIX.wan.pid pid i
  [[ -f $pidfile ]] || return 0
  pid=$(cat "$pidfile")
  if [[ $pid =~ ^[0-9]+$ ]] && grep -q shoal-wan "/proc/$pid/cmdline" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

cmd_down() {
  check_prefix
  need_root
  local h k link
  wan_stop
  for h in $(hosts_present); do
    ip netns del "$(ns_name "$h")" 2>/dev/null || true  # takes its veth ends, and their peers
  done
  # Bridges, and veth ends whose namespace is already gone (an interrupted `up`).
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
                grep -E "^$PREFIX-(br[0-9]+|h[0-9]+e[0-9]+|r[0-9]+[bud][0-9]+)\$" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  rm -f "$STATE_DIR/$PREFIX.conf" "$STATE_DIR/$PREFIX.wan" "$STATE_DIR/$PREFIX.wan.json"
}

# check_settings: up's settings, a named layout's filled in, checked before anything is made.
check_settings() {
  check_prefix
  if ((WAN)); then
    wan_layout
    NICS=${NICS:-1}
    [[ -n $UP && -n $DOWN ]] && RATE=${RATE:-none}
  fi
  [[ $HOSTS =~ ^[0-9]+$ ]] && ((HOSTS >= 1 && HOSTS <= MAX_HOSTS)) ||
    die "--hosts must be in 1..$MAX_HOSTS"
  [[ $NICS =~ ^[0-9]+$ ]] && ((NICS >= 1 && NICS <= MAX_NICS)) || die "--nics must be in 1..$MAX_NICS"
  [[ -n $RATE ]] || die "--rate is required (e.g. 1gbit, or none)"
  [[ $REGIONS =~ ^[0-9]+$ ]] && ((REGIONS >= 1 && REGIONS <= 9 && REGIONS <= HOSTS)) ||
    die "--regions must be in 1..9 and at most --hosts"
  ((REGIONS == 1)) || [[ -n $BETWEEN ]] || die "--regions needs --between (e.g. 100mbit)"
  if ((WAN)); then
    [[ $MTU =~ ^[0-9]+$ ]] && ((MTU >= 576 && MTU <= 65535)) || die "--mtu must be in 576..65535"
    local v
    for v in "${RTT:-0}" "${JITTER:-0}" "$QUEUE" "${BETWEEN_JITTER:-0}" ${BETWEEN_RTT//,/ }; do
      duration_ns "$v" >/dev/null
    done
    for v in "${LOSS:-0}" "${BETWEEN_LOSS:-0}"; do loss_prob "$v" >/dev/null; done
    for v in "$RATE" "${UP:-$RATE}" "${DOWN:-$RATE}" ${BETWEEN//,/ }; do rate_bits "$v" >/dev/null; done
  fi
}

cmd_up() {
  check_settings
  ((WAN)) && { cmd_up_wan; return; }
  local bits between_bits=0
  bits=$(rate_bits "$RATE")
  ((REGIONS == 1)) || between_bits=$(rate_bits "$BETWEEN")
  need_root
  cmd_down  # re-running recreates cleanly
  trap 'echo "$PROG: up failed; removing what it created" >&2; cmd_down' ERR

  local h k ns br port
  for ((k = 0; k < NICS; k++)); do
    br=$(br_name "$k")
    ip link add "$br" type bridge forward_delay 0 stp_state 0
    # No IPv6 on the switches: no router solicitations or DAD traffic on the wires.
    sysctl -qw "net.ipv6.conf.$br.disable_ipv6=1" 2>/dev/null || true
    ip link set "$br" up
    local r up down
    for ((r = 0; REGIONS > 1 && r < REGIONS; r++)); do
      ip link add "$(region_br "$r" "$k")" type bridge forward_delay 0 stp_state 0
      sysctl -qw "net.ipv6.conf.$(region_br "$r" "$k").disable_ipv6=1" 2>/dev/null || true
      ip link set "$(region_br "$r" "$k")" up
      up=$PREFIX-r${r}u$k down=$PREFIX-r${r}d$k
      ip link add "$up" type veth peer name "$down"
      for dev in "$up" "$down"; do
        sysctl -qw "net.ipv6.conf.$dev.disable_ipv6=1" 2>/dev/null || true
      done
      ip link set "$up" master "$(region_br "$r" "$k")"
      ip link set "$down" master "$br"
      ip link set "$up" up
      ip link set "$down" up
      shape "$up" "$between_bits"    # out of the region
      shape "$down" "$between_bits"  # into it
    done
  done
  # One root address per machine: a second cluster (another --prefix) holding it too would
  # make the root namespace's route to 198.18.0.0/24 ambiguous for both.
  local holder
  holder=$(ip -o -4 addr show to "$ROOT_ADDR/32" | awk '{print $2}' | head -1)
  if [[ -n $holder ]]; then
    echo "$PROG: warning: $ROOT_ADDR is already on $holder (another cluster?); this cluster's" \
         "hosts cannot reach the root namespace (shoal-run --netns without --master-addr" \
         "still works: it hosts the store inside host 0)" >&2
  else
    ip addr add "$ROOT_ADDR/24" dev "$(br_name 0)"
  fi

  for ((h = 0; h < HOSTS; h++)); do
    ns=$(ns_name "$h")
    add_host_ns "$ns"
    for ((k = 0; k < NICS; k++)); do
      port=$(port_name "$h" "$k")
      ip link add "$port" type veth peer name "eth$k" netns "$ns"
      sysctl -qw "net.ipv6.conf.$port.disable_ipv6=1" 2>/dev/null || true
      if ((REGIONS > 1)); then
        ip link set "$port" master "$(region_br $((h % REGIONS)) "$k")"
      else
        ip link set "$port" master "$(br_name "$k")"
      fi
      ip link set "$port" up
      ip -n "$ns" addr add "$(addr_of "$h" "$k")/24" dev "eth$k"
      ip -n "$ns" link set "eth$k" up
      shape "$port" "$bits"
      shape "eth$k" "$bits" "$ns"
    done
  done
  trap - ERR
  mkdir -p "$STATE_DIR"
  printf 'hosts=%s\nnics=%s\nrate=%s\nregions=%s\nbetween=%s\n' "$HOSTS" "$NICS" "$RATE" \
    "$REGIONS" "$BETWEEN" >"$STATE_DIR/$PREFIX.conf"
  echo "$PROG: up: $HOSTS hosts ($(ns_name 0) .. $(ns_name $((HOSTS - 1)))) x $NICS NICs at $RATE;" \
       "$( ((REGIONS > 1)) && echo "$REGIONS regions (host h in region h mod $REGIONS), $BETWEEN between;")" \
       "root namespace address: $([[ -z $holder ]] && echo "$ROOT_ADDR" || echo none)"
}

# wan_layout: a named layout's settings (what the options did not set).
wan_layout() {
  case $LAYOUT in
    "") ;;
    continents)
      HOSTS=${HOSTS:-6}
      REGIONS=3
      RATE=${RATE:-1gbit}
      RTT=${RTT:-1ms}
      BETWEEN=${BETWEEN:-300mbit,200mbit,100mbit}
      BETWEEN_RTT=${BETWEEN_RTT:-70ms,140ms,200ms} ;;
    home)
      HOSTS=${HOSTS:-4}
      UP=${UP:-40mbit}
      DOWN=${DOWN:-200mbit}
      LOSS=${LOSS:-0.5%} ;;
    *) die "--layout takes continents or home, not '$LAYOUT'" ;;
  esac
}

# wan_spec: shoal-wan's spec of this cluster (src/wan/model.hpp's format) on stdout.
wan_spec() {
  local up_bits down_bits regions=$REGIONS h k a b pair=0 root_region
  up_bits=$(rate_bits "${UP:-$RATE}")
  down_bits=$(rate_bits "${DOWN:-$RATE}")
  [[ $LAYOUT == home ]] && regions=$HOSTS  # every home its own region
  root_region=$regions                     # the root namespace: a region of no delay
  echo "regions $((regions + 1))"
  for ((h = 0; h < HOSTS; h++)); do
    for ((k = 0; k < NICS; k++)); do
      echo "endpoint $(ns_name "$h") eth$k $(addr_of "$h" "$k") $up_bits $down_bits $((h % regions))"
    done
  done
  [[ -n ${ROOT_DEV:-} ]] && echo "endpoint - $ROOT_DEV $ROOT_ADDR 0 0 $root_region"
  local delay line jitter loss between_jitter between_loss  # the same for every pair
  jitter=$(duration_ns "${JITTER:-0}")
  loss=$(loss_prob "${LOSS:-0}")
  between_jitter=$(duration_ns "${BETWEEN_JITTER:-0}")
  between_loss=$(loss_prob "${BETWEEN_LOSS:-0}")
  for ((a = 0; a < regions; a++)); do
    for ((b = 0; b < regions; b++)); do
      if [[ $LAYOUT == home ]]; then  # host h is 7.5-30 ms one way from the internet
        delay=$(awk -v a="$a" -v b="$b" -v n="$HOSTS" 'BEGIN {
          d = n > 1 ? 22.5e6 / (n - 1) : 0; printf "%.0f", (a == b ? 0 : 15e6 + (a + b) * d) }')
        echo "path $a $b 0 $delay $jitter $loss"
      elif ((a == b)); then
        delay=$(($(duration_ns "${RTT:-0}") / 2))
        echo "path $a $b 0 $delay $jitter $loss"
      else
        pair=$(awk -v a="$a" -v b="$b" -v r="$regions" 'BEGIN {
          if (a > b) { t = a; a = b; b = t }
          i = 0; for (x = 0; x < a; x++) i += r - 1 - x; print i + b - a - 1 }')
        line=$(nth "$BETWEEN" "$pair")
        [[ -n $line ]] || die "--between has no rate for regions $a-$b (one for all, or one per pair)"
        delay=$(nth "${BETWEEN_RTT:-0}" "$pair")
        [[ -n $delay ]] || die "--between-rtt has no RTT for regions $a-$b (one for all, or one per pair)"
        echo "path $a $b $(rate_bits "$line") $(($(duration_ns "$delay") / 2)) $between_jitter $between_loss"
      fi
    done
  done
  echo "queue_ns $(duration_ns "$QUEUE")"
  echo "mtu $MTU"
  echo "seed 1"
}

# cmd_spec: the spec `up` would hand shoal-wan for these settings, on stdout, with nothing
# created (no root needed): what `shoal-sim run --wan-spec` simulates.
cmd_spec() {
  WAN=1
  check_settings
  ROOT_DEV=""
  wan_spec
}

# cmd_up_wan: the hosts, their NICs TUN devices of one shoal-wan (see the top of this file).
cmd_up_wan() {
  [[ -x $WAN_BIN ]] || die "WAN mode needs $WAN_BIN (make build, or SHOAL_WAN=PATH)"
  need_root
  cmd_down
  trap 'echo "$PROG: up failed; removing what it created" >&2; cmd_down' ERR
  mkdir -p "$STATE_DIR"
  local h k ns holder i pid spec=$STATE_DIR/$PREFIX.wan log=$STATE_DIR/$PREFIX.wan.log
  for ((h = 0; h < HOSTS; h++)); do
    ns=$(ns_name "$h")
    add_host_ns "$ns"
  done
  holder=$(ip -o -4 addr show to "$ROOT_ADDR/32" | awk '{print $2}' | head -1)
  ROOT_DEV=""
  [[ -n $holder ]] || ROOT_DEV=$PREFIX-w0
  wan_spec >"$spec"
  setsid "$WAN_BIN" --spec "$spec" --stats "$STATE_DIR/$PREFIX.wan.json" </dev/null >"$log" 2>&1 &
  pid=$!
  echo "$pid" >"$STATE_DIR/$PREFIX.wan.pid"
  for ((i = 0; i < 100; i++)); do
    grep -qs "^shoal-wan: ready" "$log" && break
    kill -0 "$pid" 2>/dev/null || { local why; why=$(cat "$log"); cmd_down; die "shoal-wan did not start: $why"; }
    sleep 0.1
  done
  grep -qs "^shoal-wan: ready" "$log" || { local why; why=$(cat "$log"); cmd_down; die "shoal-wan did not report ready within 10 s: $why"; }
  for ((h = 0; h < HOSTS; h++)); do
    ns=$(ns_name "$h")
    for ((k = 0; k < NICS; k++)); do
      ip -n "$ns" addr add "$(addr_of "$h" "$k")/24" dev "eth$k"
      ip -n "$ns" link set "eth$k" mtu "$MTU" txqueuelen 1000 up
    done
  done
  if [[ -n $ROOT_DEV ]]; then
    ip addr add "$ROOT_ADDR/24" dev "$ROOT_DEV"
    ip link set "$ROOT_DEV" mtu "$MTU" txqueuelen 1000 up
  else
    echo "$PROG: warning: $ROOT_ADDR is already on $holder (another cluster?); this cluster's" \
         "hosts cannot reach the root namespace" >&2
  fi
  trap - ERR
  printf 'hosts=%s\nnics=%s\nrate=%s\nregions=%s\nbetween=%s\nwan=1\nlayout=%s\nrtt=%s\njitter=%s\nloss=%s\nup=%s\ndown=%s\nbetween_rtt=%s\nqueue=%s\nmtu=%s\n' \
    "$HOSTS" "$NICS" "$RATE" "$REGIONS" "$BETWEEN" "$LAYOUT" "$RTT" "$JITTER" "$LOSS" "$UP" "$DOWN" \
    "$BETWEEN_RTT" "$QUEUE" "$MTU" >"$STATE_DIR/$PREFIX.conf"
  local what="${UP:-$RATE} up, ${DOWN:-$RATE} down${RTT:+, RTT $RTT}${JITTER:+ ± $JITTER}${LOSS:+, loss $LOSS}"
  ((REGIONS > 1)) && what+="; $REGIONS regions (host h in region h mod $REGIONS), $BETWEEN between, RTT ${BETWEEN_RTT:-0}"
  [[ -n $LAYOUT ]] && what+="; layout $LAYOUT"
  echo "$PROG: up (WAN, shoal-wan pid $pid): $HOSTS hosts ($(ns_name 0) .. $(ns_name $((HOSTS - 1)))) x $NICS NICs," \
       "$what; root namespace address: $([[ -n $ROOT_DEV ]] && echo "$ROOT_ADDR" || echo none)"
}

# tbf_rate DEV [NETNS]: the rate of DEV's root tbf, or "unshaped".
tbf_rate() {
  local tcx=(tc)
  [[ -n ${2:-} ]] && tcx=(ip netns exec "$2" tc)
  "${tcx[@]}" qdisc show dev "$1" root 2>/dev/null |
    awk '/tbf/ { for (i = 1; i < NF; i++) if ($i == "rate") { print $(i + 1); found = 1 } }
         END { if (!found) print "unshaped" }'
}

cmd_status() {
  check_prefix
  need_root
  local hosts h k ns br dev addr
  hosts=$(hosts_present)
  if [[ -z $hosts ]]; then
    echo "$PROG: no cluster with prefix '$PREFIX'"
    return 0
  fi
  [[ -f $STATE_DIR/$PREFIX.conf ]] && echo "config: $(tr '\n' ' ' <"$STATE_DIR/$PREFIX.conf")"
  local pid wan=0
  if [[ -f $STATE_DIR/$PREFIX.wan.pid ]]; then
    wan=1
    pid=$(cat "$STATE_DIR/$PREFIX.wan.pid")
    if kill -USR1 "$pid" 2>/dev/null; then
      sleep 0.2  # it writes its counters on SIGUSR1
      echo "shoal-wan: pid $pid, counters $(cat "$STATE_DIR/$PREFIX.wan.json" 2>/dev/null)"
    else
      echo "shoal-wan: pid $pid NOT RUNNING (log: $STATE_DIR/$PREFIX.wan.log): the hosts are cut off"
    fi
  fi
  for br in $(ip -o link show type bridge | awk -F': ' '{print $2}' | grep -E "^$PREFIX-br[0-9]+\$" | sort -V); do
    addr=$(ip -o -4 addr show dev "$br" | awk '{print $4}' | paste -sd, -)
    echo "bridge $br: ${addr:-no address} ($(ip -o link show master "$br" | wc -l) ports)"
  done
  for h in $hosts; do
    ns=$(ns_name "$h")
    echo "host $h: netns $ns"
    for dev in $(ip -n "$ns" -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E '^eth[0-9]+$' | sort -V); do
      k=${dev#eth}
      addr=$(ip -n "$ns" -o -4 addr show dev "$dev" | awk '{print $4}' | paste -sd, -)
      if ((wan)); then
        printf '  %-5s %-16s TUN device of shoal-wan (rates and delays: config above)\n' "$dev" "${addr:-no address}"
      else
        printf '  %-5s %-16s out %-10s in %-10s (bridge port %s)\n' "$dev" "${addr:-no address}" \
          "$(tbf_rate "$dev" "$ns")" "$(tbf_rate "$(port_name "$h" "$k")")" "$(port_name "$h" "$k")"
      fi
    done
  done
}

# resolve_host H: H as an index or a namespace name; prints the namespace name.
resolve_host() {
  local ns
  if [[ $1 =~ ^[0-9]+$ ]]; then ns=$(ns_name "$1"); else ns=$1; fi
  ip netns list | awk '{print $1}' | grep -qx -- "$ns" || die "no host '$1' (no namespace $ns; see $PROG status)"
  echo "$ns"
}

cmd_exec() {
  need_root
  local ns
  ns=$(resolve_host "$1")
  shift
  exec ip netns exec "$ns" "$@"
}

# The throughput probe: "recv ADDR... " listens on each address (port 5201) and prints Gbit/s
# per stream and in total; "send SECONDS ADDR..." sends to each address at once for SECONDS;
# "rtt ADDR..." times connects to a closed port (refused after one round trip), median of 5.
read -r -d '' BW_PY <<'EOF' || true
import socket, sys, threading, time
PORT = 5201
mode, args = sys.argv[1], sys.argv[2:]
if mode == "recv":
    results, lock = {}, threading.Lock()
    listeners = []
    for a in args:
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((a, PORT)); s.listen(1); listeners.append((a, s))
    print("ready", flush=True)
    def serve(a, s):
        s.settimeout(30)
        c, _ = s.accept()
        buf = bytearray(4 << 20); view = memoryview(buf); n = 0; t0 = None
        while True:
            k = c.recv_into(view)
            if not k: break
            if t0 is None: t0 = time.monotonic()
            n += k
        with lock: results[a] = (n, t0, time.monotonic())
    ts = [threading.Thread(target=serve, args=l) for l in listeners]
    [t.start() for t in ts]; [t.join() for t in ts]
    total = sum(r[0] for r in results.values())
    span = max(r[2] for r in results.values()) - min(r[1] for r in results.values())
    for a in args:
        n, t0, t1 = results[a]
        print("stream to %s: %.4f Gbit/s (%d MB in %.2f s)" % (a, n * 8 / (t1 - t0) / 1e9, n >> 20, t1 - t0))
    print("total: %.4f Gbit/s" % (total * 8 / span / 1e9))
elif mode == "rtt":
    for a in args:
        times = []
        for _ in range(5):
            s = socket.socket(); s.settimeout(3); t0 = time.monotonic()
            try:
                s.connect((a, 5209))
            except ConnectionRefusedError:
                times.append(time.monotonic() - t0)
            except OSError:
                pass  # a SYN or its reset lost: not a round trip
            s.close()
        if times:
            times.sort()
            print("rtt to %s: %.2f ms (TCP connect refused, median of %d)" % (a, times[len(times) // 2] * 1e3, len(times)))
        else:
            print("rtt to %s: no answer in 5 tries" % a)
else:
    secs, cc = float(args[0]), args[1]
    def send(a):
        for _ in range(100):
            c = socket.socket()
            if cc:  # the sender's congestion control decides a lossy link's goodput
                try:
                    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
                except OSError as e:
                    sys.exit("congestion control %s: %s (see net.ipv4.tcp_available_congestion_control)" % (cc, e))
            try:
                c.connect((a, PORT)); break
            except OSError:
                c.close(); time.sleep(0.05)
        else:
            sys.exit("cannot connect to %s:%d" % (a, PORT))
        data = b"\0" * (1 << 20); end = time.monotonic() + secs
        while time.monotonic() < end: c.sendall(data)
        c.close()
    ts = [threading.Thread(target=send, args=(a,)) for a in args[2:]]
    [t.start() for t in ts]; [t.join() for t in ts]
EOF

# bw_run RECV_NS SEND_NS ADDR...: one probe; the receiver's report on stdout.
bw_run() {
  local rns=$1 sns=$2 fifo rpid
  shift 2
  fifo=$(mktemp -u /tmp/netcluster-bw.XXXXXX)
  mkfifo "$fifo"
  ip netns exec "$rns" "$PY" -c "$BW_PY" recv "$@" >"$fifo" &
  rpid=$!
  exec 9<"$fifo"
  rm -f "$fifo"
  read -r -t 10 _ <&9 || { kill "$rpid" 2>/dev/null; die "bw: the receiver did not start"; }
  ip netns exec "$sns" "$PY" -c "$BW_PY" rtt "$@"
  if ! ip netns exec "$sns" "$PY" -c "$BW_PY" send "$SECONDS_BW" "$CC" "$@"; then
    kill "$rpid" 2>/dev/null
    die "bw: the sender failed"
  fi
  cat <&9
  exec 9<&-
  wait "$rpid"
}

cmd_bw() {
  need_root
  local from to rails addrs=() k
  if ((LOOPBACK)); then
    from=$(resolve_host "${1:-0}")
    bw_run "$from" "$from" 127.0.0.1
    return
  fi
  (($# == 2)) || die "bw needs FROM and TO hosts (or --loopback)"
  from=$(resolve_host "$1")
  to=$(resolve_host "$2")
  [[ $from != "$to" ]] || die "bw: FROM and TO are the same host; use --loopback"
  rails=${RAILS:-0}
  for k in ${rails//,/ }; do
    [[ $k =~ ^[0-9]+$ ]] || die "--rails takes rail numbers like 0,1"
    addrs+=("$(addr_of "${to#"$PREFIX"-h}" "$k")")
  done
  bw_run "$to" "$from" "${addrs[@]}"
}

(($# >= 1)) || usage
CMD=$1
shift
POS=()
while (($#)); do
  case $1 in
    --hosts) HOSTS=${2:?}; shift 2 ;;
    --nics) NICS=${2:?}; shift 2 ;;
    --rate) RATE=${2:?}; shift 2 ;;
    --regions) REGIONS=${2:?}; shift 2 ;;
    --between) BETWEEN=${2:?}; shift 2 ;;
    --prefix) PREFIX=${2:?}; shift 2 ;;
    --rails) RAILS=${2:?}; shift 2 ;;
    --seconds) SECONDS_BW=${2:?}; shift 2 ;;
    --loopback) LOOPBACK=1; shift ;;
    --cc) CC=${2:?}; shift 2 ;;
    --wan) WAN=1; shift ;;
    --layout) LAYOUT=${2:?}; WAN=1; shift 2 ;;
    --rtt) RTT=${2:?}; WAN=1; shift 2 ;;
    --jitter) JITTER=${2:?}; WAN=1; shift 2 ;;
    --loss) LOSS=${2:?}; WAN=1; shift 2 ;;
    --up) UP=${2:?}; WAN=1; shift 2 ;;
    --down) DOWN=${2:?}; WAN=1; shift 2 ;;
    --between-rtt) BETWEEN_RTT=${2:?}; WAN=1; shift 2 ;;
    --between-jitter) BETWEEN_JITTER=${2:?}; WAN=1; shift 2 ;;
    --between-loss) BETWEEN_LOSS=${2:?}; WAN=1; shift 2 ;;
    --queue) QUEUE=${2:?}; shift 2 ;;
    --mtu) MTU=${2:?}; shift 2 ;;
    --) shift; break ;;
    -h|--help) usage ;;
    -*) die "unknown option '$1'" ;;
    *) POS+=("$1"); shift ;;
  esac
done
check_prefix
case $CMD in
  up) ((${#POS[@]} == 0)) || die "up takes no arguments: ${POS[*]}"; cmd_up ;;
  spec) ((${#POS[@]} == 0)) || die "spec takes no arguments: ${POS[*]}"; cmd_spec ;;
  down) cmd_down ;;
  status) cmd_status ;;
  exec)
    ((${#POS[@]} == 1)) || die "usage: $PROG exec HOST [--prefix P] -- CMD [ARGS...]"
    (($# >= 1)) || die "exec: missing CMD after --"
    cmd_exec "${POS[0]}" "$@" ;;
  bw) cmd_bw "${POS[@]}" ;;
  -h|--help|help) usage ;;
  *) die "unknown command '$CMD' (up, spec, down, status, exec, bw)" ;;
esac
