#!/usr/bin/env bash
# Prints the Debian packages that provide the shared libraries the given binaries load,
# one per line: the Dockerfile's runtime stage installs exactly these.
#   runtime-packages.sh build/server/kilnd build/worker/kiln-worker build/clients/kiln
set -euo pipefail
if [ "$#" = 0 ]; then
  echo "usage: runtime-packages.sh BINARY..." >&2
  exit 2
fi
missing=0
libs=$(for binary in "$@"; do ldd "$binary"; done | awk '/=> not found/ {print "MISSING " $1} /=> \// {print $3}' | sort -u)
if grep -q '^MISSING' <<<"$libs"; then
  echo "runtime-packages: unresolved libraries: $(grep '^MISSING' <<<"$libs" | cut -d' ' -f2 | tr '\n' ' ')" >&2
  exit 1
fi
for lib in $libs; do
  # Debian 12 is merged-/usr: a file may be registered under /lib or /usr/lib.
  package=""
  for candidate in "$(readlink -f "$lib")" "$(readlink -f "$lib" | sed "s|^/usr||")" "$lib" "${lib#/usr}" "/usr$lib"; do
    package=$(dpkg -S "$candidate" 2>/dev/null | head -1 | cut -d: -f1) && [ -n "$package" ] && break
  done
  if [ -z "$package" ]; then
    echo "runtime-packages: no Debian package owns $lib" >&2
    missing=1
    continue
  fi
  echo "$package"
done | sort -u
exit $missing
