#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets (fuzz/seeds/<target>/): a few well-formed
inputs of each, in the target's input format (see fuzz/fuzz_targets/*.rs), so that the
fuzzer starts from messages, descriptors and lines zcpipe really exchanges. Run from the
repository root: python3 fuzz/seeds/make.py"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def fourcc(s):
    return struct.unpack("<I", s.encode())[0]


def write(target, name, data):
    os.makedirs(os.path.join(HERE, target), exist_ok=True)
    with open(os.path.join(HERE, target, name), "wb") as f:
        f.write(data)


def js(v):
    return json.dumps(v, separators=(",", ":")).encode()


# control_msg: a byte (fds received), then the datagram.
NV12, NM12, YUYV, RGB3, BGR3 = (fourcc(c) for c in ("NV12", "NM12", "YUYV", "RGB3", "BGR3"))
plane = lambda o, b, l, f=0: {"offset": o, "bytesperline": b, "length": l, "fd_index": f}
nv12 = {"fourcc": NV12, "width": 640, "height": 480, "num_planes": 2,
        "planes": [plane(0, 640, 307200), plane(307200, 640, 153600), plane(0, 0, 0)]}
offer = {"type": "offer", "payload": "frames", "ring": {"capacity": 4, "slot_bytes": 184, "ret_capacity": 4},
         "policy": "drop-oldest", "buffers": [[460800], [460800]], "memory": "memfd", "layout": nv12, "fps": 30.0,
         "description": "640x480 NV12 test pattern", "labels": [], "copy_mode": False, "max_frame_bytes": 0}
write("control_msg", "offer-frames", bytes([5]) + js(offer))
det = dict(offer, payload="detections", ring={"capacity": 8, "slot_bytes": 1032, "ret_capacity": 2}, buffers=[],
           memory="none", layout=None, fps=0.0, description="yolox detections", labels=["person", "bicycle"])
write("control_msg", "offer-detections", bytes([3]) + js(det))
write("control_msg", "offer-copy", bytes([1]) + js(dict(offer, buffers=[], copy_mode=True, max_frame_bytes=460800)))
want = {"width": 416, "height": 416, "fourcc": BGR3, "stride_align": 1, "bytesperline": 0, "pad": 114, "placement": "top-left"}
write("control_msg", "hello-infer", bytes([0]) + js({"type": "hello", "stage": "infer", "accept": [BGR3], "want": want, "wait": "eventfd"}))
want2 = dict(want, width=640, height=384, fourcc=RGB3, stride_align=16, placement="center")
write("control_msg", "hello-aligned", bytes([0]) + js({"type": "hello", "stage": "infer", "accept": [], "want": want2, "wait": "spin"}))
write("control_msg", "hello-scale", bytes([0]) + js({"type": "hello", "stage": "scale", "accept": [NV12, YUYV], "want": None, "wait": "eventfd"}))
write("control_msg", "refuse", bytes([0]) + js({"type": "refuse", "error": "scale accepts NV12, YUYV; capture makes NM12"}))


# frame_desc: a FrameDesc (184 bytes, repr(C)), then the pool: a byte (buffers - 1), and
# for each buffer a byte (dma-bufs - 1) and 8 bytes per dma-buf size.
def desc(index, fmt, w, h, planes):
    planes = planes + [(0, 0, 0, 0)] * (3 - len(planes))
    d = struct.pack("<QQ8QII", 7, 123456789, *([0] * 8), index, 0)
    d += struct.pack("<4I", fmt, w, h, sum(1 for p in planes if p[1]))
    for p in planes:
        d += struct.pack("<4I", *p)
    d += struct.pack("<3f5I", 0.65, 0.0, 0.0, 416, 312, 640, 480, 0)
    assert len(d) == 184
    return d


def pool(bufs):
    b = bytes([len(bufs) - 1])
    for sizes in bufs:
        b += bytes([len(sizes) - 1]) + b"".join(struct.pack("<Q", s) for s in sizes)
    return b


