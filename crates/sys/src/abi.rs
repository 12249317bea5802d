//! The vendor structs and constants of `rga`, `rknn` and `mpp` checked against the vendor's
//! own headers by a C compiler (abi/README.md).
//!
//! For each library, a table here lists every struct zcpipe passes across the FFI (its size,
//! alignment, each field's offset and size), the scalar types its function pointers spell
//! (`IM_STATUS`, `rknn_context`, `MppCodingType`, ...) and every constant it sends or matches,
//! each with the Rust value on the target under test. The test then
//! - always compares those values with the checked-in list `abi/<lib>.fields` (the header's
//!   values on LP64, each with the header file and line that define it);
//! - when the headers are there (`abi/vendor/<lib>/` or `$ZCPIPE_<LIB>_HEADER_DIR`), fills in
//!   `abi/probe.c.in` with one C expression per check, compiles it for the target (`cc` on
//!   x86_64, `aarch64-linux-gnu-gcc` on aarch64, also under qemu-user) and compares the
//!   compiler's values with the Rust ones and the list's, and checks that each listed line
//!   still defines its item.
//!
//! A missing header or compiler is said on stderr and skipped, unless `$ZCPIPE_ABI_REQUIRE`
//! names the library (or is `all`). `ZCPIPE_ABI_UPDATE=1` rewrites the lists from the headers.

mod check;
mod list;
mod probe;

use std::io::Write;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};

use list::Header;

/// What one check measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Kind {
    /// `sizeof(T)`.
    Size,
    /// `_Alignof(T)`.
    Align,
    /// `offsetof(T, m)`.
    Offset,
    /// `sizeof(((T *)0)->m)`.
    FieldSize,
    /// `sizeof(T) - offsetof(T, m)`: a Rust field standing for the members from `m` to the end.
    Tail,
    /// An enumerator's or macro's value.
    Value,
}

const KINDS: [(Kind, &str); 6] = [
    (Kind::Size, "size"),
    (Kind::Align, "align"),
    (Kind::Offset, "offset"),
    (Kind::FieldSize, "fsize"),
    (Kind::Tail, "tail"),
    (Kind::Value, "value"),
];

impl Kind {
    fn word(self) -> &'static str {
        KINDS.iter().find(|(k, _)| *k == self).map_or("?", |(_, w)| w)
    }

    fn parse(s: &str) -> Option<Kind> {
        KINDS.iter().find(|(_, w)| *w == s).map(|(k, _)| *k)
    }
}

/// One check: what, of which C name (`im_rect`, `im_rect.x`, `IM_SYNC`), and the Rust value.
#[derive(Clone, Debug)]
struct Item {
    kind: Kind,
    name: String,
    rust: i128,
}

impl Item {
    /// The C type, and the member for a field check.
    fn type_and_member(&self) -> (&str, Option<&str>) {
        match self.name.split_once('.') {
            Some((t, m)) if self.kind != Kind::Value => (t, Some(m)),
            _ => (&self.name, None),
        }
    }

    /// The C expression the probe evaluates.
    fn c_expr(&self) -> String {
        let (t, m) = self.type_and_member();
        let m = m.unwrap_or_default();
        match self.kind {
            Kind::Size => format!("sizeof({t})"),
            Kind::Align => format!("_Alignof({t})"),
            Kind::Offset => format!("offsetof({t}, {m})"),
            Kind::FieldSize => format!("ZCABI_MEMBER_SIZE({t}, {m})"),
            Kind::Tail => format!("ZCABI_TAIL({t}, {m})"),
            Kind::Value => self.name.clone(),
        }
    }
}

/// A library's checks, in the order they are listed.
#[derive(Default)]
struct Items(Vec<Item>);

impl Items {
    fn push(&mut self, kind: Kind, name: String, rust: usize) {
        self.0.push(Item { kind, name, rust: rust as i128 });
    }

    /// A scalar type (`size` only) or a struct (`size` and `align`).
    fn ty(&mut self, c: &str, size: usize, align: Option<usize>) {
        self.push(Kind::Size, c.into(), size);
        if let Some(a) = align {
            self.push(Kind::Align, c.into(), a);
        }
    }

