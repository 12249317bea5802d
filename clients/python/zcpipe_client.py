#!/usr/bin/env python3
"""A client of zcpipe's inference service, with nothing but Python's standard library.

A running `zcpipe run` serves its loaded model to local processes on a Unix SOCK_SEQPACKET
socket (npu.sock in the run directory). Each message is one packet of JSON with a "type"
and the protocol version "v"; buffers travel once as file descriptors (SCM_RIGHTS), then
requests name them by index. The protocol is documented in zcpipe's book (the inference
service chapter) and in crates/core/src/service/mod.rs.

As a library:

    from zcpipe_client import Client
    with Client.connect(instance="default", name="planner") as c:
        buf = c.register_image(open("door.jpg", "rb").read())
        frame = c.detect(buf)
        for d in frame["detections"]:
            print(d["label"], d["score"], d["box"])

As a command, it prints the frame line `zcpipe run --json` prints for the picture:

    python3 clients/python/zcpipe_client.py --instance NAME IMAGE
"""
import argparse
import json
import mmap
import os
import socket
import sys

VERSION = 1
SOCKET_NAME = "npu.sock"
MAX_PACKET = 64 * 1024


class ServiceError(Exception):
    """The service refused a message, was busy, dropped a request or hung up."""


def run_dir(instance="default", explicit=None):
    """The run directory `zcpipe run --instance INSTANCE` uses (as zcpipe decides it)."""
    if explicit:
        return explicit
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        base = os.path.join(xdg, "zcpipe")
    elif os.geteuid() == 0:
        base = "/run/zcpipe"
    else:
        base = "/tmp/zcpipe-%d" % os.geteuid()
    return os.path.join(base, instance)


def sealed_memfd(data):
    """A memfd holding `data`, sealed against shrinking, growing and further seals."""
    fd = os.memfd_create("zcpipe-client", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, len(data))
    with mmap.mmap(fd, len(data)) as m:
        m[:] = data
    import fcntl
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    return fd


MAX_BUFFER_BYTES = 64 << 20


def check_image(data):
    """Refuses, before anything is sent, what the service would refuse: not a JPEG or PNG
    file, or one over its size limit."""
    image_format(data)
    if len(data) > MAX_BUFFER_BYTES:
        raise ServiceError("the picture is %d bytes; the inference service takes pictures up to %d bytes"
                           % (len(data), MAX_BUFFER_BYTES))


def image_format(data):
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    raise ServiceError("not a JPEG or PNG file (its first bytes say neither)")


