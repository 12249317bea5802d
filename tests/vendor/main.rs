//! Integration tests against the ABI fakes of the vendor libraries (librga, librknnrt, librockchip_mpp): the bindings in process and the pipeline on them.
//! One test binary (`cargo test --test vendor`): each module is a former `tests/<module>.rs`.

#[path = "../common/mod.rs"]
mod common;

mod mjpeg;
mod mpp_encode;
mod mpp_fake;
mod mpp_pipeline;
mod rga;
mod rknn;
mod vendor_copy_mode;
