#!/usr/bin/env bash
# netcluster.sh: an emulated multi-host cluster on one Linux machine, made of network namespaces.
#
#   netcluster.sh up --hosts H --nics K --rate 1gbit [--regions R --between 100mbit] [--prefix shoal]
#   netcluster.sh down [--prefix shoal]
#   netcluster.sh status [--prefix shoal]
#   netcluster.sh exec HOST [--prefix shoal] -- CMD [ARGS...]
#   netcluster.sh bw FROM TO [--rails 0,1] [--seconds 2] [--prefix shoal]
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
# `bw` measures throughput from host FROM to host TO with one TCP stream per rail, all at once
# (python3 sockets; no iperf needed); --loopback measures an unshaped stream over 127.0.0.1.
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
MAX_HOSTS=253
MAX_NICS=8
STATE_DIR=/run/shoal-netcluster
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3

die() { echo "$PROG: $*" >&2; exit 1; }
usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

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

cmd_down() {
  check_prefix
  need_root
  local h k link
  for h in $(hosts_present); do
    ip netns del "$(ns_name "$h")" 2>/dev/null || true  # takes its veth ends, and their peers
  done
  # Bridges, and veth ends whose namespace is already gone (an interrupted `up`).
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
                grep -E "^$PREFIX-(br[0-9]+|h[0-9]+e[0-9]+|r[0-9]+[bud][0-9]+)\$" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  rm -f "$STATE_DIR/$PREFIX.conf"
}

cmd_up() {
  check_prefix
  [[ $HOSTS =~ ^[0-9]+$ ]] && ((HOSTS >= 1 && HOSTS <= MAX_HOSTS)) ||
    die "--hosts must be in 1..$MAX_HOSTS"
  [[ $NICS =~ ^[0-9]+$ ]] && ((NICS >= 1 && NICS <= MAX_NICS)) || die "--nics must be in 1..$MAX_NICS"
  [[ -n $RATE ]] || die "--rate is required (e.g. 1gbit, or none)"
  [[ $REGIONS =~ ^[0-9]+$ ]] && ((REGIONS >= 1 && REGIONS <= 9 && REGIONS <= HOSTS)) ||
    die "--regions must be in 1..9 and at most --hosts"
  ((REGIONS == 1)) || [[ -n $BETWEEN ]] || die "--regions needs --between (e.g. 100mbit)"
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
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null || true
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.default.disable_ipv6=1 2>/dev/null || true
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
      printf '  %-5s %-16s out %-10s in %-10s (bridge port %s)\n' "$dev" "${addr:-no address}" \
        "$(tbf_rate "$dev" "$ns")" "$(tbf_rate "$(port_name "$h" "$k")")" "$(port_name "$h" "$k")"
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
# per stream and in total; "send SECONDS ADDR..." sends to each address at once for SECONDS.
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
        print("stream to %s: %.3f Gbit/s (%d MB in %.2f s)" % (a, n * 8 / (t1 - t0) / 1e9, n >> 20, t1 - t0))
    print("total: %.3f Gbit/s" % (total * 8 / span / 1e9))
else:
    secs = float(args[0])
    def send(a):
        for _ in range(100):
            try:
                c = socket.create_connection((a, PORT)); break
            except OSError:
                time.sleep(0.05)
        else:
            sys.exit("cannot connect to %s:%d" % (a, PORT))
        data = b"\0" * (1 << 20); end = time.monotonic() + secs
        while time.monotonic() < end: c.sendall(data)
        c.close()
    ts = [threading.Thread(target=send, args=(a,)) for a in args[1:]]
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
  if ! ip netns exec "$sns" "$PY" -c "$BW_PY" send "$SECONDS_BW" "$@"; then
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
    --) shift; break ;;
    -h|--help) usage ;;
    -*) die "unknown option '$1'" ;;
    *) POS+=("$1"); shift ;;
  esac
done
check_prefix
case $CMD in
  up) ((${#POS[@]} == 0)) || die "up takes no arguments: ${POS[*]}"; cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  exec)
    ((${#POS[@]} == 1)) || die "usage: $PROG exec HOST [--prefix P] -- CMD [ARGS...]"
    (($# >= 1)) || die "exec: missing CMD after --"
    cmd_exec "${POS[0]}" "$@" ;;
  bw) cmd_bw "${POS[@]}" ;;
  -h|--help|help) usage ;;
  *) die "unknown command '$CMD' (up, down, status, exec, bw)" ;;
esac
