#!/usr/bin/env bash
# deb_test.sh BUILD_DIR: the Debian package on a fresh machine. BUILD_DIR is a built `deb` preset tree
# (scripts/build.sh deb). Makes the package with cpack, checks its control data, then builds a minimal Debian 12
# root with mmdebstrap (variant apt, from this machine's apt sources) and installs the package there with apt,
# which resolves its Depends from the archive — so a missing dependency fails here. Inside that root:
#   sluiced --version; sluiced check and sluiced run of the installed default pipeline (its records counted), and
#   the one-liner `sluiced run --uri clip.mp4 --output -` (its JSON lines counted);
#   sluicectl --help; the installed config passes `sluiced check`; systemd-analyze verify on the installed units;
#   the sluice user and directories made by the package's postinst.
# Needs root (mmdebstrap's root mode), mmdebstrap and dpkg-dev (scripts/setup.sh), and the archive's network.
# Exit status: 0 passed, 1 a check failed, 2 usage.
set -uo pipefail
[ $# -eq 1 ] || { sed -n '2,3p' "$0" >&2; exit 2; }
build=$(cd "$1" && pwd) || exit 2
fails=0
ok() { echo "ok   $1"; }
fail() { echo "FAIL $1${2:+: $2}"; fails=$((fails + 1)); }
for tool in cpack mmdebstrap dpkg-deb dpkg-shlibdeps; do
  command -v "$tool" >/dev/null || { echo "FAIL $tool not found: run scripts/setup.sh as root"; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "FAIL needs root (mmdebstrap installs the package into a root made here)"; exit 1; }

work=$(mktemp -d /tmp/sluice-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
(cd "$build" && cpack -G DEB -B "$work/out") >"$work/cpack.log" 2>&1 || { cat "$work/cpack.log"; echo "FAIL cpack"; exit 1; }
deb=$(ls "$work"/out/sluice_*.deb 2>/dev/null | head -1)
[ -f "$deb" ] || { cat "$work/cpack.log"; echo "FAIL cpack made no sluice_*.deb"; exit 1; }
echo "package: $(basename "$deb"), $(($(stat -c %s "$deb") / 1024)) KiB"

# --- control data ---------------------------------------------------------------------------------
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for lib in libyaml-cpp libspdlog libsystemd0 libonnx libprotobuf libdnnl libavformat libavcodec libopencv-core \
           libmosquitto1 libstdc++6 libc6; do
  case "$depends" in *"$lib"*) ;; *) fail "Depends names $lib" "missing" ;; esac
done
case "$depends" in *cuda* | *cudnn* | *cublas*) fail "Depends has no NVIDIA library" "$depends" ;; *) ok "Depends computed, no NVIDIA library" ;; esac
contents=$(dpkg-deb -c "$deb")
for path in ./usr/bin/sluiced ./usr/bin/sluicectl ./etc/sluice/sluice.yaml ./usr/lib/systemd/system/sluiced.service \
            ./usr/lib/systemd/system/sluiced@.service ./usr/share/sluice/config/pipelines/default.yaml \
            ./usr/share/sluice/models/testsrc-classifier.onnx; do
  grep -q " $path\$" <<<"$contents" && ok "holds $path" || fail "holds $path"
done
if grep -q " ./usr/local/" <<<"$contents"; then fail "nothing under /usr/local"; else ok "nothing under /usr/local"; fi
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles 2>/dev/null | grep -qx /etc/sluice/sluice.yaml &&
  ok "/etc/sluice/sluice.yaml is a conffile" || fail "/etc/sluice/sluice.yaml is a conffile"