class Client:
    """One connection to the service; answers come back on it in the order they are ready."""

    def __init__(self, sock, welcome):
        self.sock = sock
        self.welcome = welcome
        self.next_seq = 0
        self.fds = []

    @classmethod
    def connect(cls, instance="default", name="python", path=None, run_dir_path=None, timeout=30.0, detect_fps=0):
        path = path or os.path.join(run_dir(instance, run_dir_path), SOCKET_NAME)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except OSError as e:
            sock.close()
            why = e.strerror or str(e)
            if isinstance(e, FileNotFoundError) and os.path.exists(os.path.join(os.path.dirname(path), "infer.sock")):
                why = "the pipeline there runs without its inference service (--no-serve)"
            elif isinstance(e, ConnectionRefusedError):
                why = "nothing listens there now (the infer stage may be restarting: try again in a second)"
            raise ServiceError("no inference service at %s: %s; start `zcpipe run` (for another instance: "
                               "--instance NAME; with --run-dir DIR: --run-dir DIR here too)" % (path, why)) from None
        c = cls(sock, None)
        c._send({"type": "hello", "v": VERSION, "name": name, "detect_fps": detect_fps})
        m = c.recv()
        if m["type"] != "welcome":
            raise ServiceError("the inference service refused: " + m.get("reason", "expected a welcome, got %s" % m["type"]))
        c.welcome = m
        return c

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.sock.close()
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def _send(self, msg, fds=()):
        data = json.dumps(msg).encode()
        try:
            if fds:
                socket.send_fds(self.sock, [data], list(fds))
            else:
                self.sock.send(data)
        except (BrokenPipeError, ConnectionResetError):
            # The service hung up; its last word (a refusal) may still wait to be read.
            try:
                m = self.recv()
            except (OSError, ServiceError, ValueError):
                m = {}
            raise ServiceError("the inference service refused: " + m["reason"] if "reason" in m
                               else "the inference service hung up") from None

    def recv(self):
        """The service's next message, as a dict (`type`: frame, dropped, busy, refused, ...)."""
        try:
            data, fds, _flags, _addr = socket.recv_fds(self.sock, MAX_PACKET, 1)
        except socket.timeout:
            raise ServiceError("no answer from the inference service within %s s" % self.sock.gettimeout()) from None
        except ConnectionResetError:
            data, fds = b"", []
        for fd in fds:
            os.close(fd)
        if not data:
            raise ServiceError("the inference service hung up (the pipeline stopped or restarted)")
        try:
            return json.loads(data)
        except ValueError:
            raise ServiceError("an answer of the inference service this client cannot read") from None

    def register(self, fd, spec):
        """Registers one buffer (an fd: a sealed memfd or a dma-buf; `spec`: its format,
        width, height, planes and size); returns its index."""
        self._send({"type": "register", "v": VERSION, "buffers": [spec]}, [fd])
        m = self.recv()
        if m["type"] != "registered":
            raise ServiceError("the inference service refused: " + m.get("reason", "expected registered, got %s" % m["type"]))
        return m["first"]

    def register_image(self, data):
        """A JPEG or PNG file's bytes in a sealed memfd, registered; returns its index."""
        check_image(data)
        fd = sealed_memfd(data)
        self.fds.append(fd)
        return self.register(fd, {"format": image_format(data), "size": len(data)})

    def submit(self, buffer, kind="video"):
        """Sends a request without waiting; returns its sequence number."""
        seq = self.next_seq
        self.next_seq += 1
        self._send({"type": "detect", "v": VERSION, "kind": kind, "buffer": buffer, "seq": seq})
        return seq

    def stats(self):
        """The service's numbers (a dict: totals, and `per_client`, this client left out)."""
        self._send({"type": "stats", "v": VERSION})
        while True:
            m = self.recv()
            if m["type"] == "stats":
                return m["stats"]
            if m["type"] == "refused":
                raise ServiceError("the inference service refused: " + m["reason"])

    def detect(self, buffer):
        """Runs a `request` on `buffer` and returns its frame line (a dict)."""
        seq = self.submit(buffer, "request")
        while True:
            m = self.recv()
            if m["type"] == "refused" and (m.get("fatal") or m.get("seq") == seq):
                raise ServiceError("the inference service refused: " + m["reason"])
            if m.get("seq") != seq:
                continue
            if m["type"] == "frame":
                return m
            if m["type"] == "busy":
                raise ServiceError("the inference service is busy (this client's queue is full); try again")
            if m["type"] == "dropped":
                raise ServiceError("the inference service dropped the request (%s)" % m["reason"])


FRAME_FIELDS = ("type", "camera", "seq", "timestamp_ns", "width", "height", "latency_us", "detections")


def main(argv=None):
    ap = argparse.ArgumentParser(description="Detect objects in a picture with a running zcpipe's model.")
    ap.add_argument("image", help="a JPEG or PNG picture")
    ap.add_argument("--instance", default="default", help="the pipeline's `zcpipe run --instance`")
    ap.add_argument("--run-dir", help="the pipeline's run directory, if it was given one")
    ap.add_argument("--socket", help="the service's socket, if it was put elsewhere (--serve-socket)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the answer")
    a = ap.parse_args(argv)
    try:
        with open(a.image, "rb") as f:
            data = f.read()
        check_image(data)
        with Client.connect(a.instance, "zcpipe_client.py", a.socket, a.run_dir, a.timeout) as c:
            frame = c.detect(c.register_image(data))
    except (OSError, ServiceError) as e:
        print("zcpipe_client.py: error: %s: %s" % (a.image, e) if isinstance(e, ServiceError) and "JPEG or PNG" in str(e)
              else "zcpipe_client.py: error: %s" % e, file=sys.stderr)
        return 1
    # The frame line as `zcpipe run --json` prints it (the answer's own fields: buffer, v, left out).
    print(json.dumps({k: frame[k] for k in FRAME_FIELDS if k in frame}, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
