//! The hostile peers, one case after another, against the real stages of one run: [`Run`]
//! holds the run, and the test is its phases in order (A to D, then the end), each a method.

use super::*;

#[test]
fn hostile_peers_are_refused_and_the_pipeline_runs_on() {
    let mut run = Run::start();
    run.impostor_consumers();
    run.impostor_upstream();
    let infer_pid = run.impostor_consumer_that_joins();
    run.impostor_infer_stage(infer_pid);
    run.the_end();
}

/// The capture stage's arguments (it is started twice: at the start and after phase B).
const SOURCE: [&str; 2] = ["--source", "testsrc:320x240@30"];

/// The offers the impostor upstream makes in phase B that scale refuses, one re-join each.
const REFUSED_OFFERS: u32 = 15;

/// The return tokens of phase C, for buffers the impostor consumer was never lent.
const BAD_TOKENS: [u64; 3] = [(1u64 << 32) | 1000, 0xdead_beef << 32, u64::MAX];

/// One run, shared by the phases: its private directory, the four stage processes, the
/// detections client, the refusal lines seen, and who the impostor (this process) is.
///
/// Fields drop in declaration order: if the test fails half-way, the stages are killed
/// before the refusal lines are printed and the directory is removed.
struct Run {
    capture: StageProc,
    scale: StageProc,
    infer: StageProc,
    publish: StageProc,
    /// What the detections client got.
    seen: Arc<Mutex<Vec<(Instant, Value)>>>,
    said: Said,
    /// The run directory (the stages' sockets).
    run: PathBuf,
    /// This process's pid and uid, and `pid P uid U` as the stages name it.
    me: u32,
    uid: u32,
    peer: String,
    /// The pids of the stages that must never be restarted.
    scale_pid: i32,
    publish_pid: i32,
    dir: tempfile::TempDir,
}

/// The impostor upstream of phase B: its listener on the dead capture stage's socket, the
/// re-joins of scale it answered so far, and the pid of the capture stage it replaces.
struct Upstream {
    imp: Listener,
    sock: PathBuf,
    case: u32,
    capture_pid: i32,
}

impl Run {
    /// Starts the four stages one by one and waits for frames to reach the client.
    fn start() -> Run {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let run = d.join("run");
        let det = d.join("detections.sock");
        let me = std::process::id();
        let uid = nix::unistd::geteuid().as_raw();
        let peer = format!("pid {me} uid {uid}");
        let said = Said::default();
        let capture = StageProc::start(d, "capture", &SOURCE, None);
        let scale = StageProc::start(d, "scale", &[], None);
        let infer = StageProc::start(d, "infer", &["--infer", "none"], None);
        let publish = StageProc::start(d, "publish", &["--publish", det.to_str().unwrap()], None);
        let seen = client(det.clone());
        frames_flow(&seen, Instant::now(), "at start");
        let (scale_pid, publish_pid) = (scale.pid(), publish.pid());
        Run { capture, scale, infer, publish, seen, said, run, me, uid, peer, scale_pid, publish_pid, dir }
    }

