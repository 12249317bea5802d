//! Fault injection and hostile peers: stages killed, hung or impersonated while the pipeline runs (`make test-faults` sets ZCPIPE_FAULT_KILLS).
//! One test binary (`cargo test --test faults`): each module is a former `tests/<module>.rs`.

#[path = "../common/mod.rs"]
mod common;

mod faults;
mod hostile;
mod service;
