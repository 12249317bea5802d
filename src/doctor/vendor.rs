//! The vendor section: whether the vendor libraries load (`librga.so`, `librknnrt.so`,
//! opened with `libloading` as the backends open them) and what they say of themselves, the
//! SoC from the device tree (`/proc/device-tree/compatible`, NUL-separated strings, most
//! specific first: Documentation/devicetree/usage-model.rst) and the RKNPU driver's version.

use std::io;
use std::path::Path;

use super::{quietly, FileMode, LibraryReport, NpuReport, Paths, Problem, ServiceNodeReport, SocReport};

/// The file mapped for a library whose file name starts with `stem` (`librga.so`), from
/// /proc/self/maps (proc(5)): where the dynamic linker found it.
fn mapped_path(stem: &str) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| Path::new(p).file_name().is_some_and(|f| f.to_string_lossy().starts_with(stem)))
        .map(str::to_string)
}

/// Loads a library with `dlopen(3)` under each of `names` in turn (`RTLD_LAZY |
/// RTLD_LOCAL`: symbols resolved on first use, none exported to later loads) until one
/// loads, and unloads it; the report says which loaded and from where, or every
/// `dlerror()`. Loading runs the library's initialisers, as using it would.
pub fn check_library(names: &[String]) -> LibraryReport {
    // The report's name is the first plain name (an env-given path comes first but is not
    // the library's name), without its version (`librockchip_mpp.so.1` -> `librockchip_mpp.so`).
    let first = names.iter().find(|n| !n.contains('/')).or(names.first()).cloned().unwrap_or_default();
    let name = match first.find(".so.") {
        Some(i) => first[..i + 3].to_string(),
        None => first,
    };
    let mut r = LibraryReport {
        name,
        loaded: false,
        loaded_as: None,
        path: None,
        error: None,
        version: None,
        version_error: None,
    };
    let mut errors = vec![];
    for n in names {
        match dlopen_check(n) {
            Ok(path) => {
                r.loaded = true;
                r.loaded_as = Some(n.clone());
                r.path = path;
                return r;
            }
            Err(e) => errors.push(e),
        }
    }
    r.error = Some(errors.join("; "));
    r
}

/// `dlopen(name)` then `dlclose`, through `libloading` (`RTLD_LAZY | RTLD_LOCAL`, as
/// [`check_library`] says): `Ok(the mapped file)` or `Err(dlerror())`.
fn dlopen_check(name: &str) -> std::result::Result<Option<String>, String> {
    use libloading::os::unix::{Library, RTLD_LAZY, RTLD_LOCAL};
    if name.contains('\0') {
        return Err(format!("{name:?}: the name contains a NUL byte"));
    }
    // SAFETY: loading a library runs its initialisers, as using it would (that is what the
    // check is for); no symbol is taken from it, so nothing refers to it after the close.
    let lib = match unsafe { Library::open(Some(name), RTLD_LAZY | RTLD_LOCAL) } {
        Ok(lib) => lib,
        Err(libloading::Error::DlOpenUnknown) => return Err(format!("{name}: dlopen failed (no dlerror message)")),
        // `DlOpen`'s text is dlerror(3)'s message.
        Err(e) => return Err(e.to_string()),
    };
    let file =
        Path::new(name).file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_else(|| name.to_string());
    let stem = file.split(".so").next().unwrap_or(&file);
    let path = mapped_path(&format!("{stem}.so"));
    let _ = lib.close();
    Ok(path)
}

