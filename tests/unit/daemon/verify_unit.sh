#!/bin/sh
# Checks that the generated systemd unit parses: `systemd-analyze verify` on a copy whose
# ExecStart points at the metaroced just built (the installed path need not exist yet).
# Usage: verify_unit.sh UNIT METAROCED. SYSTEMD_ANALYZE overrides the program (tests use it).
# Exit 0 the unit verifies; 1 systemd-analyze finds a problem in it; 77 (skipped) only when
# systemd-analyze is missing or cannot verify even a minimal unit here (no systemd, a container).
set -eu
unit=$1
metaroced=$2
analyze=${SYSTEMD_ANALYZE:-systemd-analyze}
command -v "$analyze" >/dev/null 2>&1 || { echo "$analyze not found: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed -e "s|^ExecStart=[^ ]*|ExecStart=$metaroced|" "$unit" > "$dir/metaroced.service"
rc=0
out=$("$analyze" verify --man=no "$dir/metaroced.service" 2>&1) || rc=$?
# A line naming our unit is a problem in it (verify exits 0 on some of the warnings it prints).
if printf '%s\n' "$out" | grep -q "metaroced.service"; then
  echo "$out"
  exit 1
fi
if [ "$rc" -ne 0 ]; then
  # Whether systemd-analyze can verify anything here: a unit with nothing to object to. Only if
  # that fails too is the failure the environment's rather than our unit's.
  printf '[Unit]\nDescription=minimal unit\n\n[Service]\nType=oneshot\nExecStart=/bin/sh -c :\n' \
    > "$dir/verify-probe.service"
  probe_rc=0
  probe_out=$("$analyze" verify --man=no "$dir/verify-probe.service" 2>&1) || probe_rc=$?
  if [ "$probe_rc" -ne 0 ]; then
    echo "$probe_out"
    echo "systemd-analyze cannot verify even a minimal unit here (exit $probe_rc): skipped"
    exit 77
  fi
  echo "$out"
  echo "systemd-analyze verify fails on metaroced.service (exit $rc) and passes a minimal unit:" \
       "a problem in the unit"
  exit 1
fi
echo "metaroced.service OK"
