//! The web view's OpenAPI description (`docs/src/api/openapi.json`) checked both ways:
//! against the contract's Rust types (every request and answer the code can make is valid
//! there, and every example there is a request the code reads), and against a running
//! server (each route answers with a status and content type the file gives, JSON bodies
//! valid against its schemas, and every route the server names is in the file).
//!
//! The schemas use a small part of JSON Schema 2020-12, checked here by [`check`]: `$ref`,
//! `type`, `const`, `enum`, `oneOf`, `properties`, `required`, `additionalProperties`, `items`.

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::{json, Value};
use zcpipe::core::control::{
    parse_ask, Answer, Ask, CameraRun, CameraScene, CameraState, Refusal, Reply, Request, Setting, ShapeKind, VERSION,
};

use super::http::web_view_address;
use super::http_control::{post, run_with, send, LOCAL, TOKEN};

fn spec() -> Value {
    let text = std::fs::read_to_string(common::root().join("docs/src/api/openapi.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The schema `$ref` points at (`#/components/schemas/X`).
fn resolve<'a>(spec: &'a Value, r: &str) -> &'a Value {
    let p = r.strip_prefix('#').unwrap_or_else(|| panic!("a local $ref: {r}"));
    spec.pointer(p).unwrap_or_else(|| panic!("$ref {r} is not in the file"))
}

fn type_is(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        other => panic!("type {other} is not JSON Schema's"),
    }
}

/// Where `v` breaks `schema` (at `at`), none when it is valid.
fn check(spec: &Value, schema: &Value, v: &Value, at: &str) -> Vec<String> {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        return check(spec, resolve(spec, r), v, at);
    }
    let mut bad = vec![];
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => panic!("type {t}"),
        };
        if !types.iter().any(|t| type_is(t, v)) {
            return vec![format!("{at}: {v} is not {types:?}")];
        }
    }
    if let Some(c) = schema.get("const").filter(|c| *c != v) {
        bad.push(format!("{at}: {v} is not {c}"));
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array).filter(|e| !e.contains(v)) {
        bad.push(format!("{at}: {v} is not one of {e:?}"));
    }
    if let Some(one) = schema.get("oneOf").and_then(Value::as_array) {
        let valid = one.iter().filter(|s| check(spec, s, v, at).is_empty()).count();
        if valid != 1 {
            bad.push(format!("{at}: {v} is valid against {valid} of oneOf's {} schemas, not 1", one.len()));
        }
    }
    if let Some(o) = v.as_object() {
        let props = schema.get("properties").and_then(Value::as_object);
        for r in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
            if !o.contains_key(r.as_str().unwrap()) {
                bad.push(format!("{at}: {r} missing"));
            }
        }
        for (k, val) in o {
            match (props.and_then(|p| p.get(k)), schema.get("additionalProperties")) {
                (Some(s), _) => bad.extend(check(spec, s, val, &format!("{at}.{k}"))),
                (None, Some(Value::Bool(false))) => bad.push(format!("{at}: {k} is not a property of the schema")),
                (None, Some(s)) if s.is_object() => bad.extend(check(spec, s, val, &format!("{at}.{k}"))),
                _ => {}
            }
        }
    }
    if let (Some(a), Some(items)) = (v.as_array(), schema.get("items")) {
        for (i, x) in a.iter().enumerate() {
            bad.extend(check(spec, items, x, &format!("{at}[{i}]")));
        }
    }
    bad
}

fn valid(spec: &Value, schema: &str, v: &Value) {
    let s = json!({ "$ref": format!("#/components/schemas/{schema}") });
    let bad = check(spec, &s, v, schema);
    assert!(bad.is_empty(), "{v} is not a valid {schema}: {bad:?}");
}

