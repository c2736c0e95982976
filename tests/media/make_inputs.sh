#!/bin/sh
# Makes the media tests' inputs with Debian's ffmpeg (package `ffmpeg`) from lavfi test sources:
#   clip.mp4        H.264 (libx264, yuv420p) 320x240, 48 frames at 24 fps, moov first (the stream tests serve it)
#   clip.avi        MJPEG 256x192, 30 frames at 30 fps
#   clip.mkv        H.264 in Matroska 352x288, 36 frames at 25 fps
#   seq/frame_%04d.png  12 PNG images 160x120 (numbered from 1, as ffmpeg's image2 muxer does)
#   image.png, image.jpg  single images 200x150
#   truncated.mp4   clip.mp4's twin (96 frames) cut at half its size: the index announces every frame, reading
#                   ends early
#   corrupt.mp4     random bytes (fixed seed); empty.mp4 (0 bytes); notes.txt (text, not a video)
#   job/            a batch job: 01_small.mp4, 02_mjpeg.avi, 03_broken.mp4 (random bytes), 04_wide.mp4
#   vfr.mp4         H.264 160x120, 40 frames: 20 at 30 fps, then 20 at 10 fps (variable frame rate);
#                   vfr.mkv the same stream in Matroska (no frame index)
#   drops/          variable frame rate by irregular frame drops, as ffmpeg's select + -fps_mode vfr makes it: 72
#                   of 150 frames at 30 fps kept (2 of every 5, all of 60..79) in 160x120. drops.mkv (H.264 with
#                   B-frames), drops.webm (VP9), drops.ts, drops.flv, drops.avi (H.264; AVI's header counts the
#                   dropped frames' empty chunks: 147), drops.mp4 (H.264, the sample table states 72); the others'
#                   headers give 30 fps, so duration x rate would say 147 frames. editlist.mp4: a stream copy
#                   of a 60-frame H.264 clip (keyframes every 30) cut at 1.2 s: the sample table holds 30 frames
#                   from the keyframe at 1 s, an edit list shows the last 24
#   hevc.mp4        HEVC (libx265) 160x96, 12 frames
#   rot90.mp4, rot180.mp4, rot270.mp4  rotated.mp4's stream (H.264 160x96) with a display matrix (rotate=N)
#   portrait.mp4    H.264 96x160, 6 frames (for fit: letterbox/crop)
#   manifest.json   the expected frame counts and sizes of the good files (frames_stated: the count the reader
#                   reports up front where it is not `frames`: -1, no container-stated count), and what is wrong
#                   with the bad ones
# Usage: make_inputs.sh DIR. Idempotent: does nothing when DIR/.complete exists and was written by this very
# script (it holds the script's checksum, so an edited script makes the inputs again). Quiet unless it fails.
set -eu

dir=${1:?usage: make_inputs.sh DIR}
stamp=$(cksum < "$0")
[ -f "$dir/.complete" ] && [ "$(cat "$dir/.complete")" = "$stamp" ] && exit 0
command -v ffmpeg >/dev/null 2>&1 || { echo "make_inputs.sh: ffmpeg not found (apt-get install ffmpeg)" >&2; exit 1; }

# Build beside DIR, then move into place: an interrupted run leaves no half-made DIR behind.
work="$dir.partial"
rm -rf "$work"
mkdir -p "$work/seq" "$work/job"
if [ -e "$dir" ]; then
  if [ -f "$dir/.made-by-make_inputs" ]; then rm -rf "$dir"
  elif rmdir "$dir" 2>/dev/null; then :
  else echo "make_inputs.sh: $dir exists and was not made by this script; not touching it" >&2; exit 1
  fi
fi

ff() { ffmpeg -hide_banner -nostdin -loglevel error -y "$@"; }
src() { echo "testsrc2=size=$1:rate=$2"; }  # colourful and moving; every frame differs
h264() { echo "-c:v libx264 -preset ultrafast -tune zerolatency -pix_fmt yuv420p -g 12"; }

cd "$work"
# shellcheck disable=SC2046
ff -f lavfi -i "$(src 320x240 24)" -frames:v 48 $(h264) -movflags +faststart clip.mp4
ff -f lavfi -i "$(src 256x192 30)" -frames:v 30 -c:v mjpeg -q:v 4 -pix_fmt yuvj420p clip.avi
# shellcheck disable=SC2046
ff -f lavfi -i "$(src 352x288 25)" -frames:v 36 $(h264) clip.mkv
ff -f lavfi -i "$(src 160x120 10)" -frames:v 12 seq/frame_%04d.png
ff -f lavfi -i "$(src 200x150 1)" -frames:v 1 image.png
ff -f lavfi -i "$(src 200x150 1)" -frames:v 1 -q:v 3 image.jpg

# Truncated: with the index (moov) first, every frame is announced; cutting the file in half loses the data of
# the second half. x264 without B-frames (zerolatency) keeps decode order = display order.
# shellcheck disable=SC2046
ff -f lavfi -i "$(src 320x240 24)" -frames:v 96 $(h264) -movflags +faststart full.mp4
size=$(wc -c < full.mp4)
head -c $((size / 2)) full.mp4 > truncated.mp4
rm -f full.mp4

