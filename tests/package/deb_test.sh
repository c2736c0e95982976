#!/usr/bin/env bash
# deb_test.sh BUILD_DIR [CUDA_BUILD_DIR]: the Debian packages on a fresh machine. BUILD_DIR is a built `deb` preset
# tree (scripts/build.sh deb); CUDA_BUILD_DIR, if given, a built tree configured with CUDA and prefix /usr (the
# release tree CI's release phase built and tested, or scripts/build.sh deb-cuda), whose cpack makes sluice-cuda.
# Makes the packages with cpack, checks their control data, then builds a minimal Debian 12 root with mmdebstrap
# (variant apt, from this machine's apt sources) and installs them there with apt, which resolves Depends from the
# archive — so a missing dependency fails here. In that root, first with sluice, then with sluice-cuda in its place:
#   sluiced --version; sluiced check and sluiced run of the installed default pipeline (its records counted), and
#   the one-liner `sluiced run --uri clip.mp4 --output -` (its JSON lines counted); `sluiced check` passes on the
#   installed config and on every installed pipeline, detect.yaml runs as installed (48 records); the examples'
#   check names what they need, and directory-job runs once that is supplied; the README's service quick start:
#   sluiced started as the unit starts it (its ExecStart=, as user sluice), `sluicectl status`, `curl` of the
#   metrics, `sluicectl add-source` of an RTSP stream served on 127.0.0.1 (tools/camsim.py) whose frames the
#   metrics then count, remove-source, SIGTERM: exit 0. sluicectl --help; systemd-analyze verify on the installed
#   units; the sluice user and directories made by the package's postinst.
# sluice-cuda: its Depends must name NVIDIA's packages (cuda-cudart-X-Y, libcublas-X-Y, libcudnnN-cuda-X) for every
# NVIDIA library sluiced links, and apt must refuse it while they are missing. NVIDIA's repository is out of reach
# here, so the test then satisfies those Depends with stand-in packages of the same names that it builds from the
# very library files the CUDA build linked (this machine's toolkit): the libraries are real, their packaging is
# the test's, not NVIDIA's. There is no GPU and no driver in the root: the checks above then prove the CPU fallback.
# Needs root (mmdebstrap's root mode), mmdebstrap and dpkg-dev (scripts/setup.sh), python3, and the archive's network.
# Exit status: 0 passed, 1 a check failed, 2 usage.
set -uo pipefail
set -uo pipefail
[ $# -ge 1 ] && [ $# -le 2 ] || { sed -n '2,4p' "$0" >&2; exit 2; }
build=$(cd "$1" && pwd) || exit 2
cuda_build=
[ $# -eq 2 ] && { cuda_build=$(cd "$2" && pwd) || exit 2; }
src=$(cd "$(dirname "$0")/../.." && pwd)
fails=0
ok() { echo "ok   $1"; }
fail() { echo "FAIL $1${2:+: $2}"; fails=$((fails + 1)); }
for tool in cpack mmdebstrap dpkg-deb dpkg-shlibdeps python3; do
  command -v "$tool" >/dev/null || { echo "FAIL $tool not found: run scripts/setup.sh as root"; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "FAIL needs root (mmdebstrap installs the package into a root made here)"; exit 1; }

work=$(mktemp -d /tmp/sluice-deb.XXXXXX)
camsim_pid=
cleanup() {
  [ -n "$camsim_pid" ] && kill "$camsim_pid" 2>/dev/null && wait "$camsim_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
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
# check_contents DEB: the files every build of the package holds.
check_contents() {
  local contents path
  contents=$(dpkg-deb -c "$1")
  for path in ./usr/bin/sluiced ./usr/bin/sluicectl ./etc/sluice/sluice.yaml ./usr/lib/systemd/system/sluiced.service \
              ./usr/lib/systemd/system/sluiced@.service ./usr/share/sluice/config/pipelines/default.yaml \
              ./usr/share/sluice/config/pipelines/detect.yaml ./usr/share/sluice/media/shapes.mp4 \
              ./usr/share/sluice/models/testsrc-classifier.onnx ./usr/share/sluice/models/shapes-detector.onnx \
              ./usr/share/sluice/config/examples/directory-job.yaml ./usr/share/sluice/config/examples/detect-yolov8.yaml; do
    grep -q " $path\$" <<<"$contents" && ok "$(basename "$1") holds $path" || fail "$(basename "$1") holds $path"
  done
  if grep -q " ./usr/local/" <<<"$contents"; then fail "nothing under /usr/local"; else ok "nothing under /usr/local"; fi
  dpkg-deb --ctrl-tarfile "$1" | tar -xO ./conffiles 2>/dev/null | grep -qx /etc/sluice/sluice.yaml &&
    ok "/etc/sluice/sluice.yaml is a conffile" || fail "/etc/sluice/sluice.yaml is a conffile"
}
check_contents "$deb"
cp "$deb" "$work/sluice.deb"

# --- the CUDA package: Depends on NVIDIA's packages, and stand-ins for them --------------------------
cuda_deb=
if [ -n "$cuda_build" ]; then
  if ! grep -q '^SLUICE_WITH_CUDA:BOOL=ON' "$cuda_build/CMakeCache.txt" 2>/dev/null; then
    echo "SKIP the CUDA package: $cuda_build was configured without CUDA (no nvcc on this machine)"
  elif [ ! -x "$cuda_build/sluiced" ]; then
    fail "the CUDA package" "$cuda_build/sluiced not built"
  elif ! (cd "$cuda_build" && cpack -G DEB -B "$work/out-cuda") >"$work/cpack-cuda.log" 2>&1; then
    cat "$work/cpack-cuda.log"; fail "cpack in $cuda_build"
  else
    cuda_deb=$(ls "$work"/out-cuda/sluice-cuda_*.deb 2>/dev/null | head -1)
    [ -f "$cuda_deb" ] || { cat "$work/cpack-cuda.log"; fail "cpack made no sluice-cuda_*.deb"; }
  fi
fi
if [ -n "$cuda_deb" ]; then
  echo "package: $(basename "$cuda_deb"), $(($(stat -c %s "$cuda_deb") / 1024)) KiB"
  cdepends=$(dpkg-deb -f "$cuda_deb" Depends)
  echo "Depends: $cdepends"
  for field in Conflicts Replaces Provides; do
    [ "$(dpkg-deb -f "$cuda_deb" "$field")" = sluice ] && ok "sluice-cuda $field: sluice" || fail "sluice-cuda $field: sluice"
  done
  check_contents "$cuda_deb"
  mkdir -p "$work/x"
  dpkg-deb -x "$cuda_deb" "$work/x"
  needed=$(readelf -d "$work/x/usr/bin/sluiced" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  case "$needed" in *libcuda.so* | *libnvcuvid*) fail "the driver's libraries are loaded at run time, not linked" "$needed" ;;
                    *) ok "sluiced links neither libcuda nor libnvcuvid (the driver's, loaded at run time)" ;; esac
  # Each NVIDIA library sluiced links, the package of NVIDIA's repository that holds it (by soname major), and
  # the stand-in for that package: the file the build linked, under the soname, where NVIDIA's package puts it.
  standins=()
  for soname in $(grep -E '^lib(cudart|cublas|cublasLt|cudnn)\.so\.[0-9]+$' <<<"$needed"); do
    major=${soname##*.so.}
    case $soname in
      libcudart.so.*) want="cuda-cudart-$major-" dir=/usr/local/cuda-sluice-test/lib ;;
      libcublas.so.* | libcublasLt.so.*) want="libcublas-$major-" dir=/usr/local/cuda-sluice-test/lib ;;
      libcudnn.so.*) want="libcudnn$major-cuda-" dir=/usr/lib/x86_64-linux-gnu ;;
    esac
    pkg=$(tr ',' '\n' <<<"$cdepends" | sed 's/^ *//; s/ .*//' | grep "^$want" | head -1)
    if [ -z "$pkg" ]; then fail "Depends names a package for $soname" "no $want*"; continue; fi
    ok "Depends names $pkg for $soname"
    file=$(ldd "$cuda_build/sluiced" | awk -v s="$soname" '$1 == s { print $3 }')
    [ -f "$file" ] || { fail "the build's $soname" "not found by ldd"; continue; }
    mkdir -p "$work/standin/$pkg/DEBIAN" "$work/standin/$pkg$dir"
    cp "$(readlink -f "$file")" "$work/standin/$pkg$dir/$soname"
    # cuDNN loads its engine libraries (libcudnn_*.so.N) at run time: they belong to the same package.
    [ "$want" = "libcudnn$major-cuda-" ] && for f in "$(dirname "$file")"/libcudnn_*.so."$major"; do
      [ -f "$f" ] && cp "$(readlink -f "$f")" "$work/standin/$pkg$dir/$(basename "$f")"
    done
    [ "$dir" = /usr/local/cuda-sluice-test/lib ] && mkdir -p "$work/standin/$pkg/etc/ld.so.conf.d" &&
      echo "$dir" >"$work/standin/$pkg/etc/ld.so.conf.d/$pkg.conf"
    standins+=("$pkg")
  done
  for pkg in $(printf '%s\n' "${standins[@]}" | sort -u); do
    printf 'Package: %s\nVersion: 0~sluice.test\nArchitecture: amd64\nMaintainer: sluice tests\nDescription: %s\n %s\n' \
      "$pkg" "stand-in for NVIDIA's $pkg (tests/package/deb_test.sh)" \
      "The libraries sluice-cuda was built against, from this machine's CUDA toolkit." >"$work/standin/$pkg/DEBIAN/control"
    printf '#!/bin/sh\nldconfig\n' >"$work/standin/$pkg/DEBIAN/postinst"
    chmod 0755 "$work/standin/$pkg/DEBIAN/postinst"
    dpkg-deb -Znone --root-owner-group -b "$work/standin/$pkg" "$work/standin-$pkg.deb" >/dev/null ||
      fail "build the stand-in $pkg"
    rm -rf "${work:?}/standin/$pkg"
  done
  echo "stand-ins for NVIDIA's packages: $(printf '%s ' "${standins[@]}" | tr ' ' '\n' | sort -u | tr '\n' ' ')($(du -sm "$work"/standin-*.deb | awk '{ s += $1 } END { print s }') MiB)"
  cp "$cuda_deb" "$work/sluice-cuda.deb"