/// One of every request and every answer the contract's types make is valid in the file;
/// every example request in the file is one the run reads; the file refuses what the
/// contract refuses (an unknown field, another version).
#[test]
fn the_openapi_file_describes_the_control_contracts_types() {
    let spec = spec();
    let cam = || "cam0".to_string();
    let requests = [
        Request::Cameras,
        Request::AddCamera { camera: "back".into(), source: "rtsp://h/x".into(), options: vec!["--fps=10".into()] },
        Request::RemoveCamera { camera: cam() },
        Request::RestartCamera { camera: cam() },
        Request::Scene { camera: None },
        Request::Scene { camera: Some(cam()) },
        Request::SetShape { camera: cam(), kind: ShapeKind::Line, spec: "exit=0,1,2,3".into() },
        Request::RemoveShape { camera: cam(), kind: ShapeKind::Loiter, name: "door".into() },
        Request::Reload,
    ];
    let settings = [
        Setting::ScoreThreshold(0.5),
        Setting::NmsIou(0.5),
        Setting::DetectFps(5.0),
        Setting::TrackHigh(0.6),
        Setting::TrackKeepalive(2.0),
        Setting::Mqtt(false),
        Setting::SnapshotEvery(10.0),
    ];
    let sets = settings.into_iter().map(|setting| Request::Set { camera: Some(cam()), setting });
    for request in requests.into_iter().chain(sets) {
        valid(&spec, "Ask", &serde_json::to_value(Ask { version: VERSION, request }).unwrap());
    }
    let state = CameraState {
        name: cam(),
        source: "rtsp://u:***@h/x".into(),
        state: CameraRun::Reconnecting,
        pid: Some(42),
        restarts: 1,
        frames: 9,
    };
    let replies = [
        Reply::Done { change: "x".into(), restarted: vec!["infer".into()], started: vec![], stopped: vec![] },
        Reply::Unchanged,
        Reply::Cameras { cameras: vec![state.clone(), CameraState { pid: None, state: CameraRun::Stopped, ..state }] },
        Reply::Scene {
            cameras: vec![CameraScene { camera: cam(), zones: vec!["a=1,2,3,4,5,6".into()], ..Default::default() }],
        },
    ];
    let refusals = [
        Refusal::Version,
        Refusal::Malformed,
        Refusal::UnknownCamera,
        Refusal::UnknownName,
        Refusal::Duplicate,
        Refusal::Invalid,
        Refusal::Busy,
        Refusal::Failed,
    ];
    let refused = refusals.into_iter().map(|error| Reply::Refused { error, message: "why".into() });
    for reply in replies.into_iter().chain(refused) {
        valid(&spec, "Answer", &serde_json::to_value(Answer { version: VERSION, reply }).unwrap());
    }
    let examples = spec.pointer("/paths/~1api~1control/post/requestBody/content/application~1json/examples").unwrap();
    let examples = examples.as_object().unwrap();
    assert_eq!(examples.len(), 9, "an example of every operation");
    for (name, e) in examples {
        let v = &e["value"];
        valid(&spec, "Ask", v);
        let request = parse_ask(v.to_string().as_bytes()).unwrap_or_else(|e| panic!("example {name}: {e:?}"));
        assert_eq!(serde_json::to_value(&request).unwrap()["op"], name.as_str());
    }
    for (what, v) in [
        ("an unknown field", json!({"version": 1, "request": {"op": "restart_camera", "camera": "a", "x": 1}})),
        ("another version", json!({"version": 2, "request": {"op": "cameras"}})),
        (
            "an unknown setting",
            json!({"version": 1, "request": {"op": "set", "setting": {"name": "speed", "value": 1}}}),
        ),
        (
            "a setting's value of the wrong type",
            json!({"version": 1, "request": {"op": "set", "setting": {"name": "mqtt", "value": 1}}}),
        ),
    ] {
        let bad = check(&spec, &json!({"$ref": "#/components/schemas/Ask"}), &v, "Ask");
        assert!(!bad.is_empty(), "the file takes {what}: {v}");
        assert!(parse_ask(v.to_string().as_bytes()).is_err(), "the run takes {what}");
    }
}

/// The documented responses of `method path`: status -> content types (and their schemas).
fn responses<'a>(spec: &'a Value, path: &str, method: &str) -> &'a serde_json::Map<String, Value> {
    spec["paths"][path][method]["responses"].as_object().unwrap_or_else(|| panic!("{method} {path} is not in the file"))
}

/// Checks a response of `method path` (`doc`: the file's path) against the file: its status
/// and content type are documented, a JSON body is valid against its schema. The status.
fn conforms(spec: &Value, doc: &str, method: &str, r: &(u16, BTreeMap<String, String>, String)) -> u16 {
    let (status, headers, body) = r;
    let documented = responses(spec, doc, method);
    let Some(resp) = documented.get(&status.to_string()) else {
        panic!("{method} {doc} answered {status}, which the file does not give ({:?}): {body}", documented.keys())
    };
    let ct = headers.get("content-type").map(String::as_str).unwrap_or("");
    let Some(media) = resp["content"].get(ct) else {
        panic!("{method} {doc} {status}: content type {ct:?} is not the file's {:?}", resp["content"])
    };
    if let Some(schema) = media.get("schema") {
        let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{method} {doc}: {e}: {body}"));
        let bad = check(spec, schema, &v, doc);
        assert!(bad.is_empty(), "{method} {doc} {status}: {bad:?}");
    }
    *status
}

