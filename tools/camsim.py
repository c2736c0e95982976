#!/usr/bin/env python3
"""camsim: a camera simulator. Serves N live RTSP streams (RFC 2326) from one Annex-B H.264 or HEVC file.

    camsim.py clip.h264 --streams 32 --port 8554          # rtsp://HOST:8554/cam0 ... /cam31

Python's standard library only, so it runs on the GPU host (no media library there) and in CI. One thread and
one selector loop serve every stream: cameras are paced against a monotonic clock, RTP goes over TCP
(interleaved) or UDP, packetised per RFC 6184 (H.264: single NAL units, FU-A) and RFC 7798 (HEVC: single NAL
units, FU type 49), with RTCP sender reports every 2 s.

A camera's clock starts when its first client plays it; from then on it produces one access unit every 1/fps s
whether anyone watches or not, looping the file with continuous RTP timestamps (the file restarts, the clock
does not). A client joins live at the next random-access picture (IDR/IRAP), with the parameter sets in front
of it. Sequence numbers run per session and never restart. Knob times (--stall, --resolution-change) count
from the camera's first play, and each knob happens once.

Every byte a client sends is hostile: requests are parsed with bounds, a client that sends garbage is answered
with an error and dropped, one that stops reading is dropped once its pending output passes
--send-buffer-bytes, and nothing a client does stops the others being served.

B-frames: an Annex-B file carries no timestamps, so access units are stamped in decode order; feed clips
without B-frames (as cameras send).
"""
import argparse
import base64
import collections
import heapq
import os
import random
import re
import resource
import selectors
import signal
import socket
import struct
import sys
import time
import urllib.parse

RTP_CLOCK_HZ = 90000
PAYLOAD_TYPE = 96
RTCP_INTERVAL_S = 2.0
MAX_FILE_BYTES = 1 << 30
MAX_REQUEST_HEAD_BYTES = 16 * 1024  # request line and headers
MAX_REQUEST_BODY_BYTES = 64 * 1024
MAX_HEADERS = 64
MAX_SESSIONS_PER_CONNECTION = 16
RECV_CHUNK = 64 * 1024
HOUSEKEEPING_S = 0.5
HOSTILE_MODES = {
    "garbage": "every RTSP reply is 2 KiB of random bytes",
    "truncated": "the first reply stops half-way through its headers, then the server goes silent",
    "oversized-header": "every reply carries a 1 MiB header line",
    "bad-sdp": "DESCRIBE answers with a broken SDP (clock rate 0, bad base64, oversized and binary lines)",
    "wrong-channel": "RTP on the wrong interleaved channel (TCP) or to the client's RTCP port (UDP)",
    "garbage-rtp": "every RTP packet is replaced by random bytes of the same length",
    "huge-fu": "one fragmented NAL unit that never ends (FU start, then 256 KiB of middle fragments per frame)",
}
HUGE_FU_BYTES_PER_FRAME = 256 * 1024

_rtp_header = struct.Struct("!BBHII")
_interleaved_rtp_header = struct.Struct("!BBHBBHII")  # '$', channel, length, then the RTP header


def log(message):
    print(f"camsim: {message}", file=sys.stderr, flush=True)


class InputError(Exception):
    """A bad input file: the message says which and why."""


# --- Annex-B input ----------------------------------------------------------------------------------------------

def split_nal_units(data):
    """The NAL units of an Annex-B byte string (start codes of 3 or 4 bytes; trailing zero bytes dropped)."""
    units = []
    start = data.find(b"\x00\x00\x01")
    while start >= 0:
        begin = start + 3
        nxt = data.find(b"\x00\x00\x01", begin)
        end = len(data) if nxt < 0 else nxt
        while end > begin and data[end - 1] == 0:
            end -= 1
        if end > begin:
            units.append(data[begin:end])
        start = nxt
    return units


class H264:
    name = "h264"
    header_bytes = 1
    fu_type = 28

    @staticmethod
    def nal_type(nal):
        return nal[0] & 0x1F

    @staticmethod
    def is_vcl(t):
        return 1 <= t <= 5

    @staticmethod
    def starts_new_au(t):  # SEI, SPS, PPS, AUD, 14..18 begin an access unit
        return t in (6, 7, 8, 9) or 14 <= t <= 18

    @staticmethod
    def first_slice_of_picture(nal):  # first_mb_in_slice, ue(v), is 0 when its first bit is 1
        return len(nal) > 1 and nal[1] & 0x80 != 0

    @staticmethod
    def is_irap(t):
        return t == 5

    parameter_set_types = {7: "sps", 8: "pps"}

    @staticmethod
    def plausible(types):
        return {7, 8} <= types and bool(types & {1, 5}) and 0 not in types

    @staticmethod
    def fu_headers(nal):
        """(prefix of every fragment, FU header of the first, of the middle ones, of the last) for nal."""
        indicator = bytes([(nal[0] & 0xE0) | 28])
        t = nal[0] & 0x1F
        return indicator, 0x80 | t, t, 0x40 | t

    @staticmethod
    def sdp_media(params):
        sps = params.get("sps", b"")
        profile = sps[1:4].hex() if len(sps) >= 4 else "42e01e"
        sets = ",".join(base64.b64encode(params[k]).decode() for k in ("sps", "pps") if k in params)
        return ("a=rtpmap:96 H264/90000\r\n"
                f"a=fmtp:96 packetization-mode=1;profile-level-id={profile};sprop-parameter-sets={sets}\r\n")


