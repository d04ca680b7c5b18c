#!/bin/sh
# Checks that the generated systemd unit parses: `systemd-analyze verify` on a copy whose
# ExecStart points at the metaroced just built (the installed path need not exist yet).
# Usage: verify_unit.sh UNIT METAROCED. Exit 77 (skipped) without systemd-analyze.
set -eu
unit=$1
metaroced=$2
command -v systemd-analyze >/dev/null 2>&1 || { echo "systemd-analyze not found: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed -e "s|^ExecStart=[^ ]*|ExecStart=$metaroced|" "$unit" > "$dir/metaroced.service"
rc=0
out=$(systemd-analyze verify --man=no "$dir/metaroced.service" 2>&1) || rc=$?
# A line naming our unit is a problem in it (verify exits 0 on some of the warnings it prints).
if printf '%s\n' "$out" | grep -q "metaroced.service"; then
  echo "$out"
  exit 1
fi
if [ "$rc" -ne 0 ]; then
  echo "$out"
  echo "systemd-analyze cannot run here (exit $rc, nothing about the unit): skipped"
  exit 77
fi
echo "metaroced.service OK"
