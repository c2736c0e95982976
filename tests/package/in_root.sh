#!/bin/sh
# in_root.sh PACKAGE: runs in the fresh Debian 12 root that tests/package/deb_test.sh made (chroot, as root), after
# apt installed PACKAGE (sluice or sluice-cuda). Prints one "ok"/"FAIL" line per check, every check even after a
# failure; deb_test.sh counts the FAIL lines. Expects /tmp/clip.mp4 (30 frames) and /tmp/camsim.url (an RTSP
# stream served on 127.0.0.1 outside the root).
set -u
pkg=$1
ok() { echo "ok   [$pkg] $1"; }
fail() { echo "FAIL [$pkg] $1${2:+: $2}"; }
pipelines=/usr/share/sluice/config/pipelines
examples=/usr/share/sluice/config/examples
scratch=/tmp/$pkg
rm -rf "$scratch"
mkdir -p "$scratch"
cd "$scratch" || exit 1  # outputs named relative to where sluiced runs land here

v=$(sluiced --version 2>&1) || fail "sluiced --version" "$v"
case "$pkg:$v" in
  sluice:*"(CPU only)"* | sluice-cuda:*"(CUDA)"*) ok "sluiced --version: $v" ;;
  *) fail "sluiced --version says which build" "$v" ;;
esac
if [ "$pkg" = sluice-cuda ]; then
  dpkg-query -W -f='${Status}' sluice 2>/dev/null | grep -q 'install ok installed' &&
    fail "sluice-cuda replaced sluice" "sluice is still installed" || ok "sluice-cuda replaced sluice"
fi

# --- the default pipeline and the one-liner ----------------------------------------------------------
out=$(sluiced check $pipelines/default.yaml 2>&1)
rc=$?
[ $rc -eq 0 ] && ok "sluiced check default.yaml" || fail "sluiced check default.yaml" "$out"
# No GPU here: device auto must come out as the CPU (for sluice-cuda: the CPU fallback of the CUDA build).
echo "$out" | grep -q "device cpu" && ok "device auto runs on the CPU here" ||
  fail "device auto runs on the CPU here" "$(echo "$out" | grep -m1 device)"
sluiced run --no-progress $pipelines/default.yaml >records.txt 2>run.log
rc=$?
records=$(grep -c '^source .* seq ' records.txt)  # the stdout sink: one line per frame
[ $rc -eq 0 ] && [ "$records" -gt 0 ] && ok "sluiced run default.yaml: exit 0, $records records" ||
  { tail -20 run.log; head -3 records.txt; fail "sluiced run default.yaml" "exit $rc, $records records"; }
grep -q "delivered $records " run.log && ok "the ledger counts every record delivered" ||
  { grep "frames:" run.log; fail "the ledger counts every record delivered"; }
# The one-liner: the installed default pipeline on a video file, JSON lines on stdout, one per frame (30).
sluiced run --no-progress --uri /tmp/clip.mp4 --output - >oneliner.jsonl 2>oneliner.log
rc=$?
records=$(grep -c '"source_name":"clip"' oneliner.jsonl)
[ $rc -eq 0 ] && [ "$records" -eq 30 ] && ok "sluiced run --uri clip.mp4 --output -: exit 0, 30 records" ||
  { tail -20 oneliner.log; fail "sluiced run --uri clip.mp4 --output -" "exit $rc, $records records (want 30)"; }