# --- a fresh Debian 12 root, the package installed by apt -------------------------------------------
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -s "$f" ] && sources+=("$f")
done
cat >"$work/inside.sh" <<'INSIDE'
#!/bin/sh
# Runs in the new root (chroot), as root, after apt installed the package.
set -u
fails=0
ok() { echo "ok   $1"; }
fail() { echo "FAIL $1${2:+: $2}"; fails=$((fails + 1)); }
v=$(sluiced --version 2>&1) && ok "sluiced --version: $v" || fail "sluiced --version" "$v"
pipe=/usr/share/sluice/config/pipelines/default.yaml
out=$(sluiced check "$pipe" 2>&1) && ok "sluiced check default.yaml" || fail "sluiced check default.yaml" "$out"
sluiced run --no-progress "$pipe" >/tmp/records.txt 2>/tmp/run.log
rc=$?
records=$(grep -c '^source .* seq ' /tmp/records.txt)  # the stdout sink: one line per frame
[ $rc -eq 0 ] && [ "$records" -gt 0 ] && ok "sluiced run default.yaml: exit 0, $records records" ||
  { tail -20 /tmp/run.log; head -3 /tmp/records.txt; fail "sluiced run default.yaml" "exit $rc, $records records"; }
grep -q "delivered $records " /tmp/run.log && ok "the ledger counts every record delivered" ||
  { grep "frames:" /tmp/run.log; fail "the ledger counts every record delivered"; }
# The one-liner: the installed default pipeline on a video file, JSON lines on stdout, one per frame (30).
sluiced run --no-progress --uri /tmp/clip.mp4 --output - >/tmp/oneliner.jsonl 2>/tmp/oneliner.log
rc=$?
records=$(grep -c '"source_name":"clip"' /tmp/oneliner.jsonl)
[ $rc -eq 0 ] && [ "$records" -eq 30 ] && ok "sluiced run --uri clip.mp4 --output -: exit 0, 30 records" ||
  { tail -20 /tmp/oneliner.log; fail "sluiced run --uri clip.mp4 --output -" "exit $rc, $records records (want 30)"; }
out=$(sluiced check /etc/sluice/sluice.yaml 2>&1) && ok "the installed config passes check" ||
  fail "the installed config passes check" "$out"
sluicectl --help >/dev/null 2>&1 && ok "sluicectl --help" || fail "sluicectl --help"
for unit in sluiced.service sluiced@.service; do
  out=$(SYSTEMD_LOG_COLOR=0 systemd-analyze verify "/usr/lib/systemd/system/$unit" 2>&1)
  [ $? -eq 0 ] && [ -z "$out" ] && ok "systemd-analyze verify $unit" || fail "systemd-analyze verify $unit" "$out"
done
getent passwd sluice >/dev/null && ok "postinst made the user sluice" || fail "postinst made the user sluice"
[ -d /var/lib/sluice ] && ok "postinst made /var/lib/sluice" || fail "postinst made /var/lib/sluice"
exit $fails
INSIDE
cp "$deb" "$work/sluice.deb"
cp "$(dirname "$0")/../data/nvdec/h264_320x240.mp4" "$work/clip.mp4"  # 30 frames
start=$(date +%s)
# apt installs the package in a hook, from inside the root: given to --include, apt hands dpkg a path that
# only exists outside the chroot.
mmdebstrap --variant=apt --include=systemd \
  --customize-hook="cp '$work/sluice.deb' '$work/inside.sh' '$work/clip.mp4' \"\$1/tmp/\"" \
  --customize-hook='chroot "$1" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends /tmp/sluice.deb' \
  --customize-hook='chroot "$1" sh /tmp/inside.sh' \
  bookworm /dev/null "${sources[@]}" >"$work/mmdebstrap.log" 2>&1
rc=$?
grep -E "^(ok|FAIL) " "$work/mmdebstrap.log"
if [ $rc -ne 0 ]; then
  grep -qE "^(ok|FAIL) " "$work/mmdebstrap.log" || tail -30 "$work/mmdebstrap.log"
  fail "install and run in a fresh Debian 12 root" "mmdebstrap exit $rc"
else
  ok "installed and ran in a fresh Debian 12 root ($(($(date +%s) - start)) s)"
fi
[ $fails -eq 0 ] && echo "all package checks passed" || { echo "$fails package checks failed"; exit 1; }