/// Splits the device tree's `compatible` property (NUL-separated strings).
pub fn parse_compatible(bytes: &[u8]) -> Vec<String> {
    bytes.split(|&b| b == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect()
}

pub(super) fn soc_section(paths: &Paths) -> SocReport {
    let model = std::fs::read(&paths.model).ok().map(|b| parse_compatible(&b).join(" ")).filter(|s| !s.is_empty());
    match std::fs::read(&paths.compatible) {
        Ok(b) => {
            let compatible = parse_compatible(&b);
            let soc = compatible.last().cloned();
            let error = soc.is_none().then(|| format!("{} is empty", paths.compatible.display()));
            SocReport { compatible, soc, model, error }
        }
        Err(e) => SocReport {
            compatible: vec![],
            soc: None,
            model,
            error: Some(if e.kind() == io::ErrorKind::NotFound {
                format!(
                    "{} does not exist: no device tree (an x86 PC or VM, or a board booted with ACPI)",
                    paths.compatible.display()
                )
            } else {
                format!("{}: {e}", paths.compatible.display())
            }),
        },
    }
}

pub(super) fn npu_section(paths: &Paths) -> NpuReport {
    let mut errors = vec![];
    for p in &paths.npu_version {
        match std::fs::read_to_string(p) {
            Ok(t) => {
                let v = t.lines().next().unwrap_or("").trim().to_string();
                if !v.is_empty() {
                    return NpuReport { version: Some(v), path: Some(p.display().to_string()), error: None };
                }
                errors.push(format!("{}: empty", p.display()));
            }
            Err(e) => errors.push(format!("{}: {e}", p.display())),
        }
    }
    NpuReport { version: None, path: None, error: Some(errors.join("; ")) }
}

/// librga's own description, as `--scaler rga` gets it: a harmless `imcheck_t` probe of the
/// driver first (librga 1.10.3's `querystring` crashes without `/dev/rga`), then
/// `querystring(RGA_VERSION)`.
fn rga_version(lib: &str) -> std::result::Result<String, String> {
    // RgaScaler::open logs the version at info level; the report says it, once.
    let s = quietly(|| zcpipe_scale::rga::RgaScaler::open(Some(Path::new(lib)), zcpipe_scale::rga::RgaCore::Auto))
        .map_err(|e| format!("{e:#}"))?;
    let n = zcpipe_scale::Scaler::name(&s);
    Ok(n.strip_prefix("rga (").and_then(|n| n.strip_suffix(')')).unwrap_or(&n).to_string())
}

/// The bundled model for `soc` (`rockchip,rk3588` -> `yolox_nano_416_rk3588.rknn`; any
/// other or none: the RK3588 one, which the fake runtime and the SDK query accept).
fn bundled_rknn_model(soc: Option<&str>) -> &'static str {
    match soc.and_then(|s| s.strip_prefix("rockchip,")) {
        Some("rk3566" | "rk3568") => "models/yolox_nano_416_rk3566_rk3568.rknn",
        Some("rk3576") => "models/yolox_nano_416_rk3576.rknn",
        _ => "models/yolox_nano_416_rk3588.rknn",
    }
}

/// librknnrt's API and driver versions (rknn_api.h `RKNN_QUERY_SDK_VERSION`), which need a
/// context: the bundled model for this SoC is loaded (`rknn_init`), queried and released.
fn rknn_version(lib: &str, soc: Option<&str>) -> std::result::Result<String, String> {
    use zcpipe_sys::rknn as sys;
    let rknn = sys::Rknn::open_path(lib.into(), false).map_err(|e| format!("{e:#}"))?;
    let rel = bundled_rknn_model(soc);
    let model = zcpipe_core::data::resolve_data_path(Path::new(rel));
    let bytes = std::fs::read(&model).map_err(|e| format!("the SDK version needs a model to query and {} is unreadable ({e}); copy models/ next to zcpipe or set ZCPIPE_DATA_DIR", model.display()))?;
    let ctx = rknn.init(&bytes, 0).map_err(|e| format!("rknn_init of {}: {e}", model.display()))?;
    let mut ver = sys::RknnSdkVersion::default();
    let q = rknn.query(ctx, sys::RKNN_QUERY_SDK_VERSION, &mut ver);
    let _ = rknn.destroy(ctx);
    q.map_err(|e| format!("RKNN_QUERY_SDK_VERSION: {e}"))?;
    Ok(format!(
        "api {}, driver {} (queried with {})",
        sys::c_text(&ver.api_version),
        sys::c_text(&ver.drv_version),
        rel
    ))
}

/// librockchip_mpp's own version string (`get_mpp_version`, exported but declared only in
/// MPP's internal `mpp_info.h`; a library without it still loads).
fn mpp_version(lib: &str) -> std::result::Result<String, String> {
    let mpp = zcpipe_sys::mpp::Libmpp::open(Some(Path::new(lib))).map_err(|e| format!("{e:#}"))?;
    Ok(mpp.version().unwrap_or_else(|| "none given (this build exports no get_mpp_version)".into()))
}

