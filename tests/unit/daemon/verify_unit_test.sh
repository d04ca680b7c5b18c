#!/bin/sh
# Checks verify_unit.sh's verdicts with stand-ins for systemd-analyze (SYSTEMD_ANALYZE): a skip
# only when systemd-analyze is missing or cannot verify anything here; a verification failure of
# our unit fails even when its message does not name the unit.
# Usage: verify_unit_test.sh VERIFY_UNIT_SH UNIT METAROCED. Exit 0 pass, 1 fail.
set -eu
verify=$1
unit=$2
metaroced=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failed=0

# stub NAME BODY: a systemd-analyze stand-in; "$last" is the unit file it was asked about.
stub() {
  printf '#!/bin/sh\nfor last; do :; done\n%s\n' "$2" > "$dir/$1"
  chmod +x "$dir/$1"
}

# expect WANT WHAT [VAR=VALUE]: runs verify_unit.sh with the environment given.
expect() {
  want=$1
  what=$2
  shift 2
  rc=0
  out=$(env "$@" "$verify" "$unit" "$metaroced" 2>&1) || rc=$?
  if [ "$rc" -eq "$want" ]; then
    echo "ok   $what (exit $rc)"
  else
    echo "FAIL $what: exit $rc, want $want"
    printf '%s\n' "$out" | sed 's/^/     | /'
    failed=1
  fi
}

stub passes 'exit 0'
stub broken 'echo "Failed to initialize manager: Operation not permitted" >&2; exit 1'
# Fails only on our unit, with a message that does not name it (as for a missing dependency
# unit or a bad drop-in), and verifies the minimal unit.
stub rejects_ours 'case "$last" in
  */metaroced.service) echo "Failed to load configuration: Invalid argument" >&2; exit 1;;
esac
exit 0'
stub names_ours 'echo "$last:12: Unknown key name" >&2; exit 0'

expect 77 "systemd-analyze not installed: skip" SYSTEMD_ANALYZE="$dir/no-such-program"
expect 77 "systemd-analyze cannot verify any unit here: skip" SYSTEMD_ANALYZE="$dir/broken"
expect 1 "verify fails on our unit alone, unit not named: fail" SYSTEMD_ANALYZE="$dir/rejects_ours"
expect 1 "a warning naming our unit, exit 0: fail" SYSTEMD_ANALYZE="$dir/names_ours"
expect 0 "verify passes: pass" SYSTEMD_ANALYZE="$dir/passes"

exit $failed