write("frame_desc", "nv12", desc(1, NV12, 640, 480, [(0, 640, 307200, 0), (307200, 640, 153600, 0)]) + pool([[460800]] * 2))
write("frame_desc", "nv12-odd", desc(0, NV12, 451, 301, [(0, 464, 464 * 302, 0), (464 * 302, 464, 464 * 151, 0)]) + pool([[464 * 453]]))
write("frame_desc", "nv12m", desc(2, NM12, 1280, 720, [(0, 1280, 921600, 0), (0, 1280, 460800, 1)]) + pool([[921600, 460800]] * 3))
write("frame_desc", "yuyv", desc(0, YUYV, 640, 480, [(0, 1280, 614400, 0)]) + pool([[614400]]))
write("frame_desc", "bgr24", desc(3, BGR3, 416, 416, [(0, 1248, 1248 * 416, 0)]) + pool([[1248 * 416]] * 4))

# watch_lines: a byte of options (bit 0 --json, bit 1 --count of bits 2..7), then the stream.
frame = {"type": "frame", "seq": 3, "timestamp_ns": 7, "width": 640, "height": 480,
         "latency_us": {"capture": 1.0, "scale": 2.0, "infer": 3.0, "publish": 4.0, "total": 10.0},
         "detections": [{"class_id": 0, "label": "person", "score": 0.5, "box": [1.0, 2.0, 3.0, 4.0]}]}
end = {"type": "end", "end": True, "frames": 1, "reason": "end of stream"}
stream = js(frame) + b"\n" + js(dict(frame, seq=4, detections=[])) + b"\n" + js(end) + b"\n"
write("watch_lines", "readable", bytes([0]) + stream)
write("watch_lines", "json-count", bytes([1 | 2 | (2 << 2)]) + stream)
old = {k: v for k, v in frame.items() if k != "type"}
write("watch_lines", "old-lines", bytes([0]) + js(old) + b"\r\nnot json\n" + js({k: v for k, v in end.items() if k != "type"}) + b"\n")
write("watch_lines", "no-end", bytes([1]) + js(frame) + b"\n" + js(frame))
# Tracking: a detection with its track_id, a frame with zone counts, and the events.
tracked = dict(frame, detections=[dict(frame["detections"][0], track_id=1)], zones={"door": {"person": 1}, "gate": {}})
event = {"type": "event", "event": "entered_zone", "camera": "cam0", "track_id": 1, "label": "person", "class_id": 0,
         "score": 0.5, "zone": "door", "first_seen_ns": 7, "last_seen_ns": 7, "timestamp_ns": 7, "box": [1.0, 2.0, 3.0, 4.0]}
write("watch_lines", "tracked", bytes([0]) + js(tracked) + b"\n" + js(event) + b"\n" + js(dict(event, event="end", zone=None)) + b"\n" + js(end) + b"\n")

# service_msg: a byte (fds received with the packet), then the packet (a client's request, or
# an answer of the service: the target reads the bytes both ways).
nv12_spec = {"format": "nv12", "width": 640, "height": 480,
             "planes": [{"offset": 0, "bytesperline": 640}, {"offset": 307200, "bytesperline": 640}], "size": 460800}
write("service_msg", "hello", bytes([0]) + js({"type": "hello", "v": 1, "name": "doorbell", "detect_fps": 5.0}))
write("service_msg", "register-nv12", bytes([1]) + js({"type": "register", "v": 1, "buffers": [nv12_spec]}))
write("service_msg", "register-jpeg-nv12", bytes([2]) + js({"type": "register", "v": 1, "buffers": [
    {"format": "jpeg", "size": 48213}, dict(nv12_spec, width=451, height=301, size=464 * 453,
                                            planes=[{"offset": 0, "bytesperline": 464}, {"offset": 464 * 302, "bytesperline": 464}])]}))
write("service_msg", "detect", bytes([0]) + js({"type": "detect", "v": 1, "kind": "request", "buffer": 0, "seq": 7}))
write("service_msg", "reply-frame", bytes([0]) + js({"type": "frame", "v": 1, "buffer": 0, **dict(frame, camera="doorbell pid 7")}))