    fn field(&mut self, c: &str, member: &str, offset: usize, size: usize) {
        self.push(Kind::Offset, format!("{c}.{member}"), offset);
        self.push(Kind::FieldSize, format!("{c}.{member}"), size);
    }

    fn value(&mut self, c: &str, v: i128) {
        self.0.push(Item { kind: Kind::Value, name: c.into(), rust: v });
    }
}

/// The size of the field `f` selects, without a value of `S`.
fn member_size<S, F>(_: fn(&S) -> &F) -> usize {
    size_of::<F>()
}

/// `layout!(items, RustType as "c_type" { field, rust_field as "c_member", ... })`: the
/// struct's size and alignment and each listed field's offset and size.
macro_rules! layout {
    ($v:ident, $rust:ty as $c:literal { $($f:ident $(as $cf:literal)?),* $(,)? }) => {{
        $v.ty($c, size_of::<$rust>(), Some(align_of::<$rust>()));
        $( $v.field($c, layout!(@name $f $($cf)?), offset_of!($rust, $f), member_size(|s: &$rust| &s.$f)); )*
    }};
    (@name $f:ident) => { stringify!($f) };
    (@name $f:ident $cf:literal) => { $cf };
}

/// `values!(items, CONST, RUST_NAME as "C_NAME", ...)`: each constant's value.
macro_rules! values {
    ($v:ident, $($r:ident $(as $c:literal)?),* $(,)?) => {
        $( $v.value(layout!(@name $r $($c)?), $r as i128); )*
    };
}

/// `types!(items, "c_type" = RustType, ...)`: each scalar type's size.
macro_rules! types {
    ($v:ident, $($c:literal = $r:ty),* $(,)?) => { $( $v.ty($c, size_of::<$r>(), None); )* };
}

/// librga: `im2d_type.h` (which includes `rga.h` and `im2d_version.h`), librga 1.10.x.
fn rga() -> Items {
    use super::rga::*;
    use std::ffi::c_int;
    let mut v = Items::default();
    types!(v, "rga_buffer_handle_t" = RgaBufferHandle, "IM_STATUS" = ImStatus, "IM_CONFIG_NAME" = c_int);
    types!(v, "im_api_version_t" = u32);
    layout!(v, ImRect as "im_rect" { x, y, width, height });
    layout!(v, ImColorkeyRange as "im_colorkey_range" { max, min });
    layout!(v, ImNn as "im_nn_t" { scale_r, scale_g, scale_b, offset_r, offset_g, offset_b });
    layout!(v, RgaBuffer as "rga_buffer_t" {
        vir_addr, phy_addr, fd, width, height, wstride, hstride, format, color_space_mode, global_alpha,
        rd_mode, color, colorkey_range, nn, rop_code, handle,
    });
    layout!(v, ImHandleParam as "im_handle_param_t" { width, height, format });
    layout!(v, ImOpt as "im_opt_t" { version, color, colorkey_range, nn, rop_code, priority, core, mosaic_mode });
    // `rest` stands for `osd_config` .. `reserve`: its offset is osd_config's, its size the tail's.
    v.push(Kind::Offset, "im_opt_t.osd_config".into(), offset_of!(ImOpt, rest));
    v.push(Kind::Tail, "im_opt_t.osd_config".into(), member_size(|s: &ImOpt| &s.rest));
    for s in -16..=16 {
        let name = status_name(s);
        if name.starts_with("IM_STATUS_") {
            v.value(name, s.into());
        }
    }
    values!(v, IM_SYNC, IM_ASYNC, IM_CROP, IM_COLOR_FILL);
    values!(v, IM_CONFIG_SCHEDULER_CORE, IM_CONFIG_PRIORITY, IM_CONFIG_CHECK);
    values!(v, IM_SCHEDULER_RGA3_CORE0, IM_SCHEDULER_RGA3_CORE1, IM_SCHEDULER_RGA2_CORE0, IM_SCHEDULER_RGA2_CORE1);
    values!(v, IM_SCHEDULER_MASK, RGA_VENDOR, RGA_VERSION, IM_COLOR_SPACE_DEFAULT, IM_YUV_TO_RGB_BT601_LIMIT);
    values!(v, RK_FORMAT_RGBA_8888, RK_FORMAT_RGB_888, RK_FORMAT_BGR_888, RK_FORMAT_YUYV_422, RK_FORMAT_UYVY_422);
    values!(v, RK_FORMAT_YCBCR_422_SP as "RK_FORMAT_YCbCr_422_SP", RK_FORMAT_YCBCR_420_SP as "RK_FORMAT_YCbCr_420_SP");
    values!(v, RK_FORMAT_YCRCB_422_SP as "RK_FORMAT_YCrCb_422_SP", RK_FORMAT_YCRCB_420_SP as "RK_FORMAT_YCrCb_420_SP");
    values!(v, RK_FORMAT_UNKNOWN);
    v
}

