//! The encoder's configuration (`rk_venc_cfg.h`): `mpp_enc_cfg_init` / `deinit` and the
//! `mpp_enc_cfg_set_*` / `get_*` accessors by entry name, over the 4-byte entries MPP's
//! `mpp/base/mpp_enc_cfg.cpp` defines ([`CFG_KEYS`]). An unknown name, or `_s64`/`_u64` on a
//! 4-byte entry, returns `MPP_NOK` as MPP does (logged with `reason=`); a getter gives 0 for
//! an entry not set. `MPP_ENC_SET_CFG` ([`super::encode`]) reads the entries set.

use std::collections::HashMap;
use std::ffi::c_char;
use std::sync::{LazyLock, Mutex};

use super::*;

/// The 4-byte (`RK_S32`/`RK_U32`) entries of MPP's encoder configuration the fake knows (the
/// `ENTRY` table of `mpp/base/mpp_enc_cfg.cpp`, H.264 and the common groups).
pub(super) const CFG_KEYS: &str = "\
    base:low_delay rc:mode rc:bps_target rc:bps_max rc:bps_min rc:fps_in_flex \
    rc:fps_in_num rc:fps_in_denom rc:fps_in_denorm rc:fps_out_flex rc:fps_out_num \
    rc:fps_out_denom rc:fps_out_denorm rc:gop rc:max_reenc_times rc:priority \
    rc:drop_mode rc:drop_thd rc:drop_gap rc:max_i_prop rc:min_i_prop rc:init_ip_ratio \
    rc:super_mode rc:super_i_thd rc:super_p_thd rc:debreath_en rc:debreath_strength \
    rc:qp_init rc:qp_min rc:qp_max rc:qp_min_i rc:qp_max_i rc:qp_step rc:qp_ip rc:qp_vi \
    rc:hier_qp_en rc:stats_time rc:refresh_en rc:refresh_mode rc:refresh_num \
    rc:fqp_min_i rc:fqp_min_p rc:fqp_max_i rc:fqp_max_p prep:width prep:height \
    prep:hor_stride prep:ver_stride prep:format prep:format_out prep:chroma_ds_mode \
    prep:fix_chroma_en prep:fix_chroma_u prep:fix_chroma_v prep:colorspace \
    prep:colorprim prep:colortrc prep:colorrange prep:range prep:range_out prep:rotation \
    prep:mirroring prep:flip codec:type h264:stream_type h264:profile h264:level \
    h264:poc_type h264:log2_max_poc_lsb h264:log2_max_frm_num h264:gaps_not_allowed \
    h264:cabac_en h264:cabac_idc h264:trans8x8 h264:const_intra h264:scaling_list \
    h264:cb_qp_offset h264:cr_qp_offset h264:dblk_disable h264:dblk_alpha h264:dblk_beta \
    h264:qp_init h264:qp_min h264:qp_max h264:qp_min_i h264:qp_max_i h264:qp_step \
    h264:qp_delta_ip h264:max_tid h264:max_ltr h264:prefix_mode h264:base_layer_pid \
    h264:constraint_set split:mode split:arg split:out tune:scene_mode";

/// The entry `name` is, if the fake knows it.
pub(super) fn cfg_key(name: &str) -> Option<&'static str> {
    CFG_KEYS.split_whitespace().find(|k| *k == name)
}

/// An `MppEncCfg`: the entries set, by name.
#[derive(Clone, Default)]
pub(super) struct Cfg {
    pub(super) values: HashMap<&'static str, i32>,
}

pub(super) static CFGS: LazyLock<Mutex<HashMap<usize, Box<Cfg>>>> = LazyLock::new(Default::default);

/// `MPP_RET mpp_enc_cfg_init(MppEncCfg *cfg)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_enc_cfg_init(out: *mut Opaque) -> MppRet {
    if out.is_null() {
        log(format!("mpp_enc_cfg_init ret={MPP_ERR_NULL_PTR}"));
        return MPP_ERR_NULL_PTR;
    }
    hand_out(&CFGS, Box::default(), out);
    log("mpp_enc_cfg_init ret=0".into());
    MPP_OK
}

