#!/usr/bin/env bash
# Runs `swarm land` for the composite action (action.yml) after `swarm refactor`, when the
# `land` input is set: the run's groups pushed to origin as swarm/<RUN-ID>/land/<group> and
# opened as pull requests on this repository ($GITHUB_REPOSITORY, through $GITHUB_API_URL
# with $GITHUB_TOKEN). Inputs come as INPUT_* variables and each is joined to its option
# (`--by=VALUE`), so none can become another option. Tested by tests/it/action.rs.
set -euo pipefail

: "${SWARM_RUN_ID:?no run to land (the refactor step gave no run id)}"
: "${INPUT_LAND:?the land input says how to group: codeowners, dir:N or files:N}"
: "${GITHUB_REPOSITORY:?not in GitHub Actions: GITHUB_REPOSITORY is not set}"
args=(land "$SWARM_RUN_ID" "--by=$INPUT_LAND" --push=origin --forge=github "--forge-repo=$GITHUB_REPOSITORY")
add() { [ -z "$2" ] || args+=("$1=$2"); }
add --max-open "${INPUT_MAX_OPEN:-}"
add --verify-merged "${INPUT_VERIFY_MERGED:-}"
exec "${SWARM_BIN:-swarm}" "${args[@]}"
