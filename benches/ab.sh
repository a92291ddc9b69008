#!/usr/bin/env bash
# Two swarm binaries side by side on the same work, interleaved, to tell what a change costs:
#
#   benches/ab.sh OLD_SWARM NEW_SWARM [FILES] [TASKS] [ROUNDS] [JOBS]
#
# Each round generates a repository of FILES files in 50 folders, TASKS of which hold `foo`,
# then runs `swarm refactor x --grep foo -y -j JOBS --exec 'sed -i s/foo/bar/ "$SWARM_FILE"'`
# with OLD_SWARM, then NEW_SWARM (the first of each round alternating), each on a fresh copy
# after `sync`, so neither pays for the other's disk writes. It prints every wall and CPU
# time (user + system, swarm and its workers), then the medians. The repositories go under
# $TMPDIR (TMPDIR=/dev/shm for tmpfs). Defaults: 2000 files, 200 tasks, 9 rounds, -j 2.
set -euo pipefail

old=$(realpath "$1") new=$(realpath "$2") files=${3:-2000} tasks=${4:-200} rounds=${5:-9} jobs=${6:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.com
export GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.com

generate() {
  mkdir -p "$work/seed"
  git -C "$work/seed" init -q -b main
  for i in $(seq 1 "$files"); do
    mkdir -p "$work/seed/d$((i % 50))"
    if [ "$i" -le "$tasks" ]; then echo "foo $i" ; else echo "x $i"; fi \
      > "$work/seed/d$((i % 50))/f$i.txt"
  done
  git -C "$work/seed" add -A
  git -C "$work/seed" commit -q -m seed
}

# One run of binary $2 labelled $1: "label wall cpu".
run() {
  rm -rf "$work/repo"
  git clone -q "$work/seed" "$work/repo"
  sync
  local me=$BASHPID before after
  before=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$me/stat")
  local start end
  start=$(date +%s.%N)
  # shellcheck disable=SC2016 # $SWARM_FILE is the worker's, expanded for it (swarm or a shell).
  (cd "$work/repo" && "$2" refactor x --grep foo -y -j "$jobs" \
    --exec 'sed -i s/foo/bar/ "$SWARM_FILE"' > /dev/null 2> "$work/err") \
    || { echo "$1 failed:" >&2; tail -5 "$work/err" >&2; exit 1; }
  end=$(date +%s.%N)
  after=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$me/stat")
  echo "$1 $(echo "$end - $start" | bc) $(echo "($after - $before) / $(getconf CLK_TCK)" | bc -l)"
}

median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

generate
for round in $(seq 1 "$rounds"); do
  if [ $((round % 2)) -eq 1 ]; then
    run old "$old"; run new "$new"
  else
    run new "$new"; run old "$old"
  fi
done | tee "$work/times"
for label in old new; do
  wall=$(awk -v l="$label" '$1 == l {print $2}' "$work/times" | median)
  cpu=$(awk -v l="$label" '$1 == l {print $3}' "$work/times" | median)
  printf '%s: median wall %.2f s, cpu %.2f s\n' "$label" "$wall" "$cpu"
done
