# shellcheck shell=bash
# What the .ci/ scripts share; sourced, never run:
#
#   source "$(dirname "$0")/lib.sh"
#
# Sets `checkout` (this checkout's absolute path) and `sudo` (empty for root, else "sudo"), and
# defines:
#   t WHAT START          prints "<script>: WHAT in N s" (START: a $SECONDS value)
#   apt_install PACKAGE...   installs Debian packages (apt-get, quiet, non-interactive)
#   sid_root_dir NAME     the folder of the sid root NAME: target/ci/sid-NAME, or NAME itself
#                         when it holds a `/` (an absolute path, e.g. a CI runner's temp folder)
#   ensure_root NAME PACKAGES   makes the sid root NAME with PACKAGES unless it has them
#                               (.ci/sid-root is the one maker of Debian roots)
#   write_wrapper DIR NAME COMMAND [ARG...]   writes DIR/NAME, a sh script that runs COMMAND
#                                             ARG... with its own arguments appended
#   install_cluster_tools   installs what the emulated cluster and its tests need (Open MPI,
#                           PMIx, Slurm, munge and its key, nftables), each only when missing
checkout=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

t() { echo "$(basename "$0"): $1 in $((SECONDS - $2)) s"; }

apt_install() {
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

sid_root_dir() {
  case "$1" in
    */*) printf '%s\n' "$1" ;;
    *) printf '%s\n' "$checkout/target/ci/sid-$1" ;;
  esac
}

ensure_root() { "$checkout/.ci/sid-root" "$1" "$2" -- true; }

write_wrapper() {
  local dir=$1 name=$2
  shift 2
  mkdir -p "$dir"
  {
    printf '#!/bin/sh\nexec'
    printf ' %q' "$@"
    printf ' "$@"\n'
  } >"$dir/$name"
  chmod +x "$dir/$name"
}

# What the emulated cluster needs (crates/symmem-cluster, its tests and `.ci/cluster`), each
# piece detected by the file itself and installed when missing: Open MPI's launcher, PMIx's
# header and library (Debian and Ubuntu put the headers in /usr/lib/<triplet>/pmix2/include),
# nsenter and unshare; Slurm's daemons, srun, sinfo and its PMIx plugin, munge, and nftables
# (a test cuts node-b off by its address); and munge's key, which the nodes' munged share.
install_cluster_tools() {
  local file missing=()
  for file in /usr/bin/mpirun /usr/bin/nsenter /usr/bin/unshare \
    "/usr/lib/*-linux-gnu/pmix2/include/pmix.h" "/usr/lib/*-linux-gnu/libpmix.so.2"; do
    compgen -G "$file" >/dev/null || missing+=("$file")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "cluster: missing ${missing[*]}: installing openmpi-bin libopenmpi-dev libpmix-dev util-linux"
    apt_install openmpi-bin libopenmpi-dev libpmix-dev util-linux
  fi
  missing=()
  for file in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/munged /usr/bin/srun /usr/bin/sinfo \
    "/usr/lib/*-linux-gnu/slurm-wlm/mpi_pmix*.so" /usr/sbin/nft; do
    compgen -G "$file" >/dev/null || missing+=("$file")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "cluster: missing ${missing[*]}: installing slurmctld slurmd slurm-client munge slurm-wlm-basic-plugins nftables"
    apt_install slurmctld slurmd slurm-client munge slurm-wlm-basic-plugins nftables
  fi
  if ! $sudo test -f /etc/munge/munge.key; then
    $sudo mungekey --create --keyfile=/etc/munge/munge.key
    $sudo chown munge:munge /etc/munge/munge.key
    $sudo chmod 0600 /etc/munge/munge.key
  fi
}
