#!/usr/bin/env bash
# Runs `swarm refactor` for the composite action (action.yml) from its inputs, passed as
# INPUT_* variables (never spliced into the script, so an input cannot inject shell code).
# No input but `args` can become an option: each option's value is joined to it
# (`--exec=VALUE`), and the instruction and the pathspecs come after `--`.
# swarm itself writes the step outputs ($GITHUB_OUTPUT) and summary. Tested by
# tests/it/action.rs.
set -euo pipefail

: "${INPUT_INSTRUCTION:?the action needs an instruction}"
args=(refactor -y)
add() { [ -z "$2" ] || args+=("$1=$2"); }
add --exec "${INPUT_EXEC:-}"
add --agent "${INPUT_AGENT:-}"
add --grep "${INPUT_GREP:-}"
add --jobs "${INPUT_JOBS:-}"
add --into "${INPUT_INTO:-}"
add --verify "${INPUT_VERIFY:-}"
add --verify-merged "${INPUT_VERIFY_MERGED:-}"
add --per-process "${INPUT_PER_PROCESS:-}"
add --on-conflict "${INPUT_ON_CONFLICT:-}"
add --merge-with "${INPUT_MERGE_WITH:-}"
add --ok-exit-codes "${INPUT_OK_EXIT_CODES:-}"
# The report page, for the next step to upload as an artifact.
if [ -n "${INPUT_REPORT_PAGE:-}" ]; then
  mkdir -p "$(dirname "$INPUT_REPORT_PAGE")"
  args+=("--report=$INPUT_REPORT_PAGE")
fi
[ "${INPUT_ATOMIC:-false}" = true ] && args+=(--atomic)
[ "${INPUT_ALLOW_EMPTY:-false}" = true ] && args+=(--allow-empty)
# Anything else, as shell words (e.g. "--allow-domain api.example.com --timeout 900").
if [ -n "${INPUT_ARGS:-}" ]; then
  read -r -a extra <<< "$INPUT_ARGS"
  args+=("${extra[@]}")
fi
args+=(-- "$INPUT_INSTRUCTION")
# Pathspecs, one per line; none is every tracked file (the input's documented default),
# which swarm wants said with `.`.
specs=0
if [ -n "${INPUT_PATHSPECS:-}" ]; then
  while IFS= read -r spec; do
    [ -n "$spec" ] && args+=("$spec") && specs=$((specs + 1))
  done <<< "$INPUT_PATHSPECS"
fi
[ "$specs" -gt 0 ] || args+=(.)
exec "${SWARM_BIN:-swarm}" "${args[@]}"
