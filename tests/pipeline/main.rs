//! Integration tests of the whole pipeline and the app's commands: runs, plans, configuration, cameras, fan-out, compare, replay, tracking, snapshots, doctor, deployment files, display, RTSP and the detection heads.
//! One test binary (`cargo test --test pipeline`): each module is a former `tests/<module>.rs`.

#[path = "../common/mod.rs"]
mod common;

mod compare;
mod config;
mod control;
mod cpu_scaler;
mod deploy;
mod display;
mod docs;
mod doctor;
mod fanout;
mod heads;
mod multicam;
mod pipeline;
mod plan;
mod record;
mod replay;
mod rtsp;
#[cfg(feature = "onnx")]
mod service;
mod snapshot;
mod track;
mod udev_rules;
