#!/usr/bin/env bash
# Print the path of a Python interpreter of version $1 (e.g. 3.12): python3.12 on PATH,
# else the newest pyenv build of it. Exit 1 with a message when there is none: the
# project's files install packages, not interpreters.
set -euo pipefail
version="$1"
# A pyenv shim is on PATH even where it refuses to run: ask the interpreter itself.
if "python$version" -c pass >/dev/null 2>&1; then
  "python$version" -c 'import sys; print(sys.executable)'
  exit 0
fi
root="$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")"
found="$(ls -d "$root"/versions/"$version".*/bin/"python$version" 2>/dev/null | sort -V | tail -1 || true)"
if [ -n "$found" ]; then
  echo "$found"
  exit 0
fi
echo "Python $version not found (neither python$version on PATH nor a pyenv build under $root);" \
  "install it, e.g. pyenv install $version" >&2
exit 1
