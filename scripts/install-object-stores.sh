#!/usr/bin/env bash
# Install the object-store servers the test suite starts: MinIO (S3, built from its Go
# module) and Azurite (Azure Blob, from npm), into DEST (default .venv). Idempotent:
# an installed server is kept.
#
# Needs Go 1.24+ (a toolchain is fetched from the Go module proxy when the machine has
# none or an older one) and Node.js 18+ with npm (Debian's packages when missing).
set -euo pipefail
DEST="$(realpath "${1:-.venv}")"
# MinIO's repository was archived in 2026; this is its last commit, pinned so every
# machine builds the same server.
MINIO_MODULE="github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c"
GO_TOOLCHAIN="go1.24.8"
AZURITE_VERSION="3.35.0"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

go_ok() {  # a go command of version 1.24 or newer
  command -v "$1" >/dev/null 2>&1 || return 1
  local minor
  minor="$("$1" env GOVERSION | sed -n 's/^go1\.\([0-9]*\).*/\1/p')"
  [ -n "$minor" ] && [ "$minor" -ge 24 ]
}

if [ ! -x "$DEST/bin/minio" ]; then
  GO=go
  if ! go_ok go; then
    GO="$DEST/go-toolchain/go/bin/go"
    if ! go_ok "$GO"; then
      echo "Fetching the Go toolchain $GO_TOOLCHAIN from the Go module proxy..."
      rm -rf "$DEST/go-toolchain" && mkdir -p "$DEST/go-toolchain"
      zip="$DEST/go-toolchain/toolchain.zip"
      curl -fsSL -o "$zip" \
        "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-$GO_TOOLCHAIN.linux-amd64.zip"
      (cd "$DEST/go-toolchain" && python3 -m zipfile -e toolchain.zip extracted \
        && mv "extracted/golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.linux-amd64" go \
        && rm -rf extracted toolchain.zip && chmod +x go/bin/* go/pkg/tool/*/*)
    fi
  fi
  echo "Building MinIO from its Go module (about 2.5 minutes the first time)..."
  GOBIN="$DEST/bin" GOFLAGS=-mod=mod "$GO" install "$MINIO_MODULE"
fi

if [ ! -x "$DEST/azurite/node_modules/.bin/azurite-blob" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "Installing Node.js and npm (Debian packages) for Azurite..."
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
  fi
  echo "Installing Azurite $AZURITE_VERSION from npm..."
  mkdir -p "$DEST/azurite"
  npm install --silent --no-audit --no-fund --prefix "$DEST/azurite" "azurite@$AZURITE_VERSION"
fi