class HEVC:
    name = "hevc"
    header_bytes = 2
    fu_type = 49

    @staticmethod
    def nal_type(nal):
        return (nal[0] >> 1) & 0x3F

    @staticmethod
    def is_vcl(t):
        return t < 32

    @staticmethod
    def starts_new_au(t):  # VPS, SPS, PPS, AUD, prefix SEI, 41..44, 48..55 begin an access unit
        return 32 <= t <= 35 or t == 39 or 41 <= t <= 44 or 48 <= t <= 55

    @staticmethod
    def first_slice_of_picture(nal):  # first_slice_segment_in_pic_flag
        return len(nal) > 2 and nal[2] & 0x80 != 0

    @staticmethod
    def is_irap(t):
        return 16 <= t <= 23

    parameter_set_types = {32: "vps", 33: "sps", 34: "pps"}

    @staticmethod
    def plausible(types):
        return {32, 33, 34} <= types and any(t <= 21 for t in types)

    @staticmethod
    def fu_headers(nal):
        prefix = bytes([(nal[0] & 0x81) | (49 << 1), nal[1]])
        t = (nal[0] >> 1) & 0x3F
        return prefix, 0x80 | t, t, 0x40 | t

    @staticmethod
    def sdp_media(params):
        sets = ";".join(f"sprop-{k}={base64.b64encode(params[k]).decode()}" for k in ("vps", "sps", "pps")
                        if k in params)
        return f"a=rtpmap:96 H265/90000\r\na=fmtp:96 {sets}\r\n"


CODECS = {"h264": H264, "hevc": HEVC}


def detect_codec(units, path):
    """The codec whose NAL headers make sense of the file's first units (H.264 SPS+PPS+slices, or HEVC
    VPS+SPS+PPS+slices, and not both)."""
    head = [u for u in units[:200] if u and u[0] & 0x80 == 0]
    fits = [c for c in (H264, HEVC) if c.plausible({c.nal_type(u) for u in head if len(u) >= c.header_bytes})]
    if len(fits) != 1:
        raise InputError(f"{path}: cannot tell H.264 from HEVC by its NAL unit headers"
                         + (" (no parameter sets and slices of either)" if not fits else "") + "; pass --codec")
    return fits[0]


class AccessUnit:
    __slots__ = ("packets", "irap", "has_parameter_sets", "nbytes")

    def __init__(self, packets, irap, has_parameter_sets):
        self.packets = packets  # [(payload, marker)]
        self.irap = irap
        self.has_parameter_sets = has_parameter_sets
        self.nbytes = sum(len(p) for p, _ in packets)


def packetise(codec, nal, mtu):
    """RTP payloads of one NAL unit: the unit itself when it fits, else fragmentation units."""
    if len(nal) <= mtu:
        return [nal]
    prefix, first, middle, last = codec.fu_headers(nal)
    body = memoryview(nal)[codec.header_bytes:]
    step = mtu - len(prefix) - 1
    payloads = []
    for offset in range(0, len(body), step):
        chunk = body[offset:offset + step]
        fu = first if offset == 0 else last if offset + step >= len(body) else middle
        payloads.append(prefix + bytes([fu]) + bytes(chunk))
    return payloads