/// librknnrt: `rknn_api.h` of the RKNPU2 runtime 2.x.
fn rknn() -> Items {
    use super::rknn::*;
    let mut v = Items::default();
    types!(v, "rknn_context" = RknnContext, "rknn_query_cmd" = u32, "rknn_tensor_type" = u32);
    types!(v, "rknn_tensor_format" = u32, "rknn_tensor_qnt_type" = u32, "rknn_core_mask" = u32);
    layout!(v, RknnInputOutputNum as "rknn_input_output_num" { n_input, n_output });
    layout!(v, RknnTensorAttr as "rknn_tensor_attr" {
        index, n_dims, dims, name, n_elems, size, fmt, type_ as "type", qnt_type, fl, zp, scale, w_stride,
        size_with_stride, pass_through, h_stride,
    });
    layout!(v, RknnSdkVersion as "rknn_sdk_version" { api_version, drv_version });
    layout!(v, RknnTensorMem as "rknn_tensor_mem" { virt_addr, phys_addr, fd, offset, size, flags, priv_data });
    layout!(v, RknnInput as "rknn_input" { index, buf, size, pass_through, type_ as "type", fmt });
    layout!(v, RknnOutput as "rknn_output" { want_float, is_prealloc, index, buf, size });
    values!(v, RKNN_MAX_DIMS, RKNN_MAX_NAME_LEN, RKNN_SUCC);
    for (code, name) in RKNN_ERRORS {
        v.value(name, (*code).into());
    }
    values!(v, RKNN_QUERY_IN_OUT_NUM, RKNN_QUERY_INPUT_ATTR, RKNN_QUERY_OUTPUT_ATTR, RKNN_QUERY_PERF_RUN);
    values!(v, RKNN_QUERY_SDK_VERSION, RKNN_QUERY_NATIVE_INPUT_ATTR, RKNN_QUERY_NATIVE_OUTPUT_ATTR);
    values!(v, RKNN_QUERY_NATIVE_NHWC_INPUT_ATTR, RKNN_QUERY_NATIVE_NHWC_OUTPUT_ATTR);
    values!(v, RKNN_TENSOR_FLOAT32, RKNN_TENSOR_FLOAT16, RKNN_TENSOR_INT8, RKNN_TENSOR_UINT8, RKNN_TENSOR_INT16);
    values!(v, RKNN_TENSOR_UINT16, RKNN_TENSOR_INT32, RKNN_TENSOR_UINT32, RKNN_TENSOR_INT64, RKNN_TENSOR_BOOL);
    values!(v, RKNN_TENSOR_INT4, RKNN_TENSOR_BFLOAT16);
    values!(v, RKNN_TENSOR_QNT_NONE, RKNN_TENSOR_QNT_DFP, RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC);
    values!(v, RKNN_TENSOR_NCHW, RKNN_TENSOR_NHWC, RKNN_TENSOR_NC1HWC2, RKNN_TENSOR_UNDEFINED);
    values!(v, RKNN_NPU_CORE_AUTO, RKNN_NPU_CORE_0, RKNN_NPU_CORE_1, RKNN_NPU_CORE_2, RKNN_NPU_CORE_0_1);
    values!(v, RKNN_NPU_CORE_0_1_2, RKNN_NPU_CORE_ALL, RKNN_TENSOR_MEMORY_FLAGS_FROM_FD);
    v
}

