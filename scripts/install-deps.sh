#!/usr/bin/env bash
# Installs everything shoal needs to build, test and benchmark: Debian's packages, then the
# pinned Python packages of python/requirements.txt (torch 2.x among them) into the project's
# virtual environment .venv. Idempotent: packages already present are skipped, apt runs only when
# something is missing, and pip only when the requirements changed since .venv was last filled.
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
  python3-venv python3-dev        # .venv (torch, torchrun, pytest) and the backend's Python headers
  fortunes                        # the text corpus SWARM trains on (shoal-swarm, docs/swarm.md)
  clang libclang-rt-14-dev        # make test-sanitize: ASan/UBSan builds and the libFuzzer targets (CI runs them)
  clang-format                    # make format-check: the tree's layout (CI checks it)
  libc++-dev libc++abi-dev        # make build-libcxx: the library and tools with clang and libc++ (CI builds them)
  etcd-server etcd-client         # EtcdStore and the SWARM registry with no single point of failure
  iproute2 procps psmisc
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} Debian packages present"
else
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The project's Python (Debian's interpreter, so that the venv does not depend on a pyenv or
# whatever python3 comes first on PATH). The stamp holds the requirements it was filled from.
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$root/.venv
req=$root/python/requirements.txt
stamp=$venv/.requirements
if [ -x "$venv/bin/python" ] && cmp -s "$req" "$stamp"; then
  echo "install-deps: $venv matches python/requirements.txt"
  exit 0
fi
echo "install-deps: filling $venv from python/requirements.txt"
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
cp "$req" "$stamp"
