//! Integration tests of the outputs: the MQTT bridge, the web view (and its control route), the detections socket and the IPC benchmark.
//! One test binary (`cargo test --test outputs`): each module is a former `tests/<module>.rs`.

#[path = "../common/mod.rs"]
mod common;

mod bench_ipc;
mod fleet;
mod fleet_view;
mod http;
mod http_attacks;
mod http_control;
mod ipc;
mod lines;
mod mqtt;
mod mqtt_snapshot;
mod openapi;
