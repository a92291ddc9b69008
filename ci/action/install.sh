#!/usr/bin/env bash
# Installs swarm for the composite action (action.yml): the prebuilt binary of a release for
# this machine, checked against its published SHA-256, else `cargo install --locked` from the
# repository. Tested by tests/it/action.rs (with a release served from a local directory).
#
# Environment:
#   SWARM_VERSION      release tag to install (e.g. v0.2.0); "latest" (default): the newest
#   SWARM_REPOSITORY   owner/name on GitHub (default: $GITHUB_ACTION_REPOSITORY)
#   SWARM_RELEASE_URL  where the release files are (default:
#                      https://github.com/$SWARM_REPOSITORY/releases/download/$SWARM_VERSION,
#                      or .../releases/latest/download)
#   SWARM_INSTALL_DIR  where the binary goes (default: ~/.local/bin), added to $GITHUB_PATH
set -euo pipefail

version=${SWARM_VERSION:-latest}
repository=${SWARM_REPOSITORY:-${GITHUB_ACTION_REPOSITORY:-}}
install_dir=${SWARM_INSTALL_DIR:-$HOME/.local/bin}
case "$(uname -m)" in
  x86_64 | amd64) target=x86_64-unknown-linux-musl ;;
  aarch64 | arm64) target=aarch64-unknown-linux-musl ;;
  *) target="" ;;
esac
if [ -z "${SWARM_RELEASE_URL:-}" ] && [ -n "$repository" ]; then
  if [ "$version" = latest ]; then
    SWARM_RELEASE_URL="https://github.com/$repository/releases/latest/download"
  else
    SWARM_RELEASE_URL="https://github.com/$repository/releases/download/$version"
  fi
fi

mkdir -p "$install_dir"
if [ -n "${GITHUB_PATH:-}" ]; then echo "$install_dir" >> "$GITHUB_PATH"; fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

from_release() {
  [ -n "$target" ] && [ -n "${SWARM_RELEASE_URL:-}" ] || return 1
  local archive="swarm-$target.tar.gz"
  curl -fsSL --retry 3 -o "$scratch/$archive" "$SWARM_RELEASE_URL/$archive" || return 1
  curl -fsSL --retry 3 -o "$scratch/$archive.sha256" "$SWARM_RELEASE_URL/$archive.sha256" || return 1
  # The checksum file names the archive as released; check it against what was downloaded.
  local want got
  want=$(cut -d' ' -f1 < "$scratch/$archive.sha256")
  got=$(sha256sum "$scratch/$archive" | cut -d' ' -f1)
  if [ "$want" != "$got" ]; then
    echo "swarm: $archive does not match its published SHA-256 ($got, not $want)" >&2
    exit 1
  fi
  tar -xzf "$scratch/$archive" -C "$scratch"
  install -m 0755 "$scratch/swarm" "$install_dir/swarm"
}

if from_release; then
  echo "swarm: installed $("$install_dir/swarm" --version) from $SWARM_RELEASE_URL"
  exit 0
fi
echo "swarm: no prebuilt binary for ${target:-$(uname -m)} at ${SWARM_RELEASE_URL:-(no release URL)}; building it" >&2
[ -n "$repository" ] || { echo "swarm: set SWARM_REPOSITORY (owner/name) to build it" >&2; exit 1; }
args=(install --locked --root "$(dirname "$install_dir")" --git "https://github.com/$repository")
[ "$version" = latest ] || args+=(--tag "$version")
cargo "${args[@]}" swarm