/// librockchip_mpp: `rk_mpi.h` and the headers it and zcpipe include.
fn mpp() -> Items {
    use super::mpp::*;
    use std::ffi::{c_int, c_void};
    let mut v = Items::default();
    types!(v, "MPP_RET" = MppRet, "MppCtxType" = MppCtxType, "MppCodingType" = MppCodingType, "MpiCmd" = MpiCmd);
    types!(v, "MppBufferType" = MppBufferType, "MppBufferMode" = c_int, "MppFrameFormat" = u32);
    types!(v, "MppPortType" = c_int, "MppPollType" = c_int, "MppMetaKey" = u32);
    types!(v, "MppCtx" = MppHandle, "MppParam" = *mut c_void, "MppFrame" = MppHandle, "MppPacket" = MppHandle);
    types!(v, "MppBuffer" = MppHandle, "MppBufferGroup" = MppHandle, "MppTask" = MppHandle);
    types!(v, "RK_U32" = u32, "RK_S32" = i32, "RK_S64" = i64);
    types!(v, "MppMeta" = MppHandle, "MppEncCfg" = MppHandle, "MppEncHeaderMode" = c_int, "MppEncRcMode" = i32);
    types!(v, "MppEncRcDropFrmMode" = u32);
    layout!(v, MppApi as "MppApi" {
        size, version, decode, decode_put_packet, decode_get_frame, encode, encode_put_frame, encode_get_packet,
        isp, isp_put_frame, isp_get_frame, poll, dequeue, enqueue, reset, control, reserv,
    });
    layout!(v, MppBufferInfo as "MppBufferInfo" { type_ as "type", size, ptr, hnd, fd, index });
    for r in (-1100..=0).filter(|r| ret_name(*r) != "unknown MPP_RET") {
        v.value(ret_name(r), r.into());
    }
    values!(v, MPP_CTX_DEC, MPP_CTX_ENC);
    values!(v, MPP_VIDEO_CODING_AVC as "MPP_VIDEO_CodingAVC", MPP_VIDEO_CODING_MJPEG as "MPP_VIDEO_CodingMJPEG");
    values!(v, MPP_VIDEO_CODING_HEVC as "MPP_VIDEO_CodingHEVC");
    values!(v, MPP_SET_INPUT_TIMEOUT, MPP_SET_OUTPUT_TIMEOUT, MPP_DEC_SET_FRAME_INFO, MPP_DEC_SET_EXT_BUF_GROUP);
    values!(v, MPP_DEC_SET_INFO_CHANGE_READY, MPP_DEC_SET_PRESENT_TIME_ORDER, MPP_DEC_SET_PARSER_SPLIT_MODE);
    values!(v, MPP_DEC_SET_PARSER_FAST_MODE, MPP_DEC_SET_OUTPUT_FORMAT, MPP_DEC_SET_DISABLE_ERROR);
    values!(v, MPP_DEC_SET_IMMEDIATE_OUT, MPP_POLL_BLOCK, MPP_POLL_NON_BLOCK, MPP_POLL_MAX);
    values!(v, MPP_BUFFER_INTERNAL, MPP_BUFFER_EXTERNAL, MPP_BUFFER_TYPE_NORMAL, MPP_BUFFER_TYPE_ION);
    values!(v, MPP_BUFFER_TYPE_EXT_DMA, MPP_BUFFER_TYPE_DRM, MPP_BUFFER_TYPE_DMA_HEAP);
    values!(v, MPP_FMT_YUV420SP, MPP_FMT_YUV420SP_10BIT, MPP_FMT_YUV422SP, MPP_FRAME_FMT_MASK, MPP_FRAME_FBC_MASK);
    values!(v, MPP_PORT_INPUT, MPP_PORT_OUTPUT, KEY_INPUT_PACKET, KEY_OUTPUT_FRAME);
    values!(v, MPP_ENC_SET_CFG, MPP_ENC_GET_CFG, MPP_ENC_SET_IDR_FRAME, MPP_ENC_SET_HEADER_MODE, KEY_OUTPUT_INTRA);
    values!(v, MPP_ENC_HEADER_MODE_DEFAULT, MPP_ENC_HEADER_MODE_EACH_IDR, MPP_ENC_RC_DROP_FRM_DISABLED);
    values!(v, MPP_ENC_RC_MODE_VBR, MPP_ENC_RC_MODE_CBR, MPP_ENC_RC_MODE_FIXQP, MPP_ENC_RC_MODE_AVBR);
    v
}