class Clip:
    """An Annex-B file cut into access units, each already packetised (shared by every stream)."""

    def __init__(self, path, codec_name, mtu):
        self.path = path
        try:
            size = os.path.getsize(path)
            if size > MAX_FILE_BYTES:
                raise InputError(f"{path}: {size} bytes, over the {MAX_FILE_BYTES} byte limit")
            with open(path, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except OSError as e:
            raise InputError(f"{path}: {e.strerror or e}") from None
        units = split_nal_units(data)
        if not units:
            raise InputError(f"{path}: no Annex-B start code (00 00 01): not an H.264/HEVC elementary stream")
        codec = CODECS[codec_name] if codec_name != "auto" else detect_codec(units, path)
        self.codec = codec
        self.parameter_sets = {}
        self.access_units = []
        current, has_vcl, irap, has_params = [], False, False, False
        for nal in units:
            if len(nal) < codec.header_bytes or nal[0] & 0x80:
                continue  # forbidden_zero_bit set or too short: not a NAL unit a decoder would take
            t = codec.nal_type(nal)
            vcl = codec.is_vcl(t)
            if has_vcl and (codec.starts_new_au(t) or (vcl and codec.first_slice_of_picture(nal))):
                self._add(current, irap, has_params, mtu)
                current, has_vcl, irap, has_params = [], False, False, False
            if t in codec.parameter_set_types:
                self.parameter_sets.setdefault(codec.parameter_set_types[t], nal)
                has_params = True
            has_vcl = has_vcl or vcl
            irap = irap or (vcl and codec.is_irap(t))
            current.append(nal)
        if has_vcl:
            self._add(current, irap, has_params, mtu)
        missing = [k for k in codec.parameter_set_types.values() if k not in self.parameter_sets]
        if missing or not self.access_units:
            raise InputError(f"{path}: not a {codec.name} stream a client could decode (missing: "
                             f"{', '.join(missing + ([] if self.access_units else ['pictures']))})")
        if not any(au.irap for au in self.access_units):
            raise InputError(f"{path}: no random-access picture (IDR/IRAP): a client could never start decoding")
        self.parameter_set_packets = [(p, False) for k in codec.parameter_set_types.values()
                                      for p in packetise(codec, self.parameter_sets[k], mtu)]
        self.bytes_per_loop = sum(au.nbytes for au in self.access_units)

    def _add(self, nals, irap, has_params, mtu):
        payloads = [p for nal in nals for p in packetise(self.codec, nal, mtu)]
        self.access_units.append(AccessUnit([(p, i == len(payloads) - 1) for i, p in enumerate(payloads)],
                                            irap, has_params))


# --- cameras and sessions ----------------------------------------------------------------------------------------

class Camera:
    """One stream: its clip, its clock, its knobs and the sessions playing it."""

    def __init__(self, index, clip, fps, rng):
        self.index = index
        self.clip = clip
        self.fps = fps
        self.rng = rng
        self.ssrc = rng.getrandbits(32)
        self.timestamp_base = rng.getrandbits(32)
        self.loss = 0.0
        self.stalls = []  # [(at_s, seconds)]
        self.switches = []  # [(at_s, Clip)], sorted
        self.hostile = None
        self.started_at = None  # monotonic time of the first play
        self.frame = 0  # frames produced since the first play
        self.au_index = 0
        self.sessions = []
        self.stalled = False

    @property
    def path(self):
        return f"/cam{self.index}"

    def timestamp(self, frame):
        return (self.timestamp_base + round(frame * RTP_CLOCK_HZ / self.fps)) & 0xFFFFFFFF

    def timestamp_at(self, now):
        return (self.timestamp_base + round((now - self.started_at) * RTP_CLOCK_HZ)) & 0xFFFFFFFF

    def frames_to_next_irap(self):
        """Frames until the clip's next random-access picture, this one included (a switch meanwhile aside)."""
        units = self.clip.access_units
        return next(k for k in range(len(units)) if units[(self.au_index + k) % len(units)].irap)

    def due(self, frame):
        return self.started_at + frame / self.fps

    def in_stall(self, t):
        return any(at <= t < at + seconds for at, seconds in self.stalls)


class Session:
    __slots__ = ("id", "camera", "connection", "tcp", "channel", "client_rtp", "client_rtcp", "seq", "playing",
                 "waiting_for_irap", "needs_parameter_sets", "packets", "octets", "next_report", "huge_fu_ts",
                 "track_url")

    def __init__(self, session_id, camera, connection, rng):
        self.id = session_id
        self.camera = camera
        self.connection = connection
        self.tcp = True
        self.channel = 0
        self.client_rtp = self.client_rtcp = None
        self.seq = rng.getrandbits(16)
        self.playing = False
        self.waiting_for_irap = True
        self.needs_parameter_sets = True
        self.packets = self.octets = 0
        self.next_report = 0.0
        self.huge_fu_ts = None
        self.track_url = ""


class Request:
    __slots__ = ("method", "url", "headers")

    def __init__(self, method, url, headers):
        self.method, self.url, self.headers = method, url, headers


class BadRequest(Exception):
    """A request answered with an error status, after which the connection is closed."""

    def __init__(self, status, reason):
        super().__init__(reason)
        self.status = status


STATUS_TEXT = {200: "OK", 400: "Bad Request", 404: "Not Found", 413: "Request Entity Too Large",
               431: "Request Header Fields Too Large", 453: "Not Enough Bandwidth", 454: "Session Not Found",
               455: "Method Not Valid in This State", 461: "Unsupported Transport", 501: "Not Implemented",
               505: "RTSP Version Not Supported"}


class Connection:
    """One RTSP client connection: bounded input parsing, a bounded output queue, its sessions."""

    def __init__(self, server, sock, peer):
        self.server = server
        self.sock = sock
        self.peer = peer
        self.label = f"{peer[0]}:{peer[1]}"
        self.inbuf = bytearray()
        self.skip = 0  # bytes of an interleaved frame from the client still to skip
        self.out = collections.deque()
        self.pending = 0
        self.packets_sent = 0
        self.sessions = {}
        self.last_activity = time.monotonic()
        self.mute = False  # ignore the client from now on (a hostile 'truncated' reply, or closing)
        self.closed = False
        self.closing_reason = ""  # set once the connection is being closed after its last reply
        self.half_closed = False
        self.writing = False

    # input
    def on_readable(self):
        try:
            data = self.sock.recv(RECV_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self.server.drop(self, f"receive failed: {e.strerror or e}")
            return
        if not data:
            self.server.drop(self, self.closing_reason or "closed by the client")
            return
        self.last_activity = time.monotonic()
        if self.mute:
            return
        self.inbuf += data
        self.parse()

    def parse(self):
        while self.inbuf and not self.closed:
            if self.skip:
                n = min(self.skip, len(self.inbuf))
                del self.inbuf[:n]
                self.skip -= n
                continue
            if self.inbuf[0] == 0x24:  # '$': an interleaved frame (RTCP receiver reports): skipped
                if len(self.inbuf) < 4:
                    return
                self.skip = 4 + struct.unpack_from("!H", self.inbuf, 2)[0]
                continue
            ends = [(i, n) for i, n in ((self.inbuf.find(b"\r\n\r\n"), 4), (self.inbuf.find(b"\n\n"), 2)) if i >= 0]
            if not ends:
                if len(self.inbuf) > MAX_REQUEST_HEAD_BYTES:
                    self.reply_error(BadRequest(431, f"request head over {MAX_REQUEST_HEAD_BYTES} bytes"), {})
                return
            end, sep = min(ends)
            if end > MAX_REQUEST_HEAD_BYTES:
                self.reply_error(BadRequest(431, f"request head over {MAX_REQUEST_HEAD_BYTES} bytes"), {})
                return
            head = bytes(self.inbuf[:end]).decode("latin-1")
            headers = {}
            try:
                method, url, headers = parse_request_head(head, headers)
                length = content_length(headers)
            except BadRequest as e:
                self.reply_error(e, headers)
                return
            if len(self.inbuf) < end + sep + length:
                return
            del self.inbuf[:end + sep + length]  # a body (SET_PARAMETER's, say) is skipped: no method here reads one
            self.server.handle(self, Request(method, url, headers))

    def reply_error(self, error, headers):
        self.server.respond(self, headers, error.status, body=f"{error}\r\n".encode(), content_type="text/plain")
        self.server.drop(self, f"bad request: {error}", flush_first=True)

    # output
    def send(self, data):
        """Queues data; drops the client when data would push its queue, not empty, over the limit (the client
        does not read). An empty queue takes anything: one reply bigger than the limit is not the client's fault."""
        if self.closed:
            return
        if self.pending and self.pending + len(data) > self.server.send_buffer_bytes:
            self.server.drop(self, f"not reading ({self.pending} bytes pending)")
            return
        self.out.append(memoryview(data))
        self.pending += len(data)
        self.flush()

    def flush(self):
        while self.out:
            head = self.out[0]
            try:
                n = self.sock.send(head)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                self.server.drop(self, f"send failed: {e.strerror or e}")
                return
            self.pending -= n
            if n < len(head):
                self.out[0] = head[n:]
                break
            self.out.popleft()
        want_write = bool(self.out)
        if want_write != self.writing:
            self.writing = want_write
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if want_write else 0)
            self.server.selector.modify(self.sock, events, self)
        if not self.out and self.closing_reason and not self.half_closed:
            # Lingering close: the client reads the last reply before it sees the end (closing with its bytes
            # unread would reset the connection and could discard that reply).
            self.half_closed = True
            try:
                self.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass


_method = re.compile(r"[A-Z][A-Z_]{0,31}")


def parse_request_head(head, headers):
    """(method, url, headers) of a request head; headers (a dict) is filled as far as they parse, so an error
    reply can still carry the CSeq."""
    lines = head.replace("\r\n", "\n").split("\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _method.fullmatch(parts[0]):
        raise BadRequest(400, "not an RTSP request line")
    method, url, version = parts
    if not version.startswith("RTSP/"):
        raise BadRequest(400, "not an RTSP request line")
    if len(lines) - 1 > MAX_HEADERS:
        raise BadRequest(431, f"over {MAX_HEADERS} header lines")
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name.strip():
            raise BadRequest(400, "a header line without a name")
        headers[name.strip().lower()] = value.strip()
    if version != "RTSP/1.0":
        raise BadRequest(505, f"version {version[:16]!r} is not RTSP/1.0")
    return method, url, headers


def content_length(headers):
    text = headers.get("content-length", "0")
    if not text.isdigit() or len(text) > 9:
        raise BadRequest(400, "Content-Length is not a number")
    if int(text) > MAX_REQUEST_BODY_BYTES:
        raise BadRequest(413, f"body over {MAX_REQUEST_BODY_BYTES} bytes")
    return int(text)


_camera_path = re.compile(r"^/cam(\d{1,6})(?:/[^/]*)?$")


class Server:
    def __init__(self, args, clip, switch_clips):
        self.args = args
        self.fps = args.fps
        self.send_buffer_bytes = args.send_buffer_bytes
        self.session_timeout = args.session_timeout
        self.rng = random.Random(args.seed)
        self.selector = selectors.DefaultSelector()
        self.cameras = [Camera(i, clip, args.fps, random.Random(self.rng.getrandbits(64)))
                        for i in range(args.streams)]
        for cam, loss in args.loss:
            for c in self.select(cam):
                c.loss = loss
        for cam, at, seconds in args.stall:
            self.cameras[cam].stalls.append((at, seconds))
        for cam, at, path in args.resolution_change:
            self.cameras[cam].switches.append((at, switch_clips[path]))
        for c in self.cameras:
            c.switches.sort(key=lambda s: s[0])
        for cam, mode in args.hostile:
            for c in self.select(cam):
                c.hostile = mode
        self.connections = set()
        self.to_close = {}  # connection -> when it is closed even if the client has not read its last reply
        self.accept_again_at = None
        self.timers = []  # heap of (due, camera index)
        self.stopping = False
        self.frames_sent = self.packets_sent = self.udp_dropped = 0
        self.late_frames = 0
        self.max_lag = 0.0
        self.started = time.monotonic()

        family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
        self.listener = socket.create_server((args.host, args.port), family=family, backlog=256)
        self.listener.setblocking(False)
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.rtp_socket, self.rtcp_socket = self.bind_udp_pair(args.host)
        for s in (self.rtp_socket, self.rtcp_socket):
            self.selector.register(s, selectors.EVENT_READ, "udp")
        self.port = self.listener.getsockname()[1]

    def select(self, cam):
        return self.cameras if cam is None else [self.cameras[cam]]

    @staticmethod
    def bind_udp_pair(host):
        """Two UDP sockets on an even port and the next one (RTP, RTCP), as RFC 3550 asks."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        for _ in range(100):
            rtp = socket.socket(family, socket.SOCK_DGRAM)
            rtp.bind((host, 0))
            port = rtp.getsockname()[1]
            if port % 2 == 0 and port < 65535:
                rtcp = socket.socket(family, socket.SOCK_DGRAM)
                try:
                    rtcp.bind((host, port + 1))
                except OSError:
                    rtcp.close()
                else:
                    for s in (rtp, rtcp):
                        s.setblocking(False)
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
                    return rtp, rtcp
            rtp.close()
        raise OSError("no free pair of UDP ports for RTP and RTCP")

    @property
    def base_url(self):
        host = self.args.host if ":" not in self.args.host else f"[{self.args.host}]"
        return f"rtsp://{host}:{self.port}"

    # --- the loop -----------------------------------------------------------------------------------------------
    def run(self, duration):
        end = self.started + duration if duration > 0 else None
        next_housekeeping = time.monotonic() + HOUSEKEEPING_S
        while not self.stopping:
            now = time.monotonic()
            if end is not None and now >= end:
                break
            wake = next_housekeeping if not self.timers else min(next_housekeeping, self.timers[0][0])
            for key, events in self.selector.select(max(0.0, wake - now)):
                self.on_event(key, events)
            now = time.monotonic()
            while self.timers and self.timers[0][0] <= now:
                _, index = heapq.heappop(self.timers)
                self.tick(self.cameras[index], now)
            if now >= next_housekeeping:
                self.housekeeping(now)
                next_housekeeping = now + HOUSEKEEPING_S

    def on_event(self, key, events):
        if key.data == "accept":
            self.accept()
        elif key.data == "udp":
            self.drain_udp(key.fileobj)
        else:
            conn = key.data
            if conn.closed:
                return
            try:
                if events & selectors.EVENT_WRITE:
                    conn.flush()
                if events & selectors.EVENT_READ and not conn.closed:
                    conn.on_readable()
            except Exception as e:  # a bug must cost one client, never the others
                self.drop(conn, f"internal error: {type(e).__name__}: {e}")

    def accept(self):
        for _ in range(64):
            try:
                sock, peer = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # out of file descriptors: stop accepting for a while instead of spinning
                log(f"accept failed: {e.strerror or e}; accepting again in 1 s")
                self.selector.unregister(self.listener)
                self.accept_again_at = time.monotonic() + 1.0
                return
            if len(self.connections) >= self.args.max_clients:
                log(f"client {peer[0]}:{peer[1]} refused: {self.args.max_clients} clients already")
                sock.close()
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(self, sock, peer)
            self.connections.add(conn)
            self.selector.register(sock, selectors.EVENT_READ, conn)
            log(f"client {conn.label} connected")

    @staticmethod
    def drain_udp(sock):
        """Receiver reports and NAT probes from UDP clients: read and dropped."""
        for _ in range(64):
            try:
                sock.recvfrom(2048)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # ICMP errors surface here on some systems: nothing to do
                return

    def drop(self, conn, reason, flush_first=False):
        if conn.closed:
            return
        if flush_first:
            conn.closing_reason = reason
            self.to_close[conn] = time.monotonic() + 2.0
            conn.mute = True
            conn.flush()
            return
        conn.closed = True
        for s in conn.sessions.values():
            if s in s.camera.sessions:
                s.camera.sessions.remove(s)
        try:
            self.selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
        self.connections.discard(conn)
        self.to_close.pop(conn, None)
        log(f"client {conn.label} disconnected: {reason} ({conn.packets_sent} RTP packets sent)")

    def housekeeping(self, now):
        if self.accept_again_at is not None and now >= self.accept_again_at:
            self.accept_again_at = None
            self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        for conn in list(self.connections):
            if conn in self.to_close and now >= self.to_close[conn]:
                self.drop(conn, conn.closing_reason)
            elif now - conn.last_activity > self.session_timeout:
                self.drop(conn, f"silent for {self.session_timeout:g} s (session timeout)")

    # --- RTSP ---------------------------------------------------------------------------------------------------
    def camera_of(self, url):
        """The camera a request URL names (/camK, /camK/ or /camK/TRACK), else None."""
        try:
            path = urllib.parse.urlsplit(url).path if "://" in url else url
        except ValueError:
            return None
        m = _camera_path.match(path)
        if not m or int(m.group(1)) >= len(self.cameras):
            return None
        return self.cameras[int(m.group(1))]

    def respond(self, conn, req_headers, status, headers=None, body=b"", content_type=None, hostile=None):
        lines = [f"RTSP/1.0 {status} {STATUS_TEXT.get(status, 'Error')}"]
        if "cseq" in req_headers and req_headers["cseq"].isdigit() and len(req_headers["cseq"]) <= 10:
            lines.append(f"CSeq: {req_headers['cseq']}")
        lines.append("Server: camsim")
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if hostile == "oversized-header":
            lines.append("X-Padding: " + "a" * (1 << 20))
        if body:
            if content_type:
                lines.append(f"Content-Type: {content_type}")
            lines.append(f"Content-Length: {len(body)}")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        if hostile == "garbage":
            data = self.rng.randbytes(2048)
        elif hostile == "truncated":
            data = data[:len(data) // 2]
            conn.mute = True
        conn.send(data)

    def handle(self, conn, req):
        camera = self.camera_of(req.url)
        hostile = camera.hostile if camera else None
        method = req.method
        if conn.mute:
            return
        if hostile in ("garbage", "truncated"):
            self.respond(conn, req.headers, 200, hostile=hostile)
            return
        if method == "OPTIONS":
            self.respond(conn, req.headers, 200, {"Public": "OPTIONS, DESCRIBE, SETUP, PLAY, TEARDOWN, GET_PARAMETER"},
                         hostile=hostile)
        elif method == "GET_PARAMETER":
            self.respond(conn, req.headers, 200, self.session_header(conn, req), hostile=hostile)
        elif method in ("DESCRIBE", "SETUP", "PLAY", "TEARDOWN"):
            if camera is None:
                self.respond(conn, req.headers, 404, body=b"no such stream\r\n", content_type="text/plain")
                return
            getattr(self, method.lower())(conn, req, camera, hostile)
        else:
            self.respond(conn, req.headers, 501, hostile=hostile)

    def session_header(self, conn, req):
        sid = req.headers.get("session", "").split(";")[0].strip()
        return {"Session": f"{sid};timeout={self.session_timeout:g}"} if sid in conn.sessions else {}

    def describe(self, conn, req, camera, hostile):
        sdp = self.bad_sdp() if hostile == "bad-sdp" else self.sdp(camera)
        self.respond(conn, req.headers, 200, {"Content-Base": f"{self.base_url}{camera.path}/"}, body=sdp,
                     content_type="application/sdp", hostile=hostile)

    def sdp(self, camera):
        host = self.args.host if self.args.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        family = "IP6" if ":" in host else "IP4"
        return ("v=0\r\n"
                f"o=- {camera.ssrc} 1 IN {family} {host}\r\n"
                f"s=camsim cam{camera.index}\r\n"
                f"c=IN {family} {'::' if family == 'IP6' else '0.0.0.0'}\r\n"
                "t=0 0\r\n"
                "a=control:*\r\n"
                "m=video 0 RTP/AVP 96\r\n"
                + camera.clip.codec.sdp_media(camera.clip.parameter_sets) +
                f"a=framerate:{self.fps:g}\r\n"
                "a=control:trackID=0\r\n").encode()

    def bad_sdp(self):
        return (b"v=0\r\no=- x x IN IP4 \r\ns=\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/0\r\n"
                b"a=fmtp:96 packetization-mode=7;profile-level-id=zz;sprop-parameter-sets=!!!,%%%,"
                + b"A" * 8192 + b"\r\na=control:" + b"x/" * 4096 + b"\r\nm=video -1 RTP/AVP 300\r\n"
                + b"a=rtpmap:300 H264\r\n" + self.rng.randbytes(512) + b"\r\n")

    def setup(self, conn, req, camera, hostile):
        sid = req.headers.get("session", "").split(";")[0].strip()
        if sid and sid not in conn.sessions:
            self.respond(conn, req.headers, 454)
            return
        if sid:
            self.respond(conn, req.headers, 455, body=b"one track per session\r\n", content_type="text/plain")
            return
        if len(conn.sessions) >= MAX_SESSIONS_PER_CONNECTION:
            self.respond(conn, req.headers, 453, body=b"too many sessions on one connection\r\n",
                         content_type="text/plain")
            return
        transport = self.choose_transport(req.headers.get("transport", ""), conn)
        if transport is None:
            self.respond(conn, req.headers, 461)
            return
        session = Session(f"{self.rng.getrandbits(64):016X}", camera, conn, self.rng)
        session.track_url = f"{self.base_url}{camera.path}/trackID=0"
        if transport[0] == "tcp":
            session.channel = transport[1]
            reply = f"RTP/AVP/TCP;unicast;interleaved={session.channel}-{session.channel + 1}"
        else:
            session.tcp = False
            session.client_rtp = (conn.peer[0], transport[1])
            session.client_rtcp = (conn.peer[0], transport[2])
            server_port = self.rtp_socket.getsockname()[1]
            reply = (f"RTP/AVP;unicast;client_port={transport[1]}-{transport[2]};"
                     f"server_port={server_port}-{server_port + 1}")
        conn.sessions[session.id] = session
        log(f"client {conn.label} set up cam{camera.index} over {'TCP' if session.tcp else 'UDP'}")
        self.respond(conn, req.headers, 200, {"Transport": f"{reply};ssrc={camera.ssrc:08X}",
                                              "Session": f"{session.id};timeout={self.session_timeout:g}"},
                     hostile=hostile)

    @staticmethod
    def choose_transport(header, conn):
        """('tcp', channel) or ('udp', rtp port, rtcp port) for the first offer this server takes, else None."""
        for offer in header.split(",")[:8]:
            params = [p.strip() for p in offer.split(";")]
            profile = params[0].upper()
            options = dict(p.partition("=")[::2] for p in params[1:])
            if "multicast" in options:
                continue
            if profile == "RTP/AVP/TCP":
                taken = {s.channel for s in conn.sessions.values() if s.tcp}
                channel = parse_port_pair(options.get("interleaved", ""), 0, 254)
                if channel is None:
                    channel = next(((c, c + 1) for c in range(0, 254, 2) if c not in taken), None)
                if channel is not None and channel[0] not in taken:
                    return "tcp", channel[0]
            elif profile in ("RTP/AVP", "RTP/AVP/UDP"):
                ports = parse_port_pair(options.get("client_port", ""), 1, 65534)
                if ports is not None:
                    return "udp", ports[0], ports[1]
        return None

    def play(self, conn, req, camera, hostile):
        sid = req.headers.get("session", "").split(";")[0].strip()
        session = conn.sessions.get(sid)
        if session is None or session.camera is not camera:
            self.respond(conn, req.headers, 454)
            return
        now = time.monotonic()
        if camera.started_at is None:
            camera.started_at = now
            heapq.heappush(self.timers, (now, camera.index))
        session.next_report = now
        session.playing = True
        if session not in camera.sessions:
            camera.sessions.append(session)
        # The session's first packet is the next random-access picture's: RTP-Info names its timestamp, which
        # clients take as the stream's time zero.
        rtp_info = (f"url={session.track_url};seq={session.seq};"
                    f"rtptime={camera.timestamp(camera.frame + camera.frames_to_next_irap())}")
        self.respond(conn, req.headers, 200, {"Session": f"{session.id};timeout={self.session_timeout:g}",
                                              "Range": "npt=0.000-", "RTP-Info": rtp_info}, hostile=hostile)
        log(f"client {conn.label} plays cam{camera.index}")

    def teardown(self, conn, req, camera, hostile):
        sid = req.headers.get("session", "").split(";")[0].strip()
        session = conn.sessions.pop(sid, None)
        if session is None:
            self.respond(conn, req.headers, 454)
            return
        if session in session.camera.sessions:
            session.camera.sessions.remove(session)
        self.respond(conn, req.headers, 200, hostile=hostile)

    # --- frames -------------------------------------------------------------------------------------------------
    def tick(self, camera, now):
        """Produces the camera's next access unit (due now or earlier) and sends it to its sessions."""
        due = camera.due(camera.frame)
        lag = now - due
        self.max_lag = max(self.max_lag, lag)
        if lag > 1.0 / camera.fps:
            self.late_frames += 1
        t = due - camera.started_at
        while camera.switches and camera.switches[0][0] <= t:
            camera.clip = camera.switches.pop(0)[1]
            camera.au_index = 0
            for s in camera.sessions:
                s.needs_parameter_sets = True
            log(f"cam{camera.index} switches to {camera.clip.path} at {t:.2f} s")
        stalled = camera.in_stall(t)
        if stalled != camera.stalled:
            camera.stalled = stalled
            log(f"cam{camera.index} {'stalls' if stalled else 'resumes'} at {t:.2f} s")
        au = camera.clip.access_units[camera.au_index]
        if not stalled:
            ts = camera.timestamp(camera.frame)
            for session in list(camera.sessions):
                if session.playing and not session.connection.closed:
                    try:
                        self.send_access_unit(session, au, ts, now)
                    except Exception as e:  # a bug must cost one client, never the others
                        self.drop(session.connection, f"internal error: {type(e).__name__}: {e}")
            self.frames_sent += 1
        camera.frame += 1
        camera.au_index = (camera.au_index + 1) % len(camera.clip.access_units)
        heapq.heappush(self.timers, (camera.due(camera.frame), camera.index))

    def send_access_unit(self, session, au, ts, now):
        camera = session.camera
        if camera.hostile == "huge-fu":
            self.send_huge_fu(session, ts)
            return
        if session.waiting_for_irap:
            if not au.irap:
                return
            session.waiting_for_irap = False
        packets = au.packets
        if session.needs_parameter_sets and au.irap:
            session.needs_parameter_sets = False
            if not au.has_parameter_sets:
                packets = camera.clip.parameter_set_packets + packets
        self.send_packets(session, packets, ts, camera.loss)
        if now >= session.next_report:
            session.next_report = now + RTCP_INTERVAL_S
            self.send_sender_report(session, now)

    def send_packets(self, session, packets, ts, loss):
        camera = session.camera
        rng = camera.rng
        ssrc = camera.ssrc
        seq = session.seq
        garbage = camera.hostile == "garbage-rtp"
        sent = octets = 0
        if session.tcp:
            channel = session.channel + (4 if camera.hostile == "wrong-channel" else 0)
            parts = []
            for payload, marker in packets:
                if loss and rng.random() < loss:
                    seq += 1
                    continue
                if garbage:
                    parts += [struct.pack("!BBH", 0x24, channel, 12 + len(payload)), rng.randbytes(12 + len(payload))]
                else:
                    parts += [_interleaved_rtp_header.pack(0x24, channel, 12 + len(payload), 0x80,
                                                           PAYLOAD_TYPE | (0x80 if marker else 0), seq & 0xFFFF,
                                                           ts, ssrc), payload]
                seq += 1
                sent += 1
                octets += len(payload)
            if parts:
                session.connection.send(b"".join(parts))
        else:
            address = session.client_rtcp if camera.hostile == "wrong-channel" else session.client_rtp
            sock = self.rtp_socket
            for payload, marker in packets:
                if loss and rng.random() < loss:
                    seq += 1
                    continue
                if garbage:
                    datagram = rng.randbytes(12 + len(payload))
                else:
                    datagram = _rtp_header.pack(0x80, PAYLOAD_TYPE | (0x80 if marker else 0), seq & 0xFFFF, ts,
                                                ssrc) + payload
                seq += 1
                try:
                    sock.sendto(datagram, address)
                except OSError:  # socket buffer full, or the client went away: lost, as UDP loses
                    self.udp_dropped += 1
                    continue
                sent += 1
                octets += len(payload)
        session.seq = seq & 0xFFFF
        session.packets += sent
        session.octets += octets
        session.connection.packets_sent += sent
        self.packets_sent += sent

    def send_huge_fu(self, session, ts):
        """A fragmented NAL unit that never ends: one start fragment, then middle fragments at every frame, all
        with the timestamp of the first and no marker."""
        codec = session.camera.clip.codec
        fake_idr = bytes([0x65]) if codec is H264 else bytes([19 << 1, 1])
        prefix, first, middle, _ = codec.fu_headers(fake_idr)
        chunk = bytes(self.args.mtu - len(prefix) - 1)
        if session.huge_fu_ts is None:
            session.huge_fu_ts = ts
            packets = [(prefix + bytes([first]) + chunk, False)]
        else:
            packets = []
        packets += [(prefix + bytes([middle]) + chunk, False)] * (HUGE_FU_BYTES_PER_FRAME // self.args.mtu)
        self.send_packets(session, packets, session.huge_fu_ts, 0.0)

    def send_sender_report(self, session, now):
        camera = session.camera
        wall = time.time() + 2208988800  # NTP epoch
        sr = struct.pack("!BBHIIIIII", 0x80, 200, 6, camera.ssrc, int(wall) & 0xFFFFFFFF,
                         int((wall % 1) * (1 << 32)) & 0xFFFFFFFF, camera.timestamp_at(now),
                         session.packets & 0xFFFFFFFF, session.octets & 0xFFFFFFFF)
        cname = b"camsim"
        item = bytes([1, len(cname)]) + cname + b"\x00"
        item += b"\x00" * (-(4 + len(item)) % 4)
        sdes = struct.pack("!BBHI", 0x81, 202, (4 + len(item)) // 4, camera.ssrc) + item
        packet = sr + sdes
        if session.tcp:
            session.connection.send(struct.pack("!BBH", 0x24, session.channel + 1, len(packet)) + packet)
        else:
            try:
                self.rtcp_socket.sendto(packet, session.client_rtcp)
            except OSError:
                pass

    def summary(self):
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu = usage.ru_utime + usage.ru_stime
        wall = time.monotonic() - self.started
        return (f"ran {wall:.1f} s: {len(self.cameras)} streams, {self.frames_sent} frames, "
                f"{self.packets_sent} RTP packets sent ({self.udp_dropped} UDP packets the socket refused), "
                f"CPU {cpu:.1f} s ({100 * cpu / max(wall, 1e-9):.0f}% of one core), "
                f"frames later than one frame period: {self.late_frames}, max lag {1000 * self.max_lag:.1f} ms")


def parse_port_pair(text, lowest, highest):
    """'a-b' (or 'a', meaning a-(a+1)) within [lowest, highest+1], else None."""
    m = re.fullmatch(r"(\d{1,5})(?:-(\d{1,5}))?", text)
    if not m:
        return None
    a = int(m.group(1))
    b = int(m.group(2)) if m.group(2) else a + 1
    return (a, b) if lowest <= a <= highest and lowest <= b <= highest + 1 else None


# --- command line -------------------------------------------------------------------------------------------------

def camera_spec(fields, text, what):
    """Splits 'CAM:rest' into (camera index, [rest...]) with len(fields) parts after the camera."""
    parts = text.split(":", len(fields))
    if len(parts) != len(fields) + 1 or not parts[0].isdigit():
        raise argparse.ArgumentTypeError(f"{what} wants CAM:{':'.join(fields)}, not {text!r}")
    return int(parts[0]), parts[1:]


def seconds(text, what):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: {text!r} is not a number of seconds") from None
    if not 0 <= value < 1e6:
        raise argparse.ArgumentTypeError(f"{what}: {text!r} is out of range")
    return value


def loss_arg(text):
    cam, rest = (None, text) if ":" not in text else camera_spec(["P"], text, "--loss")
    p = rest if isinstance(rest, str) else rest[0]
    try:
        value = float(p)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--loss: {p!r} is not a probability") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"--loss: {p!r} is not between 0 and 1")
    return cam, value


def stall_arg(text):
    cam, (at, length) = camera_spec(["AT", "SECONDS"], text, "--stall")
    return cam, seconds(at, "--stall AT"), seconds(length, "--stall SECONDS")


def switch_arg(text):
    cam, (at, path) = camera_spec(["AT", "FILE"], text, "--resolution-change")
    if not path:
        raise argparse.ArgumentTypeError("--resolution-change: FILE is empty")
    return cam, seconds(at, "--resolution-change AT"), path


def hostile_arg(text):
    cam, mode = (None, text) if ":" not in text else camera_spec(["MODE"], text, "--hostile")
    mode = mode if isinstance(mode, str) else mode[0]
    if mode not in HOSTILE_MODES:
        raise argparse.ArgumentTypeError(f"--hostile: unknown mode {mode!r} (one of {', '.join(HOSTILE_MODES)})")
    return cam, mode


def bounded(kind, lowest, highest, name):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: {text!r} is not a {kind.__name__}") from None
        if not lowest <= value <= highest:
            raise argparse.ArgumentTypeError(f"{name}: {text!r} is not in {lowest}..{highest}")
        return value
    return parse


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="camsim.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Serve N live RTSP streams (/cam0 ... /cam{N-1}) from one Annex-B H.264/HEVC file, paced at "
                    "--fps and looped with continuous timestamps; RTP over TCP (interleaved) or UDP.",
        epilog="Knob times count from the camera's first PLAY; CAM is a stream index. Hostile modes:\n"
               + "\n".join(f"  {k:17} {v}" for k, v in HOSTILE_MODES.items()))
    p.add_argument("file", help="Annex-B H.264 or HEVC elementary stream (.h264/.264/.h265/.hevc)")
    p.add_argument("--streams", type=bounded(int, 1, 10000, "--streams"), default=1, help="streams served (1)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=bounded(int, 0, 65535, "--port"), default=8554,
                   help="RTSP port (8554; 0 = any free port, see --ready-file)")
    p.add_argument("--fps", type=bounded(float, 0.1, 1000, "--fps"), default=30.0, help="frame rate (30)")
    p.add_argument("--codec", choices=["auto", "h264", "hevc"], default="auto",
                   help="codec of the file (auto: from its NAL unit headers)")
    p.add_argument("--mtu", type=bounded(int, 200, 65000, "--mtu"), default=1400,
                   help="largest RTP payload in bytes (1400); bigger NAL units are fragmented")
    p.add_argument("--loss", type=loss_arg, action="append", default=[], metavar="[CAM:]P",
                   help="drop each RTP packet with probability P (sequence numbers still advance), over TCP and UDP")
    p.add_argument("--stall", type=stall_arg, action="append", default=[], metavar="CAM:AT:SECONDS",
                   help="camera CAM sends no RTP for SECONDS from AT (RTSP still answers)")
    p.add_argument("--resolution-change", type=switch_arg, action="append", default=[], metavar="CAM:AT:FILE",
                   help="camera CAM switches to FILE (same codec, new parameter sets in band) at AT and loops it")
    p.add_argument("--hostile", type=hostile_arg, action="append", default=[], metavar="[CAM:]MODE",
                   help="misbehave on purpose (modes below)")
    p.add_argument("--seed", type=int, default=1, help="seed of every random choice (1)")
    p.add_argument("--session-timeout", type=bounded(float, 1, 3600, "--session-timeout"), default=60.0,
                   help="a client silent this long is dropped (60 s; clients keep alive with GET_PARAMETER)")
    p.add_argument("--send-buffer-bytes", type=bounded(int, 65536, 1 << 30, "--send-buffer-bytes"),
                   default=8 << 20, help="a TCP client with more than this pending is dropped (8 MiB)")
    p.add_argument("--max-clients", type=bounded(int, 1, 100000, "--max-clients"), default=4096,
                   help="connections served at once (4096)")
    p.add_argument("--duration", type=bounded(float, 0, 1e7, "--duration"), default=0.0,
                   help="exit after this many seconds (0 = until SIGINT/SIGTERM)")
    p.add_argument("--ready-file", help="written (rtsp://HOST:PORT) once listening")
    args = p.parse_args(argv)
    for flag, specs in (("--loss", args.loss), ("--stall", args.stall),
                        ("--resolution-change", args.resolution_change), ("--hostile", args.hostile)):
        for spec in specs:
            if spec[0] is not None and spec[0] >= args.streams:
                p.error(f"{flag}: camera {spec[0]} does not exist (--streams {args.streams}: 0..{args.streams - 1})")
    return args


def main(argv):
    args = parse_args(argv)
    try:
        clip = Clip(args.file, args.codec, args.mtu)
        switch_clips = {}
        for _, _, path in args.resolution_change:
            if path not in switch_clips:
                switch_clips[path] = Clip(path, clip.codec.name, args.mtu)
    except InputError as e:
        log(f"error: {e}")
        return 1
    try:
        server = Server(args, clip, switch_clips)
    except OSError as e:
        log(f"error: cannot listen on {args.host}:{args.port}: {e.strerror or e}")
        return 1

    def stop(signum, frame):
        server.stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    log(f"{args.file}: {clip.codec.name}, {len(clip.access_units)} access units "
        f"({len(clip.access_units) / args.fps:.2f} s at {args.fps:g} fps, "
        f"{8 * clip.bytes_per_loop * args.fps / len(clip.access_units) / 1e6:.2f} Mbit/s)")
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(server.base_url + "\n")
        os.replace(tmp, args.ready_file)
    print(f"ready {server.base_url}/cam0 .. /cam{args.streams - 1}", flush=True)
    server.run(args.duration)
    log(server.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
