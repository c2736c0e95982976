#!/usr/bin/env python3
"""camsim_load: plays N streams of an RTSP server at once and says whether they arrived whole and on time.

    camsim_load.py rtsp://127.0.0.1:8554 --streams 160 --transport udp --duration 30

Plays /cam0 ... /cam{N-1} (camsim's paths) over TCP (interleaved) or UDP, without decoding: counts RTP packets,
access units (marker bits), lost packets (sequence gaps) and timestamp steps other than 90000/fps, per stream.
Standard library only, like camsim, so it measures the simulator on a host without a media library. Exits 1 when
a stream could not be played, lost packets, or got timestamp steps other than one frame's (a stall or loss
asked of the server shows up here on purpose).
"""
import argparse
import json
import selectors
import socket
import struct
import sys
import time
import urllib.parse

KEEPALIVE_S = 15.0


def rtsp_request(sock, method, url, cseq, extra=""):
    """Sends one request on a blocking socket and returns (status, headers) of its reply (bodies skipped)."""
    sock.sendall(f"{method} {url} RTSP/1.0\r\nCSeq: {cseq}\r\n{extra}\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise OSError(f"{method}: the server closed the connection")
        data += chunk
        if len(data) > 1 << 20:
            raise OSError(f"{method}: reply head over 1 MiB")
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise OSError(f"{method}: the server closed the connection")
        rest += chunk
    status = lines[0].split(" ")
    if len(status) < 2 or status[1] != "200":
        raise OSError(f"{method}: {lines[0]}")
    return headers, rest[length:]


class Stream:
    def __init__(self, index, base, transport, frame_step):
        self.name = f"cam{index}"
        self.url = f"{base}/{self.name}"
        self.transport = transport
        self.frame_step = frame_step
        self.packets = self.bytes = self.access_units = self.lost = self.odd_steps = 0
        self.last_seq = self.last_ts = None
        self.inbuf = bytearray()
        host, port = urllib.parse.urlsplit(base).hostname, urllib.parse.urlsplit(base).port or 554
        self.control = socket.create_connection((host, port), timeout=10)
        self.cseq = 1
        rtsp_request(self.control, "DESCRIBE", self.url, self.next_cseq(), "Accept: application/sdp\r\n")
        if transport == "tcp":
            offer = "RTP/AVP/TCP;unicast;interleaved=0-1"
            self.udp = None
        else:
            self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            self.udp.bind(("", 0))
            port = self.udp.getsockname()[1]
            offer = f"RTP/AVP;unicast;client_port={port}-{port + 1}"
        headers, _ = rtsp_request(self.control, "SETUP", f"{self.url}/trackID=0", self.next_cseq(),
                                  f"Transport: {offer}\r\n")
        self.session = headers.get("session", "").split(";")[0]
        _, early = rtsp_request(self.control, "PLAY", self.url, self.next_cseq(), f"Session: {self.session}\r\n")
        self.inbuf += early  # interleaved packets that came with the PLAY reply
        self.control.setblocking(False)
        if self.udp:
            self.udp.setblocking(False)

    def next_cseq(self):
        self.cseq += 1
        return self.cseq

    def keepalive(self):
        try:
            self.control.send(f"GET_PARAMETER {self.url} RTSP/1.0\r\nCSeq: {self.next_cseq()}\r\n"
                              f"Session: {self.session}\r\n\r\n".encode())
        except BlockingIOError:
            pass

    def rtp(self, packet):
        if len(packet) < 12:
            return
        seq, ts = struct.unpack_from("!HI", packet, 2)
        if self.last_seq is not None:
            self.lost += (seq - self.last_seq - 1) & 0xFFFF
        if self.last_ts is not None and ts != self.last_ts:
            if abs(((ts - self.last_ts) & 0xFFFFFFFF) - self.frame_step) > 1:
                self.odd_steps += 1
        self.last_seq, self.last_ts = seq, ts
        self.packets += 1
        self.bytes += len(packet)
        self.access_units += packet[1] >> 7

    def on_tcp(self, data):
        buf = self.inbuf
        buf += data
        pos = 0
        while len(buf) - pos >= 4:
            if buf[pos] == 0x24:
                length = (buf[pos + 2] << 8) | buf[pos + 3]
                if len(buf) - pos < 4 + length:
                    break
                if buf[pos + 1] == 0:
                    self.rtp(buf[pos + 4:pos + 4 + length])
                pos += 4 + length
            else:  # a reply to a keep-alive
                end = buf.find(b"\r\n\r\n", pos)
                if end < 0:
                    break
                pos = end + 4
        del buf[:pos]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("base", help="rtsp://HOST:PORT (streams are /cam0 ...)")
    p.add_argument("--streams", type=int, default=1)
    p.add_argument("--transport", choices=["tcp", "udp"], default="tcp")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--fps", type=float, default=30.0, help="the server's frame rate (timestamp step 90000/fps)")
    p.add_argument("--json", action="store_true", help="print one JSON object per stream instead of a summary")
    args = p.parse_args(argv)
    try:
        streams = [Stream(i, args.base.rstrip("/"), args.transport, 90000 / args.fps) for i in range(args.streams)]
    except (OSError, ValueError) as e:
        print(f"camsim_load: {e}", file=sys.stderr)
        return 1
    selector = selectors.DefaultSelector()
    for s in streams:
        selector.register(s.control, selectors.EVENT_READ, (s, "tcp"))
        if s.udp:
            selector.register(s.udp, selectors.EVENT_READ, (s, "udp"))
    started = time.monotonic()
    next_keepalive = started + KEEPALIVE_S
    closed = []
    while time.monotonic() - started < args.duration:
        for key, _ in selector.select(0.2):
            stream, kind = key.data
            if kind == "udp":
                for _ in range(64):
                    try:
                        stream.rtp(stream.udp.recv(65536))
                    except BlockingIOError:
                        break
                continue
            try:
                data = stream.control.recv(1 << 18)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                selector.unregister(stream.control)
                closed.append(stream.name)
                continue
            stream.on_tcp(data)
        if time.monotonic() >= next_keepalive:
            next_keepalive += KEEPALIVE_S
            for s in streams:
                s.keepalive()
    elapsed = time.monotonic() - started
    rates = [s.access_units / elapsed for s in streams]
    if args.json:
        for s in streams:
            print(json.dumps({"stream": s.name, "packets": s.packets, "bytes": s.bytes, "access_units": s.access_units,
                              "lost": s.lost, "odd_timestamp_steps": s.odd_steps}))
    print(f"camsim_load: {len(streams)} streams over {args.transport} for {elapsed:.1f} s: "
          f"access units/s per stream min {min(rates):.1f} mean {sum(rates) / len(rates):.1f}, "
          f"{sum(s.bytes for s in streams) * 8 / elapsed / 1e6:.0f} Mbit/s in all, "
          f"{sum(s.lost for s in streams)} packets lost, {sum(s.odd_steps for s in streams)} odd timestamp steps"
          + (f", closed by the server: {' '.join(closed)}" if closed else ""), file=sys.stderr)
    return 0 if not closed and not any(s.lost or s.odd_steps for s in streams) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
