#!/usr/bin/env python3
"""The CPU-decode baseline next to the NVDEC bound: OpenCV's cv2.VideoCapture (FFmpeg inside) decoding one file
in P processes, each reading it L times to its end (frames as BGR numpy arrays, as a user's loop gets them).

    opencv_decode_baseline.py FILE PROCESSES LOOPS

Prints one JSON line: frames, seconds (from the first process start to the last end), frames/s.
"""
import json
import multiprocessing as mp
import sys
import time


def decode(path, loops, out):
    import cv2
    n = 0
    for _ in range(loops):
        cap = cv2.VideoCapture(path)
        while True:
            ok, _frame = cap.read()
            if not ok:
                break
            n += 1
        cap.release()
    out.put(n)


def main():
    path, procs, loops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    out = mp.Queue()
    t0 = time.perf_counter()
    workers = [mp.Process(target=decode, args=(path, loops, out)) for _ in range(procs)]
    for w in workers:
        w.start()
    frames = sum(out.get() for _ in workers)
    for w in workers:
        w.join()
    seconds = time.perf_counter() - t0
    print(json.dumps({"file": path, "processes": procs, "loops": loops, "frames": frames,
                      "seconds": round(seconds, 3), "fps": round(frames / seconds, 1)}))


if __name__ == "__main__":
    main()
