#!/usr/bin/env bash
# Installs every Debian package shoal needs to build, test and benchmark.
# Idempotent: packages already present are skipped, and apt runs only when something is missing.
set -euo pipefail

packages=(
  build-essential g++ cmake make pkg-config git
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libcli11-dev libfmt-dev nlohmann-json3-dev
  libsodium-dev                   # HMAC-SHA256 of the transport's authentication (SHOAL_AUTH_KEY)
  openmpi-bin libopenmpi-dev      # Open MPI: a launcher we support and a peer we benchmark against
  libgloo-dev                     # Gloo: a peer we benchmark against
  mpich libmpich-dev              # MPICH: a peer (mpicc.mpich, mpiexec.mpich; Open MPI stays the default mpicc/mpirun)
  python3-matplotlib              # bench/plot.py: the benchmark figures
  python3-torch                   # torchrun: a launcher we support
  libtorch-dev pybind11-dev python3-pybind11 python3-dev   # the torch.distributed backend (src/torch)
  python3-pytest                  # its tests (tests/python)
  fortunes                        # the text corpus SWARM trains on (shoal-swarm, docs/swarm.md)
  clang libclang-rt-14-dev        # make test-sanitize: ASan/UBSan builds and the libFuzzer targets (CI runs them)
  iproute2 procps psmisc
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
