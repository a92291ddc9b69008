#!/usr/bin/env bash
# Runs swarm's main job on a real example, with no network and no API key:
# copies fixtures/inventory (a small Python package) into a fresh git repository, renames
# fetch_data to load_data in every file that uses it (one task per file, 4 workers, `sed` as
# the worker), then runs the package's own tests on the merged result.
#
#   examples/demo.sh [DIR]     (DIR: where to create the demo repository; default: a temp dir)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# swarm: $SWARM_BIN, else the one cargo built here (wherever CARGO_TARGET_DIR puts it), else
# the one on PATH (cargo install).
target=$(cd "$here" && cargo metadata --format-version 1 --no-deps 2>/dev/null \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])' 2>/dev/null) \
  || target=$here/target
swarm=${SWARM_BIN:-}
for candidate in "$target/release/swarm" "$target/debug/swarm" "$(command -v swarm || true)"; do
  [ -n "$swarm" ] && break
  [ -n "$candidate" ] && [ -x "$candidate" ] && swarm=$candidate
done
[ -n "$swarm" ] || { echo "build swarm first: cargo install --locked --path . (or cargo build --release)" >&2; exit 2; }

demo=${1:-$(mktemp -d)/inventory}
mkdir -p "$demo"
cp -R "$here/fixtures/inventory/." "$demo/"
cd "$demo"
git init -q -b main
git add -A
git -c user.name=demo -c user.email=demo@example.com commit -q -m "inventory: initial"
echo "demo repository: $demo"

# shellcheck disable=SC2016 # $SWARM_FILE is the worker's, expanded for it (swarm or a shell)
"$swarm" refactor "Rename fetch_data to load_data" '*.py' --grep '\bfetch_data\b' -j 4 -y \
  --exec 'sed -i "s/\bfetch_data\b/load_data/g" "$SWARM_FILE"'

echo
git log --oneline --graph -n 14
echo
python3 -m unittest discover -s tests -t . -q
if git grep -qw fetch_data; then echo "fetch_data is still used" >&2; exit 1; fi
echo "demo: every call site renamed, the package's tests pass"
