use super::*;

fn hello(v: u32) -> Vec<u8> {
    format!(r#"{{"type":"hello","v":{v},"name":"planner"}}"#).into_bytes()
}

#[test]
fn a_hello_and_a_detect_read_back() {
    assert_eq!(decode(&hello(1), 0).unwrap(), Request::Hello { v: 1, name: "planner".into(), detect_fps: 0.0 });
    let d = br#"{"type":"detect","v":1,"kind":"video","buffer":3,"seq":9}"#;
    assert_eq!(decode(d, 0).unwrap(), Request::Detect { v: 1, kind: Kind::Video, buffer: 3, seq: 9 });
}

#[test]
fn refusals_name_what_is_wrong() {
    assert_eq!(decode(&hello(2), 0).unwrap_err(), ProtoError::Version { got: 2 });
    assert_eq!(decode(&hello(1), 1).unwrap_err(), ProtoError::Fds { expected: 0, got: 1 });
    assert!(matches!(decode(b"{\"type\":\"hello\"", 0).unwrap_err(), ProtoError::Malformed(_)));
    assert!(matches!(decode(b"\xff\xfe", 0).unwrap_err(), ProtoError::Malformed(_)));
    let bad_name = br#"{"type":"hello","v":1,"name":"a/b"}"#;
    assert!(matches!(decode(bad_name, 0).unwrap_err(), ProtoError::Name(_)));
    let bad_rate = br#"{"type":"hello","v":1,"detect_fps":-1}"#;
    assert_eq!(decode(bad_rate, 0).unwrap_err(), ProtoError::Rate(-1.0));
    let none = br#"{"type":"register","v":1,"buffers":[]}"#;
    assert_eq!(decode(none, 0).unwrap_err(), ProtoError::RegisterCount(0));
}

#[test]
fn a_buffer_must_hold_its_layout() {
    let reg = |spec: &BufferSpec, fds| {
        let m = serde_json::to_vec(&Request::Register { v: 1, buffers: vec![spec.clone()] }).unwrap();
        decode(&m, fds)
    };
    let ok = BufferSpec::nv12(640, 480);
    assert_eq!(ok.size, 640 * 480 * 3 / 2);
    assert!(reg(&ok, 1).is_ok());
    assert_eq!(reg(&ok, 2).unwrap_err(), ProtoError::Fds { expected: 1, got: 2 });
    let small = BufferSpec { size: ok.size - 1, ..ok.clone() };
    let e = reg(&small, 1).unwrap_err().to_string();
    assert_eq!(e, "buffer 0 of the message: plane 1: offset 307200 + length 153600 past buffer size 460799");
    let narrow = BufferSpec { planes: vec![PlaneSpec { offset: 0, bytesperline: 600 }; 2], ..ok.clone() };
    assert!(reg(&narrow, 1).unwrap_err().to_string().contains("bytesperline 600 < 640"));
    let one_plane = BufferSpec { planes: vec![ok.planes[0]], ..ok.clone() };
    assert!(reg(&one_plane, 1).unwrap_err().to_string().contains("NV12 needs 2 planes"));
    let huge = BufferSpec::encoded(PixelFormat::Jpeg, MAX_BUFFER_BYTES + 1);
    assert!(reg(&huge, 1).unwrap_err().to_string().contains("out of range"));
    assert!(reg(&BufferSpec::encoded(PixelFormat::Png, 1000), 1).is_ok());
}

#[test]
fn a_frame_answer_is_a_frame_line_with_the_buffer() {
    let frame = FrameJson {
        camera: "planner pid 7".into(),
        seq: 4,
        timestamp_ns: 5,
        width: 640,
        height: 480,
        latency_us: Default::default(),
        detections: vec![],
        zones: None,
        skipped: None,
        npu: Default::default(),
        ..Default::default()
    };
    let r = Reply::Frame { v: 1, buffer: 2, frame: frame.clone() };
    let bytes = r.to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["type"], "frame");
    assert_eq!(v["buffer"], 2);
    assert_eq!(v["seq"], 4);
    assert_eq!(decode_reply(&bytes).unwrap(), r);
    // The frame line's own reader reads it too (the fields it knows).
    let line = crate::schema::SocketLine::parse(std::str::from_utf8(&bytes).unwrap()).unwrap();
    assert_eq!(line, crate::schema::SocketLine::Frame(frame));
}