/// One vendor library's check.
struct Lib {
    /// Its name in messages, `$ZCPIPE_ABI_REQUIRE` and the scratch directory.
    name: &'static str,
    /// The variable naming a header directory (wins over the vendored one).
    env: &'static str,
    /// The vendored header directory under `abi/`, for headers whose license allows it.
    vendored: Option<&'static str>,
    /// The headers the probe includes, in order.
    include: &'static [&'static str],
    /// Every header the probe reads (searched in this order for each item's line).
    headers: &'static [&'static str],
    /// The field list under `abi/`.
    list: &'static str,
    items: fn() -> Items,
}

const LIBRGA: Lib = Lib {
    name: "librga",
    env: "ZCPIPE_RGA_HEADER_DIR",
    vendored: Some("vendor/librga/include"),
    include: &["im2d_type.h"],
    headers: &["im2d_type.h", "rga.h", "im2d_version.h"],
    list: "librga.fields",
    items: rga,
};

const LIBRKNNRT: Lib = Lib {
    name: "librknnrt",
    env: "ZCPIPE_RKNN_HEADER_DIR",
    vendored: None,
    include: &["rknn_api.h"],
    headers: &["rknn_api.h"],
    list: "librknnrt.fields",
    items: rknn,
};

const LIBMPP: Lib = Lib {
    name: "librockchip_mpp",
    env: "ZCPIPE_MPP_HEADER_DIR",
    vendored: Some("vendor/mpp/inc"),
    include: &["rk_mpi.h", "mpp_frame.h", "mpp_buffer.h", "mpp_packet.h", "mpp_task.h", "mpp_meta.h"],
    headers: &[
        "rk_type.h",
        "mpp_err.h",
        "rk_mpi.h",
        "rk_mpi_cmd.h",
        "mpp_task.h",
        "mpp_meta.h",
        "mpp_frame.h",
        "mpp_buffer.h",
        "mpp_packet.h",
        "rk_vdec_cmd.h",
        "rk_vdec_cfg.h",
        "rk_venc_cmd.h",
        "rk_venc_cfg.h",
        "rk_venc_ref.h",
        "rk_venc_rc.h",
    ],
    list: "librockchip_mpp.fields",
    items: mpp,
};

/// `abi/` of this crate.
fn abi_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/abi"))
}

/// A line on stderr that shows in `cargo test`'s output (libtest captures `eprintln!`, not
/// writes to the stderr handle).
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Whether `$var` is `all`/`1` or a comma list that names `lib`.
fn env_names(var: &str, lib: &str) -> bool {
    let v = std::env::var(var).unwrap_or_default();
    v.split(',').map(str::trim).any(|w| w == lib || w == "all" || w == "1")
}

/// The header directory to probe, or why there is none.
fn header_dir(lib: &Lib) -> Result<(PathBuf, String), String> {
    if let Some(d) = std::env::var_os(lib.env).filter(|v| !v.is_empty()) {
        return Ok((PathBuf::from(d), format!("${}", lib.env)));
    }
    match lib.vendored.map(|v| abi_dir().join(v)) {
        Some(d) if d.is_dir() => Ok((d, "vendored".into())),
        Some(d) => Err(format!("{} is absent and ${} unset", d.display(), lib.env)),
        None => Err(format!("not vendorable (license) and ${} unset", lib.env)),
    }
}

