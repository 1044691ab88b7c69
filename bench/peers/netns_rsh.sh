#!/usr/bin/env bash
# netns_rsh.sh: an "ssh" for MPI launchers whose hosts are network namespaces (scripts/netcluster.sh).
#
#   netns_rsh.sh [ssh-style options...] HOST COMMAND...
#
# Runs COMMAND (one string or several words, as ssh joins them) with `sh -c` inside the network
# namespace HOST (`ip netns exec HOST`). Options before HOST (ssh's -x, -q, -o X, -p N) are
# ignored. bench/compare.sh --netns hands it to Open MPI (--mca plm_rsh_agent) and to MPICH's
# Hydra (-launcher ssh -launcher-exec), whose daemons (orted, hydra_pmi_proxy) then start in
# the emulated hosts and start the ranks there. Needs root.
set -euo pipefail
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-p|-l|-i|-F|-E) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || { echo "netns_rsh.sh: usage: netns_rsh.sh [options] HOST COMMAND..." >&2; exit 255; }
host="$1"; shift
# Every namespace has the machine's hostname, so Open MPI's per-host files (session directory,
# vader's shared-memory segments, named after the hostname and the job) would collide between
# hosts: give each emulated host its own directories.
case "$host" in *[!A-Za-z0-9_.-]*) echo "netns_rsh.sh: bad host name '$host'" >&2; exit 255 ;; esac
dir="${TMPDIR:-/tmp}/netns_rsh.$host"
mkdir -p "$dir" "/dev/shm/netns_rsh.$host"
export OMPI_MCA_orte_tmpdir_base="$dir" OMPI_MCA_btl_vader_backing_directory="/dev/shm/netns_rsh.$host"
exec ip netns exec "$host" /bin/sh -c "$*"
