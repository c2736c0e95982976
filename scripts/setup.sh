#!/usr/bin/env bash
# setup.sh [build|all]: install the Debian packages sluice needs. Idempotent: installs only what is missing.
# `build`: what building `sluiced` and `sluicectl` needs (README command (1)); `all` (default): that plus what the
# whole test suite, the fuzzers and the package test use (command (2)).
# As root it runs apt-get; otherwise it prints the exact command to run.
set -euo pipefail
scope=${1:-all}
case $scope in build|all) ;; *) echo "usage: setup.sh [build|all]" >&2; exit 2;; esac
build_packages=(
  build-essential cmake pkg-config ninja-build
  libboost-dev            # Asio, Lockfree (header-only)
  libyaml-cpp-dev
  nlohmann-json3-dev
  libspdlog-dev libfmt-dev
  libffmpeg-nvenc-dev     # NVDEC: the loader headers for the driver's libcuda/libnvcuvid (dlopen()ed at run time)
  libavformat-dev libavcodec-dev libavutil-dev libswscale-dev  # the media library: video files and streams
  libopencv-core-dev libopencv-imgproc-dev
  libopencv-videoio-dev libopencv-imgcodecs-dev  # the media library: images, cameras, image output
  libsystemd-dev          # sd_notify
  libonnx-dev libprotobuf-dev  # ONNX model files (the onnx_proto messages over protobuf)
  libdnnl-dev             # oneDNN: the CPU inference backend's convolutions and matrix products
  ocl-icd-opencl-dev      # only Recommended by libdnnl-dev, but its CMake config fails without OpenCL
  libhiredis-dev          # the Redis Streams connectors (redis sink)
  libssl-dev              # TLS to Redis (rediss://)
  libmosquitto-dev        # the mqtt sink (libmosquitto's C API)
)
test_packages=(
  catch2
  ffmpeg                  # the media tests make their inputs (H.264, MJPEG, PNG) and serve a stream with it
  systemd                 # systemd-analyze verifies the unit files in the tests
  openssl                 # the TLS tests make their certificates with openssl
  redis-server            # the Redis tests start their own server on a loopback port
  mosquitto               # the MQTT tests start their own broker on a loopback port
  python3-torch python3-torchvision python3-onnx python3-numpy  # reference models and outputs for the tests
  python3                 # the service tests drive the daemon from a script
  chromium chromium-driver python3-selenium  # the console test drives the page in headless Chromium
  clang libclang-rt-14-dev  # libFuzzer harnesses (fuzz preset)
  dpkg-dev mmdebstrap     # the package test: dpkg-shlibdeps computes Depends; a fresh Debian 12 root to install into
)
packages=("${build_packages[@]}")
[ "$scope" = all ] && packages+=("${test_packages[@]}")
# promtool (the metrics test checks live scrapes with it) comes out of Debian's `prometheus` package without
# installing that: the package would pull in 330 MB (mostly its web UI's JavaScript) and start a server.
promtool_dest=/usr/local/bin/promtool
install_promtool() {
  command -v promtool >/dev/null && return 0
  local dir
  dir=$(mktemp -d)
  (cd "$dir" && { apt-get download prometheus >/dev/null 2>&1 || { apt-get update -qq && apt-get download prometheus; }; } &&
    dpkg-deb --fsys-tarfile prometheus_*.deb | tar -xO ./usr/bin/promtool >"$dir/promtool") &&
    install -m 0755 "$dir/promtool" "$promtool_dest" && echo "setup: promtool from Debian's prometheus package"
  local rc=$?
  rm -rf "$dir"
  return $rc
}
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  if [ "$scope" = all ] && ! command -v promtool >/dev/null; then
    [ "$(id -u)" -eq 0 ] || { echo "setup: promtool missing; run this script as root" >&2; exit 1; }
    install_promtool
  fi
  exit 0
fi
cmd=(apt-get install -y --no-install-recommends "${missing[@]}")
if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing packages; run as root:" >&2
  echo "  apt-get update && ${cmd[*]}" >&2
  exit 1
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
"${cmd[@]}"
[ "$scope" = build ] || install_promtool