/// Every route of a running web view (a test pattern, recorded, with a token) answers as
/// the file says, and every route the server names is in the file.
#[test]
fn the_server_answers_as_the_openapi_file_says() {
    let spec = spec();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let clips = dir.path().join("clips");
    std::fs::create_dir(&clips).unwrap();
    let args = ["--instance", "openapi", "--http-token-file", token.to_str().unwrap()];
    let mut run = run_with(dir.path(), &[&args[..], &["--record-dir", clips.to_str().unwrap()]].concat());
    let (addr, err) = web_view_address(&mut run);
    let req =
        |method: &str, path: &str| send(addr, LOCAL, &format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n"), "");
    // A picture once the camera has one (503 before: documented too).
    assert!(common::wait_for(Duration::from_secs(20), || req("GET", "/snapshot/cam0.jpg").0 == 200));
    let mut seen = vec![];
    for (method, path, doc) in [
        ("GET", "/", "/"),
        ("GET", "/api/stats", "/api/stats"),
        ("GET", "/metrics", "/metrics"),
        ("HEAD", "/api/detections", "/api/detections"),
        ("GET", "/snapshot/cam0.jpg", "/snapshot/{camera}.jpg"),
        ("GET", "/snapshot/nope.jpg", "/snapshot/{camera}.jpg"),
        ("HEAD", "/stream/cam0.mjpg", "/stream/{camera}.mjpg"),
        ("GET", "/stream/nope.mjpg", "/stream/{camera}.mjpg"),
        ("GET", "/api/clips", "/api/clips"),
        ("GET", "/clips/999.mp4", "/clips/{file}"),
    ] {
        // The file describes GET; HEAD answers the same without the body.
        let status = conforms(&spec, doc, "get", &req(method, path));
        seen.push(format!("{method} {path} {status}"));
    }
    // The control route: each example the run can take without stopping this test's camera.
    let examples = spec.pointer("/paths/~1api~1control/post/requestBody/content/application~1json/examples").unwrap();
    for op in ["cameras", "scene", "set_shape", "remove_shape", "set", "restart_camera"] {
        let body = examples[op]["value"].to_string();
        let r = post(addr, LOCAL, Some(TOKEN), &body);
        let status = conforms(&spec, "/api/control", "post", &r);
        let result = serde_json::from_str::<Value>(&r.2).unwrap()["reply"]["result"].clone();
        assert_eq!((status, result.as_str()), (200, Some(if op == "cameras" || op == "scene" { op } else { "done" })));
        seen.push(format!("POST {op} {status} {result}"));
    }
    let ask = r#"{"version":1,"request":{"op":"cameras"}}"#;
    for (what, r) in [
        ("no token", post(addr, LOCAL, None, ask)),
        ("GET", send(addr, LOCAL, "GET /api/control HTTP/1.1\r\nConnection: close\r\n", "")),
        (
            "no length",
            send(
                addr,
                LOCAL,
                &format!("POST /api/control HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n"),
                "",
            ),
        ),
        (
            "100 KB",
            send(
                addr,
                LOCAL,
                &format!("POST /api/control HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 102400\r\n"),
                "",
            ),
        ),
    ] {
        let status = conforms(&spec, "/api/control", "post", &r);
        seen.push(format!("POST {what} {status}"));
    }
    // Every route the server names (its 404 lists them) is in the file.
    let (_, _, body) = req("GET", "/nonexistent");
    let named = body.split("the web view serves ").nth(1).unwrap().trim();
    for route in named.split(", ") {
        let doc = route.replace("<camera>", "{camera}");
        assert!(spec["paths"].get(&doc).is_some(), "the server serves {route}, which the file does not describe");
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(run.0.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let status = run.0.wait().unwrap();
    let err = err.join().unwrap();
    assert!(status.success(), "{status}: {err}");
    println!("EVIDENCE openapi: {}", seen.join("; "));
}
