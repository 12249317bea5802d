//! The rest of im2d: `imsync`, `imconfig`, `querystring` and `imStrError_t`.

use std::ffi::{c_char, c_int};

use super::*;

/// `IM_STATUS imsync(int release_fence_fd)`: the fake never hands out fences.
#[no_mangle]
pub extern "C" fn imsync(release_fence_fd: c_int) -> c_int {
    log(format!("imsync fence={release_fence_fd} status={IM_STATUS_ILLEGAL_PARAM}"));
    fail(IM_STATUS_ILLEGAL_PARAM, format!("illegal fence_fd[{release_fence_fd}]"))
}

/// `IM_STATUS imconfig(IM_CONFIG_NAME name, uint64_t value)`, with librga's checks.
#[no_mangle]
pub extern "C" fn imconfig(name: c_int, value: u64) -> c_int {
    let status = match name {
        IM_CONFIG_SCHEDULER_CORE if value & IM_SCHEDULER_MASK != 0 => {
            CORE.with(|c| c.set(value));
            IM_STATUS_SUCCESS
        }
        IM_CONFIG_SCHEDULER_CORE => fail(
            IM_STATUS_ILLEGAL_PARAM,
            format!("It's not legal rga_core[{value:#x}], it needs to be a 'IM_SCHEDULER_CORE'."),
        ),
        IM_CONFIG_PRIORITY if value <= 6 => IM_STATUS_SUCCESS,
        IM_CONFIG_CHECK if value <= 1 => IM_STATUS_SUCCESS,
        IM_CONFIG_PRIORITY | IM_CONFIG_CHECK => {
            fail(IM_STATUS_ILLEGAL_PARAM, format!("It's not legal config value [{value:#x}]"))
        }
        _ => fail(IM_STATUS_NOT_SUPPORTED, "Unsupported config name!".into()),
    };
    log(format!("imconfig name={name} value={value:#x} status={status}"));
    status
}

/// `const char* querystring(int name)`: the fake's identity in librga's format.
#[no_mangle]
pub extern "C" fn querystring(name: c_int) -> *const c_char {
    log(format!("querystring name={name}"));
    if no_device() {
        // librga 1.10.3 dereferences its null session here.
        log("querystring crashed: no /dev/rga session".into());
        std::process::abort();
    }
    let lines = [
        "RGA vendor            : zcpipe fake librga (CPU; not Rockchip)\n",
        "RGA_api version       : v1.10.3_[1]-zcpipe-fake\nRGA version           : FAKE_CPU \n",
        "Max input             : 8192x8192\n",
        "Max output            : 8192x8192\n",
        "Byte stride           : 16 byte\n",
        "Scale limit           : 0.0625 ~ 16\n",
        "Input support format  : RGBA_8888 RGB_888 YUV420_sp_8bit YUV422_sp_8bit YUYV422 \n",
        "output support format : RGBA_8888 RGB_888 \n",
        "RGA feature           : \n",
        "expected performance  : unknown\n",
    ];
    let s = match name {
        0..=9 => lines[name as usize].to_string(),
        10 => lines.concat(),
        _ => "Invalid instruction".to_string(),
    };
    ret_str(s)
}

/// `const char* imStrError_t(IM_STATUS status)`: librga's status text, plus this thread's
/// last error message for failures.
#[no_mangle]
pub extern "C" fn imStrError_t(status: c_int) -> *const c_char {
    log(format!("imStrError_t status={status}"));
    let text = match status {
        IM_STATUS_NOERROR => return ret_str("No errors during operation".into()),
        IM_STATUS_SUCCESS => return ret_str("Run successfully".into()),
        IM_STATUS_NOT_SUPPORTED => "Unsupported function",
        -2 => "Memory overflow",
        IM_STATUS_INVALID_PARAM => "Invalid parameters",
        IM_STATUS_ILLEGAL_PARAM => "Illegal parameters",
        -5 => "Version verification failed",
        IM_STATUS_NO_SESSION => "No session",
        IM_STATUS_FAILED => "Fatal error",
        _ => return ret_str("unkown status".into()),
    };
    let msg = LAST_ERROR.with(|e| std::mem::take(&mut *e.borrow_mut()));
    ret_str(format!("{text}: {msg}"))
}
