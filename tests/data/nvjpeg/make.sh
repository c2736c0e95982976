#!/bin/sh
# Re-makes the test images of this folder (see README.md). Needs ffmpeg and python3.
set -eu
cd "$(dirname "$0")"
F="ffmpeg -hide_banner -loglevel error -y"
$F -f lavfi -i testsrc2=s=64x48 -frames:v 1 -pix_fmt yuvj444p -q:v 2 color444.jpg
$F -f lavfi -i "nullsrc=s=80x60,format=gbrp,geq=r='40+2*X':g='30+3*Y':b='128+60*sin(X/9)*cos(Y/7)'" \
  -frames:v 1 -pix_fmt yuvj420p -q:v 2 smooth420.jpg
$F -f lavfi -i "nullsrc=s=33x17,format=gbrp,geq=r='200-4*X':g='20+8*Y':b='90+3*X'" \
  -frames:v 1 -pix_fmt yuvj420p -q:v 2 odd420.jpg
$F -f lavfi -i testsrc2=s=32x24 -frames:v 1 -pix_fmt rgb24 image.png
for f in color444 smooth420 odd420; do
  $F -i $f.jpg -f rawvideo -pix_fmt bgr24 -sws_flags accurate_rnd+full_chroma_int+bitexact $f.bgr
done
python3 - <<'PY'
d = open('color444.jpg', 'rb').read()
open('corrupt.jpg', 'wb').write(d[:2] + b'this is not a jpeg segment' + d[28:])
t = open('smooth420.jpg', 'rb').read()
open('truncated.jpg', 'wb').write(t[:len(t) * 6 // 10])
import struct
def exif(order, orientation):  # APP1: "Exif\0\0", a TIFF header, IFD0 with one entry (0x0112, SHORT, 1)
    e = '<' if order == b'II' else '>'
    tiff = order + struct.pack(e + 'HI', 42, 8) + struct.pack(e + 'H', 1)
    tiff += struct.pack(e + 'HHIHH', 0x0112, 3, 1, orientation, 0) + struct.pack(e + 'I', 0)
    body = b'Exif\0\0' + tiff
    return b'\xff\xe1' + struct.pack('>H', len(body) + 2) + body
open('exif6.jpg', 'wb').write(d[:2] + exif(b'II', 6) + d[2:])
open('exif8.jpg', 'wb').write(d[:2] + exif(b'MM', 8) + d[2:])
PY