    /// A. An impostor consumer on capture.sock while scale is served.
    fn impostor_consumers(&mut self) {
        let Run { capture, scale, infer, seen, said, run, peer, scale_pid, publish_pid, dir, .. } = self;
        let (peer, d) = (peer.as_str(), dir.path());
        let sock = run.join("capture.sock");
        let so_far = |k: u32| format!("({k} so far): {peer}: ");
        // Garbage.
        let c = connect(&sock);
        fdpass::send(c.as_fd(), b"\xff\xfe this is not json {", &[]).unwrap();
        said.note("consumer: garbage", capture.expect(&[&so_far(1), "malformed control message from pid"]));
        assert!(closed_by_peer(&c).is_empty());
        // Oversized: 100 KiB in one packet (the limit is 64 KiB).
        let c = connect(&sock);
        send_raw(&c, &vec![b'{'; 100 * 1024]);
        said.note(
            "consumer: oversized",
            capture.expect(&[&so_far(2), "payload truncated (MSG_TRUNC): over 65536 bytes"]),
        );
        assert!(closed_by_peer(&c).is_empty());
        // Truncated: the first half of a valid hello.
        let c = connect(&sock);
        let h = serde_json::to_vec(&hello("scale", None)).unwrap();
        fdpass::send(c.as_fd(), &h[..h.len() / 2], &[]).unwrap();
        said.note(
            "consumer: truncated hello",
            capture.expect(&[&so_far(3), "malformed control message", "EOF while parsing"]),
        );
        assert!(closed_by_peer(&c).is_empty());
        // Another kind of message, with fds of the wrong kind (a pipe, a directory).
        let c = connect(&sock);
        let (r, _w) = pipe();
        let hop = Hop::new();
        c.send(&offer_msg(hop.offer(vec![])), &[r.as_fd(), dir_fd(d).as_fd()]).unwrap();
        said.note(
            "consumer: an offer with a pipe and a dir",
            capture.expect(&[&so_far(4), "sent an offer instead of a hello (with 2 fds, closed)"]),
        );
        assert!(closed_by_peer(&c).is_empty());
        // A valid hello while the hop serves scale: told why, and closed.
        let c = connect(&sock);
        c.send(&hello("scale", None), &[]).unwrap();
        let why = format!("this hop already serves pid {scale_pid}");
        said.note("consumer: a second scale stage", capture.expect(&[&so_far(5), &why]));
        let got = closed_by_peer(&c);
        assert!(matches!(&got[..], [ControlMsg::Refuse { error }] if *error == why), "{got:?}");
        // Silence.
        let c = connect(&sock);
        said.note("consumer: silence", capture.expect(&[&so_far(6), "no hello within 1s"]));
        assert!(closed_by_peer(&c).is_empty());
        // A flood: 12 silent connections at once (8 may wait for a hello at a time).
        let flood: Vec<Conn> = (0..12).map(|_| connect(&sock)).collect();
        said.note("consumer: flood (last of 12)", capture.expect(&[&so_far(18)]));
        for c in &flood {
            assert!(closed_by_peer(c).is_empty());
        }
        let full = capture.count("connections already wait to say hello");
        let silent = capture.count("no hello within 1s");
        assert_eq!(full + silent, 4 + 1 + 8, "the flood: {full} refused at once, {silent} timed out");
        assert!(full >= 1, "12 connections at once, 8 may wait: some are refused at once");
        said.note(
            "consumer: flood (one refused at once)",
            capture.expect(&["8 connections already wait to say hello"]),
        );
        // The other producing stages refuse a second consumer the same way.
        let c = connect(&run.join("scale.sock"));
        c.send(&hello("infer", Some(infer_none_wants())), &[]).unwrap();
        said.note(
            "consumer: a second infer stage",
            scale.expect(&["(1 so far)", peer, &format!("this hop already serves pid {}", infer.pid())]),
        );
        assert_eq!(closed_by_peer(&c).len(), 1);
        let c = connect(&run.join("infer.sock"));
        c.send(&hello("publish", None), &[]).unwrap();
        said.note(
            "consumer: a second publish stage",
            infer.expect(&["(1 so far)", peer, &format!("this hop already serves pid {publish_pid}")]),
        );
        assert_eq!(closed_by_peer(&c).len(), 1);
        frames_flow(seen, Instant::now(), "after the impostor consumers");
        let r = capture.report_where("18 refusals", |r| r["extra"]["refused"].as_u64() >= Some(18));
        assert_eq!(r["extra"]["refused"], 18, "capture counted every refusal once: {r}");
        let r = infer.report_where("1 refusal", |r| r["extra"]["refused"].as_u64() >= Some(1));
        assert_eq!(r["extra"]["refused"], 1, "{r}");
    }

    /// B. An impostor upstream: capture dies, and the impostor answers scale, which re-joins
    /// it again and again; then the real capture stage comes back.
    fn impostor_upstream(&mut self) {
        let mut up = self.capture_dies();
        self.upstream_bad_messages(&mut up);
        self.upstream_bad_claims(&mut up);
        self.upstream_fds_of_the_wrong_kind(&mut up);
        self.upstream_memory_that_shrinks(&mut up);
        self.upstream_copy_mode(&mut up);
        assert_eq!(up.case, REFUSED_OFFERS);
        self.upstream_bad_descriptors(up);
        self.capture_comes_back();
    }

