#!/usr/bin/python3
"""A real RTSP server for zcpipe's tests (tests/pipeline/rtsp.rs): GStreamer's gst-rtsp-server
serving an H.264 MP4 file as it is (no encoder):

    filesrc ! qtdemux ! h264parse ! rtph264pay name=pay0 config-interval=-1

on 127.0.0.1:PORT at rtsp://127.0.0.1:PORT/MOUNT. The media is shared by the clients
connected at a time (like a camera) and made afresh when the last one has left, so each
new session starts the file from its beginning: the stream loops from one session to the
next (the bundled clip runs 139 s in one session; a client still connected at its end
gets the end of the stream, and a reconnect starts it again). SPS/PPS go before every key
frame, so a client that joins late decodes from the next one. --user/--password require
RTSP basic authentication (the password from $RTSP_SERVER_PASSWORD when --password is not
given, so that no command line holds it).

(Not a concat of the file with itself for an endless session: with gst 1.22 a concat
pipeline does not come down cleanly when its clients leave, and the next client gets
nothing.)

Prints "ready rtsp://127.0.0.1:PORT/MOUNT" on stdout once it listens; SIGTERM or SIGINT
stop it.

Needs Debian's /usr/bin/python3 with python3-gi, gir1.2-gst-rtsp-server-1.0,
gstreamer1.0-plugins-good (qtdemux, rtph264pay) and gstreamer1.0-plugins-bad (h264parse):
scripts/setup-test.sh installs them.
"""

import argparse
import os
import signal
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402


def launch_line(path):
    """The media factory's pipeline for one file."""
    # location is quoted for gst_parse_launch; paths with '"' are refused in main().
    return f'( filesrc location="{path}" ! qtdemux ! h264parse ! rtph264pay name=pay0 pt=96 config-interval=-1 )'


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True, help="TCP port on 127.0.0.1")
    ap.add_argument("--mount", default="/cam", help="mount path (default /cam)")
    ap.add_argument("--file", required=True, help="the H.264 MP4 file to serve")
    ap.add_argument("--user", help="require this user (RTSP basic auth)")
    ap.add_argument("--password", help="and this password (else $RTSP_SERVER_PASSWORD: out of ps)")
    a = ap.parse_args()
    if a.password is None:
        a.password = os.environ.get("RTSP_SERVER_PASSWORD")
    if not os.path.isfile(a.file) or '"' in a.file:
        sys.exit(f"rtsp_server: {a.file}: not a file (or has a '\"' in its path)")
    if not a.mount.startswith("/"):
        sys.exit(f"rtsp_server: --mount {a.mount}: must start with /")

    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(str(a.port))
    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_launch(launch_line(os.path.abspath(a.file)))
    factory.set_shared(True)
    if a.user:
        auth = GstRtspServer.RTSPAuth()
        token = GstRtspServer.RTSPToken()
        token.set_string(GstRtspServer.RTSP_TOKEN_MEDIA_FACTORY_ROLE, "user")
        auth.add_basic(GstRtspServer.RTSPAuth.make_basic(a.user, a.password or ""), token)
        server.set_auth(auth)
        # The role as one structure: add_role_empty is not in Debian 12's GStreamer 1.22, and
        # add_role's varargs are not reachable from Python.
        role = Gst.Structure.new_empty("user")
        role.set_value(GstRtspServer.RTSP_PERM_MEDIA_FACTORY_ACCESS, True)
        role.set_value(GstRtspServer.RTSP_PERM_MEDIA_FACTORY_CONSTRUCT, True)
        perms = GstRtspServer.RTSPPermissions()
        perms.add_role_from_structure(role)
        factory.set_permissions(perms)
    server.get_mount_points().add_factory(a.mount, factory)
    if server.attach(None) == 0:
        sys.exit(f"rtsp_server: cannot listen on 127.0.0.1:{a.port}")
    loop = GLib.MainLoop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, sig, loop.quit)
    print(f"ready rtsp://127.0.0.1:{a.port}{a.mount}", flush=True)
    loop.run()


if __name__ == "__main__":
    main()