/// `MPP_RET mpp_enc_cfg_deinit(MppEncCfg cfg)`.
///
/// # Safety
/// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
/// handles are looked up in the fake's registries, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mpp_enc_cfg_deinit(cfg: Opaque) -> MppRet {
    let known = lock(&CFGS).remove(&(cfg as usize)).is_some();
    if !known {
        violation("enc-cfg-deinit-unknown", String::new());
    }
    log(format!("mpp_enc_cfg_deinit known={} ret={}", u8::from(known), if known { MPP_OK } else { MPP_ERR_NULL_PTR }));
    if known {
        MPP_OK
    } else {
        MPP_ERR_NULL_PTR
    }
}

/// One `mpp_enc_cfg_set_*` (`bytes`: the width of the call's value type).
fn cfg_set(call: &str, cfg: Opaque, name: *const c_char, value: i64, bytes: usize) -> MppRet {
    let n = c_str(name);
    let ret = match (lock(&CFGS).get_mut(&(cfg as usize)), cfg_key(&n)) {
        (None, _) => (MPP_ERR_NULL_PTR, "reason=unknown-cfg"),
        _ if name.is_null() => (MPP_ERR_NULL_PTR, "reason=null-name"),
        (Some(_), None) => (MPP_NOK, "reason=unknown-key"),
        (Some(_), Some(_)) if bytes != 4 => (MPP_NOK, "reason=entry-is-4-bytes"),
        (Some(c), Some(k)) => {
            c.values.insert(k, value as i32);
            (MPP_OK, "")
        }
    };
    log(format!("{call} name={n} value={value} ret={} {}", ret.0, ret.1).trim_end().to_string());
    ret.0
}

macro_rules! cfg_setter {
    ($name:ident, $ty:ty) => {
        #[doc = concat!("`MPP_RET ", stringify!($name), "(MppEncCfg cfg, const char *name, value)` (rk_venc_cfg.h).")]
        ///
        /// # Safety
        /// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
        /// handles are looked up in the fake's registries, never dereferenced.
        #[no_mangle]
        pub unsafe extern "C" fn $name(cfg: Opaque, name: *const c_char, v: $ty) -> MppRet {
            cfg_set(stringify!($name), cfg, name, v as i64, std::mem::size_of::<$ty>())
        }
    };
}

cfg_setter!(mpp_enc_cfg_set_s32, i32);
cfg_setter!(mpp_enc_cfg_set_u32, u32);
cfg_setter!(mpp_enc_cfg_set_s64, i64);
cfg_setter!(mpp_enc_cfg_set_u64, u64);

macro_rules! cfg_getter {
    ($name:ident, $ty:ty) => {
        #[doc = concat!("`MPP_RET ", stringify!($name), "(MppEncCfg cfg, const char *name, value *)` (rk_venc_cfg.h): 0 for an entry not set.")]
        ///
        /// # Safety
        /// Pointer arguments are null or valid for what MPP's header says the call reads or writes;
        /// handles are looked up in the fake's registries, never dereferenced.
        #[no_mangle]
        pub unsafe extern "C" fn $name(cfg: Opaque, name: *const c_char, out: *mut $ty) -> MppRet {
            let n = c_str(name);
            let v = lock(&CFGS).get(&(cfg as usize)).map(|c| c.values.get(n.as_str()).copied().unwrap_or(0));
            let ret = match v {
                Some(v) if !out.is_null() && cfg_key(&n).is_some() => {
                    // SAFETY: a non-null out-pointer from the caller.
                    unsafe { *out = v as $ty };
                    MPP_OK
                }
                Some(_) => MPP_NOK,
                None => MPP_ERR_NULL_PTR,
            };
            log(format!("{} name={n} value={} ret={ret}", stringify!($name), v.unwrap_or(0)));
            ret
        }
    };
}

cfg_getter!(mpp_enc_cfg_get_s32, i32);
cfg_getter!(mpp_enc_cfg_get_u32, u32);