# packet_stream: the messages a capture stage sends the recorder (hello, tables, units),
# and the MPEG-TS they carry (a PAT, a PMT naming an H.264 stream on PID 0x100, PES starts
# with a PTS and an IDR or a P slice).
def ts_packet(pid, start, payload, rai=False):
    head = bytes([0x47, (0x40 if start else 0) | (pid >> 8), pid & 0xFF])
    room = 184 - len(payload)
    if room == 0:
        return head + b"\x10" + payload
    af = bytes([room - 1]) + ((b"\x40" if rai else b"\x00") + b"\xff" * (room - 2) if room > 1 else b"")
    return head + b"\x30" + af + payload


def section(table, body):
    s = bytes([table, 0xB0 | ((len(body) + 4) >> 8), (len(body) + 4) & 0xFF]) + body + b"\0\0\0\0"
    return b"\0" + s


def pes(pts, nal):
    p = bytes([0x21 | ((pts >> 29) & 0x0E), (pts >> 22) & 0xFF, 0x01 | ((pts >> 14) & 0xFE), (pts >> 7) & 0xFF, 0x01 | ((pts << 1) & 0xFE)])
    return b"\0\0\x01\xe0\0\0\x80\x80\x05" + p + bytes([0, 0, 0, 1, nal, 0x88, 0x84])


pat = ts_packet(0, True, section(0x00, b"\0\x01\xc1\0\0\0\x01\xf0\x00"))
pmt = ts_packet(0x1000, True, section(0x02, b"\0\x01\xc1\0\0\xe1\x00\xf0\x00\x1b\xe1\x00\xf0\x00"))
units = [ts_packet(0x100, True, pes(90000 + 3000 * k, 0x65 if k % 10 == 0 else 0x41), rai=k % 10 == 0) for k in range(12)]
write("packet_stream", "ts", pat + pmt + b"".join(units))


def msg(kind, body, flags=0, mono=0, pts=0):
    return b"ZCPK" + bytes([kind, flags, 0, 0]) + struct.pack("<IQQ", len(body), mono, pts) + body


hello = js({"version": 1, "camera": "cam0", "codec": "h264", "width": 768, "height": 432})
stream = msg(1, hello) + msg(2, pat + pmt) + b"".join(msg(3, u, 3 if k % 10 == 0 else 2, 1000 + k, 90000 + 3000 * k) for k, u in enumerate(units))
write("packet_stream", "messages", stream)


# run_control: a byte (even: the run's control socket, odd: the publish stage's), then the datagram.
def ask(request):
    return bytes([0]) + js({"version": 1, "request": request})


write("run_control", "cameras", ask({"op": "cameras"}))
write("run_control", "add", ask({"op": "add_camera", "camera": "back", "source": "rtsp://u:secret@10.0.0.2/x", "options": ["--fps=10"]}))
write("run_control", "zone", ask({"op": "set_shape", "camera": "door", "kind": "zone", "spec": "in=0,0,9,0,9,9"}))
write("run_control", "remove", ask({"op": "remove_shape", "camera": "door", "kind": "line", "name": "exit"}))
write("run_control", "set", ask({"op": "set", "camera": None, "setting": {"name": "score-threshold", "value": 0.5}}))
write("run_control", "reload", ask({"op": "reload"}))
write("run_control", "version", bytes([0]) + js({"version": 2, "request": {"op": "cameras"}}))
scene = {"camera": "door", "zones": ["in=0,0,9,0,9,9"], "lines": ["exit=0,5,9,5"], "loiter": ["in=10"]}
write("run_control", "stage-scene", bytes([1]) + js({"version": 1, "request": {"op": "scene", "cameras": [scene], "change": "camera door: zone in added"}}))
write("run_control", "stage-announce", bytes([1]) + js({"version": 1, "request": {"op": "announce", "camera": "", "change": "camera back added"}}))