# --- every installed config and pipeline passes check; detect.yaml runs as installed -------------------
n=0
for f in /etc/sluice/sluice.yaml $pipelines/*.yaml; do
  out=$(sluiced check "$f" 2>&1) && n=$((n + 1)) || fail "sluiced check $f" "$(echo "$out" | tail -5)"
done
[ $n -ge 8 ] && ok "sluiced check passes on the installed config and every installed pipeline ($n files)" ||
  fail "sluiced check on the installed pipelines" "$n passed (want the config and at least 7 pipelines)"
sluiced run --no-progress $pipelines/detect.yaml >detect.out 2>detect.log
rc=$?
records=$(grep -c '"detections"' shapes-detect.jsonl 2>/dev/null)
[ $rc -eq 0 ] && [ "${records:-0}" -eq 48 ] && ok "detect.yaml runs as installed: exit 0, 48 records with detections" ||
  { tail -10 detect.log; fail "detect.yaml runs as installed" "exit $rc, ${records:-0} records (want 48)"; }
# The examples need what only the user has; check names it, and directory-job runs once it is there.
out=$(sluiced check $examples/detect-yolov8.yaml 2>&1)
rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "models/yolov8n.onnx: cannot open" &&
  ok "detect-yolov8.yaml: check names the model to supply" || fail "detect-yolov8.yaml: check names the model" "exit $rc: $out"
out=$(sluiced check $examples/directory-job.yaml 2>&1)
rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "/srv/video/incoming" &&
  ok "directory-job.yaml: check names the folder to supply" || fail "directory-job.yaml: check names the folder" "exit $rc: $out"
mkdir -p /srv/video/incoming /srv/video/results
cp /tmp/clip.mp4 /srv/video/incoming/
sluiced run --no-progress --state-dir "$scratch/state" $examples/directory-job.yaml >job.out 2>job.log
rc=$?
[ $rc -eq 0 ] && grep -qs '"delivered": *30' /srv/video/results/clip*.json &&
  ok "directory-job.yaml runs with a folder of videos: 30 frames delivered" ||
  { tail -10 job.log; ls /srv/video/results; fail "directory-job.yaml with a folder of videos" "exit $rc"; }
rm -rf /srv/video

# --- the README's service quick start, with sluiced started as the unit starts it ---------------------
exec_start=$(sed -n 's/^ExecStart=//p' /usr/lib/systemd/system/sluiced.service)
case "$exec_start" in /usr/bin/sluiced\ --config\ /etc/sluice/sluice.yaml*) ;;
  *) fail "the unit runs sluiced with /etc/sluice/sluice.yaml" "$exec_start" ;; esac
# shellcheck disable=SC2086  # the unit's command line, split as systemd splits it (no quotes in it)
setpriv --reuid=sluice --regid=sluice --init-groups -- $exec_start >service.log 2>&1 &
pid=$!
up=
for _ in $(seq 100); do sluicectl status >/dev/null 2>&1 && { up=1; break; }; sleep 0.1; done
out=$(sluicectl status 2>&1)
[ -n "$up" ] && echo "$out" | grep -q "pipeline *service" && ok "sluicectl status: the service runs" ||
  { tail -20 service.log; fail "sluicectl status" "$out"; }
metrics=$(curl -s 127.0.0.1:9464/metrics)
echo "$metrics" | grep -q '^sluice_build_info{' && ok "curl -s 127.0.0.1:9464/metrics: the scrape" ||
  fail "curl -s 127.0.0.1:9464/metrics" "$(echo "$metrics" | head -3)"
url=$(cat /tmp/camsim.url)
out=$(sluicectl add-source "$url" --name cam9 2>&1) && ok "sluicectl add-source $url --name cam9" ||
  fail "sluicectl add-source $url --name cam9" "$out"
frames=0
for _ in $(seq 100); do
  frames=$(curl -s 127.0.0.1:9464/metrics | sed -n 's/^sluice_source_frames_total{source="cam9"} //p')
  [ "${frames:-0}" -ge 30 ] && break
  sleep 0.1
done
[ "${frames:-0}" -ge 30 ] && ok "the metrics count the added stream's frames ($frames)" ||
  { sluicectl sources; fail "the metrics count the added stream's frames" "${frames:-none}"; }
# A host the config does not allow (loopback all the same: were it let through, nothing leaves this machine).
out=$(sluicectl add-source rtsp://127.0.0.2/stream --name elsewhere 2>&1) &&
  fail "add-source of a host not in allow_source_hosts is refused" "$out" ||
  ok "add-source of a host not in allow_source_hosts is refused"
out=$(sluicectl remove-source cam9 2>&1) && ok "sluicectl remove-source cam9" || fail "sluicectl remove-source cam9" "$out"
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 0 ] && ok "SIGTERM: the service drains and exits 0" || { tail -20 service.log; fail "SIGTERM: exit 0" "exit $rc"; }

# --- the rest of the package ---------------------------------------------------------------------------
sluicectl --help >/dev/null 2>&1 && ok "sluicectl --help" || fail "sluicectl --help"
for unit in sluiced.service sluiced@.service; do
  out=$(SYSTEMD_LOG_COLOR=0 systemd-analyze verify "/usr/lib/systemd/system/$unit" 2>&1)
  [ $? -eq 0 ] && [ -z "$out" ] && ok "systemd-analyze verify $unit" || fail "systemd-analyze verify $unit" "$out"
done
getent passwd sluice >/dev/null && ok "postinst made the user sluice" || fail "postinst made the user sluice"
[ -d /var/lib/sluice ] && ok "postinst made /var/lib/sluice" || fail "postinst made /var/lib/sluice"
exit 0