/// Reads `lib.headers` from `dir`; every one must be there.
fn read_headers(lib: &Lib, dir: &Path) -> Result<Vec<Header>, String> {
    lib.headers
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(dir.join(f)).map_err(|e| format!("{}: {e}", dir.join(f).display()))?;
            Ok(Header { file: f.to_string(), lines: text.lines().map(String::from).collect() })
        })
        .collect()
}

#[test]
fn librga_matches_im2d_type_h() {
    check::run(&LIBRGA);
}

#[test]
fn librknnrt_matches_rknn_api_h() {
    check::run(&LIBRKNNRT);
}

#[test]
fn librockchip_mpp_matches_its_headers() {
    check::run(&LIBMPP);
}

/// The probe's compile-and-read path on the target's own C types (no vendor header): proves
/// the compiler for this target (the cross gcc under qemu-user) and the ELF reader work.
#[test]
fn probe_reads_c_values_for_this_target() {
    let template = std::fs::read_to_string(abi_dir().join("probe.c.in")).expect("abi/probe.c.in");
    let exprs: Vec<String> = ["sizeof(void *)", "_Alignof(int64_t)", "sizeof(size_t)", "-1012", "1 << 26"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let source = probe::render(&template, &[], &exprs);
    match probe::run(&source, &abi_dir(), exprs.len(), "self") {
        probe::Outcome::Values(v, cc) => {
            let rust = [size_of::<*const u8>(), align_of::<i64>(), size_of::<usize>()].map(|n| n as i64);
            assert_eq!(v, [rust[0], rust[1], rust[2], -1012, 1 << 26]);
            say(&format!("sys::abi probe: {cc} builds for this target"));
        }
        probe::Outcome::Skipped(why) if !env_names("ZCPIPE_ABI_REQUIRE", "probe") => {
            say(&format!("sys::abi probe SKIPPED: {why}"))
        }
        probe::Outcome::Skipped(why) | probe::Outcome::Failed(why) => panic!("{why}"),
    }
}

#[test]
fn elf_reader_refuses_what_it_cannot_use() {
    assert!(probe::elf_section(b"not an elf", ".zcabi").is_err());
    let mut elf32 = b"\x7fELF\x01\x01".to_vec();
    elf32.resize(64, 0);
    assert!(probe::elf_section(&elf32, ".zcabi").unwrap_err().contains("64-bit"));
    let mut cut = b"\x7fELF\x02\x01".to_vec();
    cut.resize(40, 0);
    assert!(probe::elf_section(&cut, ".zcabi").is_err());
}

/// A made-up header in the vendor's styles (typedef'd structs, a member in an anonymous union,
/// function pointers, an enum, macros, comments naming members).
fn sample_header() -> Vec<Header> {
    let text = "#define ZZ_MAX 16 /* ZZ_MAX */\n\
        typedef enum {\n    ZZ_A = 1 << 2,  /* ZZ_B */\n    ZZ_B,\n} zz_kind;\n\
        typedef struct zz_s {\n    /** size of it; */\n    int size;\n    union {\n        int alpha;\n\
        \x20       struct { short a0; } bits;\n    };\n    char name[ZZ_MAX];\n    int (*call)(void *size);\n\
        \x20   uint32_t version DEFAULT_INITIALIZER(3);\n} zz_t;\ntypedef uint32_t zz_handle;\n";
    vec![Header { file: "zz.h".into(), lines: text.lines().map(String::from).collect() }]
}

#[test]
fn line_finder_finds_values_types_and_members() {
    let h = sample_header();
    let item = |kind, name: &str| Item { kind, name: name.into(), rust: 0 };
    let line = |kind, name: &str| list::find(&h, &item(kind, name)).map(|(_, l)| l);
    assert_eq!(line(Kind::Value, "ZZ_MAX"), Some(1));
    assert_eq!(line(Kind::Value, "ZZ_A"), Some(3));
    assert_eq!(line(Kind::Value, "ZZ_B"), Some(4), "not the comment on line 3");
    assert_eq!(line(Kind::Size, "zz_kind"), Some(5));
    assert_eq!(line(Kind::Size, "zz_t"), Some(16));
    assert_eq!(line(Kind::Size, "zz_handle"), Some(17));
    assert_eq!(line(Kind::Offset, "zz_t.size"), Some(8), "not the doc comment");
    assert_eq!(line(Kind::Offset, "zz_t.alpha"), Some(10));
    assert_eq!(line(Kind::FieldSize, "zz_t.name"), Some(13));
    assert_eq!(line(Kind::Offset, "zz_t.call"), Some(14));
    assert_eq!(line(Kind::Tail, "zz_t.version"), Some(15));
    assert_eq!(line(Kind::Offset, "zz_t.missing"), None);
    assert_eq!(line(Kind::Value, "ZZ_C"), None);
    assert!(list::names(&h, "zz.h", 13, &item(Kind::Offset, "zz_t.name")));
    assert!(!list::names(&h, "zz.h", 12, &item(Kind::Offset, "zz_t.name")));
    assert!(!list::names(&h, "other.h", 13, &item(Kind::Offset, "zz_t.name")));
}

#[test]
fn field_list_round_trips_and_refuses_bad_lines() {
    let items = vec![
        Item { kind: Kind::Size, name: "zz_t".into(), rust: 8 },
        Item { kind: Kind::Value, name: "ZZ_A".into(), rust: -4 },
    ];
    let comments = vec!["# a comment".to_string()];
    let text = list::render(&comments, &items, &[8, -4], &[("zz.h".into(), 16), ("zz.h".into(), 3)]);
    let l = list::parse(&text).unwrap();
    assert_eq!(l.comments, comments);
    assert_eq!(l.entries[&(Kind::Value, "ZZ_A".into())], list::Entry { value: -4, file: "zz.h".into(), line: 3 });
    let bad_lists = ["size zz_t 8", "width zz_t 8 zz.h:1", "size zz_t eight zz.h:1", "size zz_t 8 zz.h"];
    for bad in bad_lists.into_iter().chain(["size a 1 h:1\nsize a 1 h:2"]) {
        assert!(list::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn compare_reports_every_disagreement() {
    let h = sample_header();
    let items = vec![
        Item { kind: Kind::Offset, name: "zz_t.alpha".into(), rust: 4 },
        Item { kind: Kind::Offset, name: "zz_t.name".into(), rust: 9 },
        Item { kind: Kind::Value, name: "ZZ_B".into(), rust: 5 },
        Item { kind: Kind::Size, name: "zz_handle".into(), rust: 4 },
    ];
    let text = "offset zz_t.alpha 4 zz.h:10\noffset zz_t.name 8 zz.h:13\nvalue ZZ_B 5 zz.h:3\nvalue ZZ_GONE 1 zz.h:1\n";
    let l = list::parse(text).unwrap();
    let (dir, how, cc) = ("zz".into(), "test".into(), "cc".into());
    let p = check::Probed { dir, how, cc, values: vec![4, 8, 6, 4], headers: h };
    let rows = check::compare(&items, &l, Some(&p), true, "zz.fields");
    let problems: Vec<(&str, &str)> = rows.iter().map(|r| (r.check.as_str(), r.problem.as_str())).collect();
    assert_eq!(
        problems,
        [
            ("offset zz_t.name", "Rust != list; Rust != header"),
            (
                "value ZZ_B",
                "Rust != header; list != header (stale list: ZCPIPE_ABI_UPDATE=1); zz.h:3 does not define it"
            ),
            ("size zz_handle", "not in abi/zz.fields"),
            ("value ZZ_GONE", "listed, but not in the Rust table"),
        ]
    );
    let t = check::table(&rows);
    assert!(t.contains("offset zz_t.name") && t.contains("zz.h:13"), "{t}");
    // Without the header, only the list is compared; off LP64, not even that.
    assert_eq!(check::compare(&items, &l, None, true, "zz.fields").len(), 3);
    assert_eq!(check::compare(&items, &l, None, false, "zz.fields").len(), 2);
}