# Variable frame rate: the timestamps of the second half are 3x apart.
# shellcheck disable=SC2046
ff -f lavfi -i "$(src 160x120 30)" -frames:v 40 -vf "setpts='if(lt(N,20),N/30/TB,(20/30+(N-20)/10)/TB)'" \
  -fps_mode vfr $(h264) vfr.mp4
ff -i vfr.mp4 -c copy vfr.mkv  # the same stream without a frame index
mkdir drops
drop="select='lt(mod(n\\,5)\\,2)+between(n\\,60\\,79)'"
for out in drops.mkv:"-c:v libx264 -preset veryfast -pix_fmt yuv420p -g 30" \
           drops.webm:"-c:v libvpx-vp9 -deadline realtime -cpu-used 8 -pix_fmt yuv420p -g 30" \
           drops.ts:"$(h264)" drops.flv:"$(h264)" drops.avi:"$(h264)" drops.mp4:"$(h264) -movflags +faststart"; do
  # shellcheck disable=SC2086
  ff -t 5 -f lavfi -i "$(src 160x120 30)" -vf "$drop" -fps_mode vfr ${out#*:} "drops/${out%%:*}"
done
# shellcheck disable=SC2046
ff -f lavfi -i "$(src 160x120 30)" -frames:v 60 $(h264) -g 30 long.mp4
ff -ss 1.2 -i long.mp4 -c copy drops/editlist.mp4
rm -f long.mp4
ff -f lavfi -i "$(src 160x96 24)" -frames:v 12 -c:v libx265 -preset ultrafast -pix_fmt yuv420p \
  -x265-params log-level=error hevc.mp4
# shellcheck disable=SC2046
ff -f lavfi -i "$(src 160x96 24)" -frames:v 12 $(h264) rotated.mp4
for turn in 90 180 270; do ff -i rotated.mp4 -c copy -metadata:s:v rotate=$turn rot$turn.mp4; done
rm -f rotated.mp4
# shellcheck disable=SC2046
ff -f lavfi -i "$(src 96x160 24)" -frames:v 6 $(h264) portrait.mp4

# Fixed pseudo-random bytes (not /dev/urandom): fresh ones now and then look like a stream FFmpeg opens (one run
# read them as H.263), which made "a corrupt file fails to open" fail by chance.
random_bytes() { python3 -c 'import random,sys; r=random.Random(int(sys.argv[2])); sys.stdout.buffer.write(bytes(r.getrandbits(8) for _ in range(int(sys.argv[1]))))' "$1" "$2"; }
random_bytes 65536 1 > corrupt.mp4
: > empty.mp4
printf 'These are notes, not a video.\n' > notes.txt

# shellcheck disable=SC2046
ff -f lavfi -i "$(src 320x240 24)" -frames:v 16 $(h264) -movflags +faststart job/01_small.mp4
ff -f lavfi -i "$(src 176x144 15)" -frames:v 10 -c:v mjpeg -q:v 4 -pix_fmt yuvj420p job/02_mjpeg.avi
random_bytes 32768 2 > job/03_broken.mp4
# shellcheck disable=SC2046
ff -f lavfi -i "$(src 480x270 30)" -frames:v 20 $(h264) -movflags +faststart job/04_wide.mp4

cat > manifest.json <<'JSON'
{
  "good": {
    "clip.mp4": {"kind": "file", "frames": 48, "width": 320, "height": 240, "fps": 24},
    "clip.avi": {"kind": "file", "frames": 30, "frames_stated": -1, "width": 256, "height": 192, "fps": 30},
    "clip.mkv": {"kind": "file", "frames": 36, "frames_stated": -1, "width": 352, "height": 288, "fps": 25},
    "seq/frame_%04d.png": {"kind": "image_sequence", "frames": 12, "width": 160, "height": 120},
    "image.png": {"kind": "image", "frames": 1, "width": 200, "height": 150},
    "image.jpg": {"kind": "image", "frames": 1, "width": 200, "height": 150},
    "job/01_small.mp4": {"kind": "file", "frames": 16, "width": 320, "height": 240, "fps": 24},
    "job/02_mjpeg.avi": {"kind": "file", "frames": 10, "frames_stated": -1, "width": 176, "height": 144, "fps": 15},
    "job/04_wide.mp4": {"kind": "file", "frames": 20, "width": 480, "height": 270, "fps": 30}
  },
  "bad": {
    "truncated.mp4": {"problem": "truncated", "frames_announced": 96},
    "corrupt.mp4": {"problem": "corrupt"},
    "empty.mp4": {"problem": "empty"},
    "notes.txt": {"problem": "unsupported"},
    "job/03_broken.mp4": {"problem": "corrupt"}
  },
  "job": {"dir": "job", "inputs": ["job/01_small.mp4", "job/02_mjpeg.avi", "job/03_broken.mp4", "job/04_wide.mp4"],
          "good_frames": 46}
}
JSON

touch .made-by-make_inputs
echo "$stamp" > .complete
cd - >/dev/null
mv "$work" "$dir"