    /// B: capture dies, and the impostor listens on its socket.
    fn capture_dies(&mut self) -> Upstream {
        let Run { capture, scale, run, .. } = self;
        let capture_pid = capture.pid();
        capture.signal(nix::sys::signal::Signal::SIGKILL);
        assert!(wait_for(PATIENCE, || !capture.alive()));
        scale.expect(&[&format!("the capture stage (pid {capture_pid}) hung up")]);
        let sock = run.join("capture.sock");
        let imp = Listener::bind(&sock).unwrap();
        Upstream { imp, sock, case: 0, capture_pid }
    }

    /// B: serves the next re-join of scale with `answer`, and waits for scale to refuse it.
    fn serve(&mut self, up: &mut Upstream, name: &str, answer: &dyn Fn(&Conn), reason: &[&str]) {
        let Run { scale, said, peer, scale_pid, .. } = self;
        up.case += 1;
        let c = up.imp.accept_until(&NEVER, Some(Instant::now() + PATIENCE)).unwrap();
        assert_eq!(c.peer_pid, *scale_pid, "scale re-joins");
        c.set_recv_timeout(Some(PATIENCE)).unwrap();
        assert!(matches!(c.recv().unwrap().0, ControlMsg::Hello { ref stage, .. } if stage == "scale"));
        answer(&c);
        // A re-join may have reached the dying capture stage's socket before it closed (its
        // pid, ECONNRESET): also a refusal, counted before ours. It came before scale
        // connected here, so its line is logged by the time ours is.
        let tail = format!("{peer}: ");
        let mut parts = vec![tail.as_str()];
        parts.extend_from_slice(reason);
        let line = scale.expect(&parts);
        let dead = format!("pid {} uid", up.capture_pid);
        let early = scale
            .lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains("refused what answered as the capture stage") && l.contains(&dead))
            .count();
        let head = format!(
            "refused what answered as the capture stage on {} ({} so far): {peer}: ",
            up.sock.display(),
            up.case as usize + early
        );
        assert!(line.contains(&head), "{line}: expected {head}");
        said.note(name, line);
        // Kept open until refused, so that what is refused is the answer, not a hang-up.
        drop(c);
    }

    /// B: messages that are not an offer: garbage, oversized, truncated, a hello.
    fn upstream_bad_messages(&mut self, up: &mut Upstream) {
        self.serve(
            up,
            "upstream: garbage",
            &|c| fdpass::send(c.as_fd(), b"\x00\x01 garbage", &[]).unwrap(),
            &["malformed control message from pid"],
        );
        self.serve(up, "upstream: oversized", &|c| send_raw(c, &vec![b'['; 100 * 1024]), &["(MSG_TRUNC)"]);
        self.serve(
            up,
            "upstream: truncated offer (with its fds)",
            &|c| {
                let hop = Hop::new();
                let o = serde_json::to_vec(&offer_msg(hop.offer(vec![vec![BUF]; 2]))).unwrap();
                fdpass::send(c.as_fd(), &o[..o.len() / 2], &hop.fds()).unwrap();
            },
            &["malformed control message", "EOF while parsing"],
        );
        self.serve(
            up,
            "upstream: a hello instead of an offer",
            &|c| c.send(&hello("capture", None), &[]).unwrap(),
            &["capture sent a hello instead of an offer (with 0 fds, closed)"],
        );
    }

    /// B: offers that claim what their fds are not: their count, the ring's geometry, the
    /// buffers' sizes.
    fn upstream_bad_claims(&mut self, up: &mut Upstream) {
        self.serve(
            up,
            "upstream: fewer fds than offered",
            &|c| {
                let hop = Hop::new();
                c.send(&offer_msg(hop.offer(vec![vec![BUF]; 2])), &hop.fds()[..3]).unwrap();
            },
            &["capture sent 3 fds, its offer needs 5"],
        );
        self.serve(
            up,
            "upstream: absurd ring geometry",
            &|c| {
                let hop = Hop::new();
                let geo = RingGeometry { capacity: u32::MAX, ..hop.ring.geometry() };
                c.send(&offer_msg(frames_offer(geo, vec![vec![BUF]; 2])), &hop.fds()).unwrap();
            },
            &["capture ring geometry out of range"],
        );
        self.serve(
            up,
            "upstream: absurd buffer sizes",
            &|c| {
                let hop = Hop::new();
                c.send(&offer_msg(hop.offer(vec![vec![1 << 62]; 2])), &hop.fds()).unwrap();
            },
            &["capture's buffer 0", "peer's buffer is 115200 bytes but it claimed 4611686018427387904"],
        );
    }

    /// B: a pipe or a directory where a memfd, an eventfd or a buffer belongs.
    fn upstream_fds_of_the_wrong_kind(&mut self, up: &mut Upstream) {
        let d = &self.dir.path().to_path_buf();
        self.serve(
            up,
            "upstream: a pipe as the ring",
            &|c| {
                let hop = Hop::new();
                let (r, _w) = pipe();
                let mut fds = hop.fds();
                fds[0] = r.as_fd();
                c.send(&offer_msg(hop.offer(vec![vec![BUF]; 2])), &fds).unwrap();
            },
            &["mapping capture's ring", "ring fd is not a sealed memfd"],
        );
        let dir_text = d.display().to_string();
        self.serve(
            up,
            "upstream: a directory as the doorbell",
            &|c| {
                let hop = Hop::new();
                let dfd = dir_fd(d);
                let mut fds = hop.fds();
                fds[1] = dfd.as_fd();
                c.send(&offer_msg(hop.offer(vec![vec![BUF]; 2])), &fds).unwrap();
            },
            &["capture's doorbell", "the doorbell fd is not an eventfd", &dir_text],
        );
        self.serve(
            up,
            "upstream: a pipe as a buffer",
            &|c| {
                let hop = Hop::new();
                let (r, _w) = pipe();
                let mut fds = hop.fds();
                fds[3] = r.as_fd();
                c.send(&offer_msg(hop.offer(vec![vec![BUF]; 2])), &fds).unwrap();
            },
            &["capture's buffer 0", "peer's buffer fd is a pipe (pipe:[", "neither a dma-buf nor a sealed memfd"],
        );
        self.serve(
            up,
            "upstream: a directory as a buffer",
            &|c| {
                let hop = Hop::new();
                let dfd = dir_fd(d);
                let mut fds = hop.fds();
                fds[4] = dfd.as_fd();
                c.send(&offer_msg(hop.offer(vec![vec![BUF]; 2])), &fds).unwrap();
            },
            &[
                "capture's buffer 1",
                &format!("peer's buffer fd is a directory ({dir_text}): neither a dma-buf nor a sealed memfd"),
            ],
        );
    }

    /// B: memory its writer could shrink under the reader: memfds without seals (a buffer,
    /// the ring) and a regular file, each shrunk once sent.
    fn upstream_memory_that_shrinks(&mut self, up: &mut Upstream) {
        let d = &self.dir.path().to_path_buf();
        self.serve(
            up,
            "upstream: an unsealed memfd, then shrunk",
            &|c| {
                let hop = Hop::new();
                let m = unsealed_memfd(BUF);
                let mut fds = hop.fds();
                fds[3] = m.as_fd();
                c.send(&offer_msg(hop.offer(vec![vec![BUF]; 2])), &fds).unwrap();
                nix::unistd::ftruncate(&m, 0).unwrap();
            },
            &["capture's buffer 0", "peer sent a memfd without F_SEAL_SHRINK"],
        );
        self.serve(
            up,
            "upstream: an unsealed ring memfd, then shrunk",
            &|c| {
                let hop = Hop::new();
                let m = unsealed_memfd(hop.ring.geometry().shm_bytes());
                let mut fds = hop.fds();
                fds[0] = m.as_fd();
                c.send(&offer_msg(hop.offer(vec![vec![BUF]; 2])), &fds).unwrap();
                nix::unistd::ftruncate(&m, 0).unwrap();
            },
            &["mapping capture's ring", "ring memfd is not sealed against shrinking"],
        );
        self.serve(
            up,
            "upstream: a regular file as a buffer, then shrunk",
            &|c| {
                let hop = Hop::new();
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(d.join("buffer"))
                    .unwrap();
                f.set_len(BUF).unwrap();
                let mut fds = hop.fds();
                fds[3] = f.as_fd();
                c.send(&offer_msg(hop.offer(vec![vec![BUF]; 2])), &fds).unwrap();
                f.set_len(0).unwrap();
            },
            &[
                "capture's buffer 0",
                "peer's buffer fd is a regular file (",
                "that its writer could truncate: neither a dma-buf nor a sealed memfd",
            ],
        );
    }

    /// B: a copy-mode offer to a stage that joined a zero-copy hop.
    fn upstream_copy_mode(&mut self, up: &mut Upstream) {
        let d = &self.dir.path().to_path_buf();
        self.serve(
            up,
            "upstream: a copy-mode offer (a dir as its socket)",
            &|c| {
                let dfd = dir_fd(d);
                let o = Offer {
                    copy_mode: true,
                    max_frame_bytes: 1 << 40,
                    ..frames_offer(RingGeometry { capacity: 1, slot_bytes: 8, ret_capacity: 1 }, vec![])
                };
                c.send(&offer_msg(o), &[dfd.as_fd()]).unwrap();
            },
            &["capture offered a --copy-mode hop; this stage joined a zero-copy one at set-up"],
        );
    }

    /// B: a valid offer that scale joins, then descriptors and ring indices it must each
    /// reject; then the impostor hangs up.
    fn upstream_bad_descriptors(&mut self, up: Upstream) {
        let Run { scale, said, peer, me, scale_pid, .. } = self;
        let peer = peer.as_str();
        let imp = up.imp;
        // A valid offer, then descriptors that must each be rejected.
        let c = imp.accept_until(&NEVER, Some(Instant::now() + PATIENCE)).unwrap();
        assert_eq!(c.peer_pid, *scale_pid);
        c.set_recv_timeout(Some(PATIENCE)).unwrap();
        c.recv().unwrap();
        let mut hop = Hop::new();
        c.send(&offer_msg(hop.offer(vec![vec![BUF]; 2])), &hop.fds()).unwrap();
        said.note(
            "upstream: a valid offer (joined)",
            scale.expect(&[&format!("joined the capture stage again ({peer})")]),
        );
        let hostile: [(&str, FrameDesc, &str); 8] = [
            ("an index out of range", desc(0, |d| d.buffer_index = 2), "buffer index 2 out of 2"),
            ("the largest index", desc(1, |d| d.buffer_index = u32::MAX), "buffer index 4294967295 out of 2"),
            (
                "a plane past the buffer",
                desc(2, |d| d.layout.planes[1].offset = 100_000),
                "plane 1: offset 100000 + length 38400 past buffer size 115200",
            ),
            ("an absurd width", desc(3, |d| d.layout.width = 1 << 20), "frame size 1048576x240 out of range"),
            (
                "absurd row and plane lengths",
                desc(4, |d| {
                    d.layout.planes[0].bytesperline = u32::MAX;
                    d.layout.planes[0].length = u32::MAX;
                }),
                "plane 0: length 4294967295 too small for 240 rows of 4294967295 bytes",
            ),
            (
                "an unknown fourcc",
                desc(5, |d| d.layout.fourcc = Fourcc(u32::from_le_bytes(*b"ZZZZ"))),
                "unknown fourcc",
            ),
            ("200 planes", desc(6, |d| d.layout.num_planes = 200), "NV12 needs 2 planes, descriptor says 200"),
            (
                "a plane in a fd the buffer lacks",
                desc(7, |d| d.layout.planes[0].fd_index = 3),
                "plane 0: fd_index 3 but buffer has 1 fds",
            ),
        ];
        for (k, (name, dd, reason)) in hostile.iter().enumerate() {
            hop.ring.push(*dd, true).unwrap();
            hop.bell.ring();
            let line = scale.expect(&[&format!("rejected a slot from upstream {peer} ({} so far): {reason}", k + 1)]);
            said.note(&format!("descriptor: {name}"), line);
        }
        // Ring indices no producer could write: tail a million slots past head.
        let spy = RingConsumer::<FrameDesc>::attach(hop.ring.fd().try_clone().unwrap(), hop.ring.geometry()).unwrap();
        spy.scribble_word(W_TAIL, 1 << 40);
        hop.bell.ring();
        said.note("descriptor: corrupt ring indices", scale.expect(&[&format!("rejected a slot from upstream {peer} (9 so far): ring indices corrupt: head 8, tail 1099511627776, capacity 3")]));
        assert_eq!(hop.ring.counters().rejected, 9, "scale counted each rejection in the shared counters too");
        drop((spy, hop, c));
        scale.expect(&[&format!("the capture stage (pid {me}) hung up")]);
        drop(imp);
    }

    /// B, the end: the real capture stage comes back; scale re-joins it and frames flow again.
    fn capture_comes_back(&mut self) {
        let Run { capture, scale, infer, publish, seen, uid, dir, .. } = self;
        let d = dir.path();
        *capture = StageProc::start(d, "capture", &SOURCE, None);
        scale.expect(&[&format!("joined the capture stage again (pid {} uid {uid})", capture.pid())]);
        frames_flow(seen, Instant::now(), "after the impostor upstream");
        for s in [scale, infer, publish] {
            assert!(s.alive(), "the {} stage died:\n{}", s.name, s.log());
        }
    }

    /// C. An impostor consumer of scale that joins for real: infer dies first. Returns the
    /// pid of the infer stage that died.
    fn impostor_consumer_that_joins(&mut self) -> i32 {
        let Run { scale, infer, said, run, peer, .. } = self;
        let peer = peer.as_str();
        let infer_pid = infer.pid();
        infer.signal(nix::sys::signal::Signal::SIGKILL);
        assert!(wait_for(PATIENCE, || !infer.alive()));
        scale.expect(&[&format!("downstream (pid {infer_pid}) hung up")]);
        let ssock = run.join("scale.sock");
        let c = connect(&ssock);
        c.send(&hello("infer", None), &[]).unwrap();
        said.note(
            "consumer: a hello wanting another input",
            scale.expect(&["(2 so far)", peer, "could not serve it", "the infer stage now wants None"]),
        );
        assert!(matches!(&closed_by_peer(&c)[..], [ControlMsg::Refuse { .. }]));
        let c = connect(&ssock);
        let (_, mut rx, _bufs) =
            join::<FrameDesc>(c, &hello("infer", Some(infer_none_wants())), WaitMode::Eventfd, "scale").unwrap();
        scale.expect(&[&format!("the infer stage ({peer}) joined again")]);
        for (k, t) in BAD_TOKENS.iter().enumerate() {
            rx.push_return(*t).unwrap();
            let line = scale.expect(&[&format!(
                "the consumer ({peer}) returned token {t:#x} for a buffer it does not hold; ignored ({} so far)",
                k + 1
            )]);
            said.note("consumer: a return token it was never lent", line);
        }
        rx.ring_for_tests().scribble_word(W_HEAD, 7_777_777);
        said.note(
            "consumer: corrupt ring head",
            scale.expect(&[&format!("dropped the consumer ({peer}): consumer corrupted the ring: head 7777777")]),
        );
        assert!(wait_for(PATIENCE, || rx.conn().peer_gone()), "scale hung up on the consumer that corrupted its ring");
        drop(rx);
        infer_pid
    }

    /// D. An impostor infer stage, to the publish stage that re-joins it; then the real
    /// infer stage comes back.
    fn impostor_infer_stage(&mut self, infer_pid: i32) {
        let Run { infer, publish, seen, said, run, peer, me, publish_pid, dir, .. } = self;
        let (peer, d) = (peer.as_str(), dir.path());
        publish.expect(&[&format!("the infer stage (pid {infer_pid}) hung up")]);
        let isock = run.join("infer.sock");
        let imp = Listener::bind(&isock).unwrap();
        let accept_publish = || {
            let c = imp.accept_until(&NEVER, Some(Instant::now() + PATIENCE)).unwrap();
            assert_eq!(c.peer_pid, *publish_pid);
            c.set_recv_timeout(Some(PATIENCE)).unwrap();
            c.recv().unwrap();
            c
        };
        let head =
            |k: u32| format!("refused what answered as the infer stage on {} ({k} so far): {peer}: ", isock.display());
        let c = accept_publish();
        fdpass::send(c.as_fd(), b"}{", &[]).unwrap();
        said.note("upstream of publish: garbage", publish.expect(&[&head(1), "malformed control message"]));
        drop(c);
        let det_ring = RingProducer::<DetectionsDesc>::create(8, 2).unwrap();
        let (bell, back) = (Doorbell::new().unwrap(), Doorbell::new().unwrap());
        let labels = zcpipe::infer::labels::coco80();
        let det_offer = Offer {
            payload: Payload::Detections,
            memory: "none".into(),
            fps: 0.0,
            labels,
            ..frames_offer(det_ring.geometry(), vec![])
        };
        let c = accept_publish();
        let (r, _w) = pipe();
        c.send(&offer_msg(det_offer.clone()), &[r.as_fd(), bell.as_fd(), back.as_fd()]).unwrap();
        said.note(
            "upstream of publish: a pipe as the ring",
            publish.expect(&[&head(2), "mapping infer's ring", "ring fd is not a sealed memfd"]),
        );
        drop(c);
        let c = accept_publish();
        let mut det_ring = det_ring;
        c.send(&offer_msg(det_offer), &[det_ring.fd().as_fd(), bell.as_fd(), back.as_fd()]).unwrap();
        said.note(
            "upstream of publish: a valid offer (joined)",
            publish.expect(&[&format!("joined the infer stage again ({peer})")]),
        );
        let ok = DetectionsDesc { width: 320, height: 240, ..Default::default() };
        let mut nan = ok;
        nan.count = 1;
        nan.dets[0].score = f32::NAN;
        let bad: [(&str, DetectionsDesc, &str); 3] = [
            ("a detection count past the slot", DetectionsDesc { count: 1000, ..ok }, "detection count 1000 > 100"),
            ("a frame of size 0", DetectionsDesc { width: 0, ..ok }, "frame size 0x240 out of range"),
            ("a NaN score", nan, "detection with score NaN"),
        ];
        for (k, (name, dd, reason)) in bad.iter().enumerate() {
            det_ring.push(*dd, true).unwrap();
            bell.ring();
            said.note(
                &format!("detections: {name}"),
                publish.expect(&[&format!("rejected a slot from upstream {peer} ({} so far): {reason}", k + 1)]),
            );
        }
        drop((c, det_ring, bell, back));
        publish.expect(&[&format!("the infer stage (pid {me}) hung up")]);
        drop(imp);
        // The real infer stage comes back: publish and scale serve and re-join it.
        *infer = StageProc::start(d, "infer", &["--infer", "none"], None);
        frames_flow(seen, Instant::now(), "after the impostor consumer and the impostor infer stage");
    }

    /// The end: capture ends the stream; every stage drains, reports and exits 0.
    fn the_end(&mut self) {
        let Run { capture, scale, infer, publish, seen, scale_pid, publish_pid, .. } = self;
        for s in [&mut *capture, &mut *scale, &mut *infer, &mut *publish] {
            assert!(s.alive(), "the {} stage died:\n{}", s.name, s.log());
        }
        assert_eq!((scale.pid(), publish.pid()), (*scale_pid, *publish_pid), "scale and publish were never restarted");
        capture.signal(nix::sys::signal::Signal::SIGINT);
        let mut reports = vec![];
        for s in [&mut *capture, &mut *scale, &mut *infer, &mut *publish] {
            let (status, report) = s.finish();
            assert_eq!(status.code(), Some(0), "the {} stage: {status}\n{}", s.name, s.log());
            reports.push(report);
        }
        let [_, scale_r, _, publish_r] = &reports[..] else { unreachable!() };
        let x = &scale_r["extra"];
        // Scale refused the second infer stage and the one wanting another input; refused 15
        // offers; rejected 9 descriptors (its own count); took every frame it scaled.
        assert_eq!(x["refused"], 2, "{scale_r}");
        assert_eq!(x["upstream_refused"], REFUSED_OFFERS, "{scale_r}");
        assert_eq!(x["input_rejected"], 9, "{scale_r}");
        assert_eq!(x["input_taken"], scale_r["frames_in"], "{scale_r}");
        assert_eq!(scale_r["pool"]["bad_returns"], BAD_TOKENS.len(), "{scale_r}");
        assert_eq!(scale_r["pool"]["consumers_dropped"], 1, "{scale_r}");
        assert_eq!(scale_r["pool"]["consumers_lost"], 2, "infer #1 died, the impostor was dropped: {scale_r}");
        assert_eq!(x["buffers_still_out"], 0, "{scale_r}");
        let x = &publish_r["extra"];
        assert_eq!(x["upstream_refused"], 2, "{publish_r}");
        assert_eq!(x["input_rejected"], 3, "{publish_r}");
        // Publish sent every line it made to the client, which got each one.
        let lines = seen.lock().unwrap().iter().filter(|(_, v)| v["type"] == "frame" || v["type"] == "notice").count();
        assert_eq!(x["server"]["skipped"], 0, "{publish_r}");
        assert_eq!(x["server"]["sent"], lines, "{publish_r}");
        assert!(seen.lock().unwrap().iter().any(|(_, v)| v["type"] == "end"), "the client got the end line");
        assert_eq!(publish_r["frames_in"], publish_r["frames_out"], "{publish_r}");
    }
}