fi

# --- an RTSP stream on 127.0.0.1 for the quick start's add-source (the root shares this machine's network) ---
python3 "$src/tools/camsim.py" --port 0 --ready-file "$work/camsim.ready" "$src/tests/data/nvdec/h264_320x240.h264" \
  >"$work/camsim.log" 2>&1 &
camsim_pid=$!
for _ in $(seq 50); do [ -s "$work/camsim.ready" ] && break; sleep 0.1; done
camsim_url=$(head -1 "$work/camsim.ready" 2>/dev/null)
case "$camsim_url" in rtsp://127.0.0.1:*) echo "$camsim_url/cam0" >"$work/camsim.url" ;;
                      *) cat "$work/camsim.log"; fail "tools/camsim.py serves a stream" "no address in its ready file" ;; esac

# --- a fresh Debian 12 root, the packages installed by apt -------------------------------------------
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -s "$f" ] && sources+=("$f")
done
cp "$src/tests/package/in_root.sh" "$work/in_root.sh"
cp "$src/tests/data/nvdec/h264_320x240.mp4" "$work/clip.mp4"  # 30 frames
# --force-unsafe-io: no fsync per file (the root is thrown away), which the 1 GB of stand-ins would feel.
apt_install='chroot "$1" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends -o Dpkg::Options::=--force-unsafe-io'
hooks=(
  # Hard links where the root is on the same file system (the stand-ins are large), else copies.
  --customize-hook="for f in '$work'/*.deb '$work/in_root.sh' '$work/clip.mp4' '$work/camsim.url'; do
                      [ -e \"\$f\" ] && { cp -l \"\$f\" \"\$1/tmp/\" 2>/dev/null || cp \"\$f\" \"\$1/tmp/\"; }; done; true"
  # apt installs the package in a hook, from inside the root: given to --include, apt hands dpkg a path that
  # only exists outside the chroot.
  --customize-hook='echo "time $(( $(date +%s) - SLUICE_DEB_T0 )) s: root made"'
  --customize-hook="$apt_install /tmp/sluice.deb"
  --customize-hook='echo "time $(( $(date +%s) - SLUICE_DEB_T0 )) s: sluice installed"'
  --customize-hook='chroot "$1" sh /tmp/in_root.sh sluice'
  --customize-hook='echo "time $(( $(date +%s) - SLUICE_DEB_T0 )) s: sluice tested"'
)
if [ -n "$cuda_deb" ]; then
  hooks+=(
    # Without NVIDIA's packages apt must refuse sluice-cuda, naming them; then the stand-ins satisfy them.
    --customize-hook="if $apt_install /tmp/sluice-cuda.deb >/tmp/apt-refused.log 2>&1; then
                        echo 'FAIL apt refuses sluice-cuda without its NVIDIA libraries: it installed'; else
                        grep -q 'cuda-cudart-' /tmp/apt-refused.log &&
                        echo 'ok   apt refuses sluice-cuda without NVIDIA'\''s packages, naming them' ||
                        { tail -5 /tmp/apt-refused.log; echo 'FAIL apt refuses sluice-cuda, naming cuda-cudart-*'; }; fi"
    --customize-hook='echo "time $(( $(date +%s) - SLUICE_DEB_T0 )) s: apt refused sluice-cuda"'
    --customize-hook="$apt_install /tmp/sluice-cuda.deb $(for f in "$work"/standin-*.deb; do printf '/tmp/%s ' "$(basename "$f")"; done)"
    --customize-hook='echo "time $(( $(date +%s) - SLUICE_DEB_T0 )) s: sluice-cuda installed"'
    --customize-hook='chroot "$1" sh /tmp/in_root.sh sluice-cuda'
    --customize-hook='echo "time $(( $(date +%s) - SLUICE_DEB_T0 )) s: sluice-cuda tested"'
  )
fi
start=$(date +%s)
export SLUICE_DEB_T0=$start  # the hooks' "time N s: ..." lines: where the root's minutes go
mmdebstrap --variant=apt --include=systemd,curl "${hooks[@]}" bookworm /dev/null "${sources[@]}" >"$work/mmdebstrap.log" 2>&1
rc=$?
grep -E "^(ok|FAIL|time) " "$work/mmdebstrap.log"
inside_fails=$(grep -c "^FAIL " "$work/mmdebstrap.log")
fails=$((fails + inside_fails))
if [ $rc -ne 0 ]; then
  tail -30 "$work/mmdebstrap.log"
  fail "install and run in a fresh Debian 12 root" "mmdebstrap exit $rc"
elif [ -n "$cuda_build" ] && [ -n "$cuda_deb" ] && ! grep -q '^ok   \[sluice-cuda\] sluiced --version' "$work/mmdebstrap.log"; then
  fail "sluice-cuda installed and ran in the root"
else
  ok "installed and ran in a fresh Debian 12 root ($(($(date +%s) - start)) s)"
fi
[ $fails -eq 0 ] && echo "all package checks passed" || { echo "$fails package checks failed"; exit 1; }
