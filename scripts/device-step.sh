# device-step.sh: sourced by the device-*.sh scripts. `step NAME COMMAND...` runs COMMAND, logs it to
# $out/NAME.log, shows the last $step_tail lines, and sets status=1 when it fails.
step() {
  local name=$1; shift
  echo "== $name: $*"
  "$@" >"$out/$name.log" 2>&1; local rc=$?
  tail -n "${step_tail:-12}" "$out/$name.log"
  echo "== $name: exit $rc"
  [ $rc -eq 0 ] || status=1
}