/// MPP's service node: present, its mode, and whether this user opens it read-write (what
/// librockchip_mpp does for every decoder). On a Rockchip board a missing or closed node is
/// a problem (hardware decoding is unavailable); elsewhere its absence is expected.
pub(super) fn mpp_service_section(paths: &Paths, rockchip: bool, problems: &mut Vec<Problem>) -> ServiceNodeReport {
    let path = &paths.mpp_service;
    let about = path.display().to_string();
    let mut r = ServiceNodeReport {
        path: about.clone(),
        present: path.exists(),
        file: FileMode::of(path),
        openable: false,
        error: None,
    };
    if !r.present {
        if rockchip {
            problems.push(Problem {
                what: format!("{about} does not exist: librockchip_mpp has no way to the video decoders, so hardware decoding is unavailable"),
                fix: "use the board's Rockchip BSP kernel (its rk_vcodec driver, CONFIG_ROCKCHIP_MPP_SERVICE, makes the node); mainline kernels decode through V4L2 stateless drivers instead, which zcpipe does not use".into(),
                about,
            });
        }
        return r;
    }
    match super::heaps::open_rw(path) {
        Ok(_) => r.openable = true,
        Err(e) => {
            r.error = Some(e.to_string());
            problems.push(Problem {
                what: format!(
                    "{about}: cannot open it read-write: {e} ({}), so librockchip_mpp cannot decode",
                    r.file.as_ref().map(FileMode::describe).unwrap_or_default()
                ),
                fix: if e.kind() == io::ErrorKind::PermissionDenied {
                    super::access::access_fix(path, r.file.as_ref())
                } else {
                    "check `dmesg | grep -i mpp`".into()
                },
                about,
            });
        }
    }
    r
}

/// What zcpipe uses each vendor library for.
pub(super) fn library_use(name: &str) -> &'static str {
    match name {
        "librga.so" => "the RGA scaler (--scaler rga)",
        "librknnrt.so" => "inference on the NPU (the RKNN backend)",
        "librockchip_mpp.so" => "MPP hardware decoding of H.264, H.265 and MJPEG into the capture pool (--decoder mpp)",
        _ => "a vendor backend",
    }
}

/// Where each vendor library comes from, for the fix.
fn library_fix(name: &str) -> String {
    match name {
        "librga.so" => "install librga (Rockchip's RGA library: the librga2 package of the board's image, or build github.com/airockchip/librga into /usr/lib), then `sudo ldconfig`".into(),
        "librknnrt.so" => "install the RKNN runtime: librknnrt.so from github.com/airockchip/rknn-toolkit2 (rknpu2/runtime/Linux/librknn_api/aarch64/), matching the NPU driver, into /usr/lib, then `sudo ldconfig`".into(),
        "librockchip_mpp.so" => "install Rockchip's MPP: the librockchip-mpp1 package of the board's image (or build github.com/rockchip-linux/mpp into /usr/lib), then `sudo ldconfig`; or set ZCPIPE_LIBMPP".into(),
        _ => format!("install {name} where the dynamic linker finds it (/usr/lib, or LD_LIBRARY_PATH), then `sudo ldconfig`"),
    }
}

pub(super) fn vendor_section(paths: &Paths, problems: &mut Vec<Problem>) -> (Vec<LibraryReport>, SocReport, NpuReport) {
    let mut libs: Vec<LibraryReport> = paths.libraries.iter().map(|n| check_library(n)).collect();
    let soc = soc_section(paths);
    for l in libs.iter_mut().filter(|l| l.loaded) {
        let v = match l.name.as_str() {
            "librga.so" => rga_version(l.loaded_as.as_deref().unwrap_or("librga.so")),
            "librknnrt.so" => rknn_version(l.loaded_as.as_deref().unwrap_or("librknnrt.so"), soc.soc.as_deref()),
            "librockchip_mpp.so" => {
                mpp_version(l.path.as_deref().or(l.loaded_as.as_deref()).unwrap_or("librockchip_mpp.so"))
            }
            _ => continue,
        };
        match v {
            Ok(v) => l.version = Some(v),
            Err(e) => {
                problems.push(Problem {
                    what: format!("{} loads but does not answer: {e}", l.name),
                    fix: match l.name.as_str() {
                        "librga.so" => "check that the RGA driver is loaded (dmesg | grep -i rga) and /dev/rga is readable and writable (udev/99-zcpipe.rules, group zcpipe)".into(),
                        "librockchip_mpp.so" => "it is not a librockchip_mpp zcpipe can use (its API table or symbols differ): install Rockchip's MPP from the board's image, or point ZCPIPE_LIBMPP at a current build".into(),
                        _ => "check the NPU driver (dmesg | grep -i rknpu; its version file above) and that its node is readable and writable (udev/99-zcpipe.rules); librknnrt must be at least as new as the rknn-toolkit2 that built the model (2.5.0)".into(),
                    },
                    about: l.name.clone(),
                });
                l.version_error = Some(e);
            }
        }
    }
    let npu = npu_section(paths);
    if soc.is_rockchip() {
        for l in libs.iter().filter(|l| !l.loaded) {
            problems.push(Problem {
                what: format!(
                    "{} does not load on this Rockchip board ({}), so {} is unavailable: {}",
                    l.name,
                    soc.soc.as_deref().unwrap_or("?"),
                    library_use(&l.name),
                    l.error.as_deref().unwrap_or("")
                ),
                fix: library_fix(&l.name),
                about: l.name.clone(),
            });
        }
    }
    (libs, soc, npu)
}
