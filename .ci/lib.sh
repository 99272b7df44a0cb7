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
