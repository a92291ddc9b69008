#!/usr/bin/env bash
# The Quick start of README.md on a fresh clone, timed: the install, the example, the tests;
# the installed binary's size and what target/ holds after.
#
#   benches/first_hour.sh [DIR]      # DIR: where to clone (default: a new folder in $TMPDIR)
#
# Run it from a checkout; it clones HEAD, so uncommitted changes are not measured. Nothing
# else runs in the clone first: every dependency is built from scratch, as for a new user
# (crates already downloaded are not downloaded again).
set -euo pipefail
src=$(git rev-parse --show-toplevel)
dir=${1:-$(mktemp -d)}
mkdir -p "$dir"
clone="$dir/swarm"
rm -rf "$clone" "$dir/root"
git clone -q "$src" "$clone"
cd "$clone"
unset CARGO_TARGET_DIR
step() {
  local name=$1 start
  shift
  start=$(date +%s.%N)
  "$@" > "$dir/$name.log" 2>&1 || { echo "$name failed: $dir/$name.log" >&2; exit 1; }
  printf '%-8s %7.1f s\n' "$name" "$(echo "$(date +%s.%N) - $start" | bc)"
}
echo "first hour of $(git rev-parse --short HEAD) on $(nproc) cores, in $dir"
step install cargo install --locked --path . --root "$dir/root"
step demo env SWARM_BIN="$dir/root/bin/swarm" examples/demo.sh
step tests cargo test --release --locked
printf 'binary   %s bytes\n' "$(stat -c %s "$dir/root/bin/swarm")"
printf 'target/  %s\n' "$(du -sh target | cut -f1)"
