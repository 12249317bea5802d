//! The DRM section: every primary node in `/dev/dri` ([`card_nodes`]) with its driver,
//! whether it makes dumb buffers (`DRM_CAP_DUMB_BUFFER`) and takes atomic commits (the
//! `DRM_CLIENT_CAP_ATOMIC` client cap accepted), its connectors (writeback ones too, shown
//! with `DRM_CLIENT_CAP_WRITEBACK_CONNECTORS`), CRTCs and planes (every plane, with
//! `DRM_CLIENT_CAP_UNIVERSAL_PLANES`: type from its `type` property, CRTCs from
//! `possible_crtcs`, formats as fourccs); then whether `--display` and `--heap drm` can work
//! here, and the fix when not. Contract: include/uapi/drm/drm.h and drm_mode.h, through the
//! `drm` crate; Documentation/gpu/drm-kms.rst ("Plane Abstraction", "Writeback Connectors").
//!
//! Only looks: no mode is set, nothing is allocated, and the DRM master role that opening a
//! card may give is handed back at once ([`Card::open`]); whether the open got it is how
//! doctor tells that another process (a desktop session) holds the display.

use std::io;
use std::path::Path;

use drm::control::Device as _;
use drm::Device as _;

use super::access::{access_fix, holders};
use super::{
    DrmCardReport, DrmConnectorReport, DrmCrtcReport, DrmModeReport, DrmPlaneReport, DrmReport, FileMode, Paths,
    Problem, Verdict,
};
use zcpipe_sys::drm::{card_nodes, Card};
use zcpipe_sys::v4l2::fourcc_chars;

/// The fix when there is no DRM card at all.
pub(super) const NO_CARD_FIX: &str =
    "load the board's display driver (rockchipdrm on Rockchip boards, with the VOP and HDMI nodes enabled in the device tree); on a PC, vkms (sudo modprobe vkms) gives a virtual one";

pub(super) fn drm_section(paths: &Paths, problems: &mut Vec<Problem>) -> DrmReport {
    let dir = &paths.dri_dir;
    let cards: Vec<DrmCardReport> = card_nodes(dir).iter().map(|p| probe_card(p)).collect();
    for c in &cards {
        if let Some(e) = &c.error {
            let path = Path::new(&c.path);
            problems.push(Problem {
                what: format!(
                    "{}: cannot open it: {e} ({})",
                    c.path,
                    c.file.as_ref().map(FileMode::describe).unwrap_or_default()
                ),
                fix: if c.permission_denied { access_fix(path, c.file.as_ref()) } else { "check `dmesg`".into() },
                about: c.path.clone(),
            });
        }
    }
    let dir_s = dir.display().to_string();
    let display = display_verdict(&dir_s, &cards, |p| access_fix(Path::new(p), FileMode::of(Path::new(p)).as_ref()));
    let heap_drm = heap_verdict(&dir_s, &cards, |p| access_fix(Path::new(p), FileMode::of(Path::new(p)).as_ref()));
    DrmReport { dir: dir_s, cards, display, heap_drm }
}

/// Everything one card says of itself; an open that fails is in `error`.
fn probe_card(path: &Path) -> DrmCardReport {
    let mut r = DrmCardReport {
        path: path.display().to_string(),
        file: FileMode::of(path),
        error: None,
        permission_denied: false,
        driver: None,
        dumb_buffers: false,
        atomic: false,
        master_free: false,
        holders: vec![],
        connectors: vec![],
        crtcs: vec![],
        planes: vec![],
        kms_error: None,
    };
    let card = match Card::open(path) {
        Ok(c) => c,
        Err(e) => {
            r.permission_denied = e.kind() == io::ErrorKind::PermissionDenied;
            r.error = Some(zcpipe_sys::errno_words(&e));
            return r;
        }
    };
    r.master_free = card.was_master();
    if !r.master_free {
        r.holders = holders(path, Some(std::process::id()));
    }
    r.driver = card.driver_name().ok();
    r.dumb_buffers = card.has_dumb_buffers().unwrap_or(false);
    let _ = card.set_client_capability(drm::ClientCapability::UniversalPlanes, true);
    r.atomic = card.set_client_capability(drm::ClientCapability::Atomic, true).is_ok();
    if r.atomic {
        let _ = card.set_client_capability(drm::ClientCapability::WritebackConnectors, true);
    }
    if let Err(e) = kms(&card, &mut r) {
        r.kms_error = Some(zcpipe_sys::errno_words(&e));
    }
    r
}

/// Connectors, CRTCs and planes of `card` into `r`.
fn kms(card: &Card, r: &mut DrmCardReport) -> io::Result<()> {
    let res = card.resource_handles()?;
    for (index, h) in res.crtcs().iter().enumerate() {
        let info = card.get_crtc(*h)?;
        let mode = info.mode().map(|m| mode_report(&m).label());
        r.crtcs.push(DrmCrtcReport { id: u32::from(*h), index: index as u32, mode });
    }
    for h in res.connectors() {
        let info = card.get_connector(*h, false)?;
        let kind = info.interface();
        let state = match info.state() {
            drm::control::connector::State::Connected => "connected",
            drm::control::connector::State::Disconnected => "disconnected",
            drm::control::connector::State::Unknown => "unknown",
        };
        r.connectors.push(DrmConnectorReport {
            id: u32::from(*h),
            name: format!("{}-{}", kind.as_str(), info.interface_id()),
            state: state.into(),
            writeback: kind == drm::control::connector::Interface::Writeback,
            modes: info.modes().iter().map(mode_report).collect(),
        });
    }
    for h in card.plane_handles()? {
        let info = card.get_plane(h)?;
        let crtcs = res.filter_crtcs(info.possible_crtcs()).into_iter().map(u32::from).collect();
        r.planes.push(DrmPlaneReport {
            id: u32::from(h),
            kind: plane_type(card, h),
            crtcs,
            formats: info.formats().iter().map(|f| fourcc_chars(*f)).collect(),
        });
    }
    Ok(())
}

fn mode_report(m: &drm::control::Mode) -> DrmModeReport {
    let (w, h) = m.size();
    DrmModeReport {
        name: m.name().to_string_lossy().into_owned(),
        width: u32::from(w),
        height: u32::from(h),
        refresh_hz: m.vrefresh(),
        preferred: m.mode_type().contains(drm::control::ModeTypeFlags::PREFERRED),
    }
}

/// The plane's `type` property as its enum name in lower case (`primary`, `overlay`,
/// `cursor`; drm_plane.c, "type"), or `unknown`.
fn plane_type(card: &Card, h: drm::control::plane::Handle) -> String {
    let Ok(props) = card.get_properties(h) else { return "unknown".into() };
    for (ph, raw) in props.iter() {
        let Ok(info) = card.get_property(*ph) else { continue };
        if info.name().to_bytes() != b"type" {
            continue;
        }
        if let drm::control::property::ValueType::Enum(e) = info.value_type() {
            if let Some(v) = e.get_value_from_raw_value(*raw) {
                return v.name().to_string_lossy().to_lowercase();
            }
        }
    }
    "unknown".into()
}

/// Whether `--display` can show frames here: a card that opens, has a CRTC, a primary plane
/// and a connected (non-writeback) connector with modes, and whose DRM master role is free.
/// The first card that passes is named; else the reason of the card that got furthest, with
/// its fix (`fix_for_denied(path)` for a card this user may not open).
pub(super) fn display_verdict(dir: &str, cards: &[DrmCardReport], fix_for_denied: impl Fn(&str) -> String) -> Verdict {
    if cards.is_empty() {
        return Verdict::cannot(format!("no DRM card in {dir}"), NO_CARD_FIX);
    }
    let mut best: Option<(u8, Verdict)> = None;
    let mut keep = |rank: u8, v: Verdict| {
        if best.as_ref().is_none_or(|(r, _)| rank > *r) {
            best = Some((rank, v));
        }
    };
    for c in cards {
        let name = c.label();
        if let Some(e) = &c.error {
            let fix = if c.permission_denied { fix_for_denied(&c.path) } else { "check `dmesg`".into() };
            keep(0, Verdict::cannot(format!("{}: cannot open it: {e}", c.path), fix));
            continue;
        }
        let connected: Vec<&DrmConnectorReport> =
            c.connectors.iter().filter(|k| !k.writeback && k.state == "connected" && !k.modes.is_empty()).collect();
        let primary = c.planes.iter().any(|p| p.kind == "primary");
        if c.crtcs.is_empty() || !primary {
            keep(
                1,
                Verdict::cannot(
                    format!(
                        "{name}: no CRTC or primary plane to show a picture with{}",
                        c.kms_error.as_ref().map(|e| format!(" ({e})")).unwrap_or_default()
                    ),
                    "check `dmesg` for the display driver's errors",
                ),
            );
            continue;
        }
        let Some(k) = connected.first() else {
            let list: Vec<String> = c
                .connectors
                .iter()
                .map(|k| format!("{} {}{}", k.name, k.state, if k.writeback { " (writeback)" } else { "" }))
                .collect();
            let list = if list.is_empty() { "none".to_string() } else { list.join(", ") };
            keep(
                2,
                Verdict::cannot(
                    format!("{name}: no connected connector with modes (connectors: {list})"),
                    "plug a display in (HDMI, DP) and check its cable; writeback connectors cannot show a picture",
                ),
            );
            continue;
        };
        if !c.master_free {
            let who = if c.holders.is_empty() { "another process".to_string() } else { c.holders.join(", ") };
            keep(
                3,
                Verdict::cannot(
                    format!("{name}: another process is the DRM master ({who} has it open), so zcpipe cannot set modes"),
                    "stop the desktop session or display manager on it (sudo systemctl stop display-manager) or the other --display, or run zcpipe from a text console",
                ),
            );
            continue;
        }
        let mode = k.modes.iter().find(|m| m.preferred).unwrap_or(&k.modes[0]);
        return Verdict::can(format!(
            "{name}: {} connected, preferred mode {}; {} CRTC(s){}",
            k.name,
            mode.label(),
            c.crtcs.len(),
            if c.atomic { ", atomic" } else { ", legacy modesetting" }
        ));
    }
    best.map(|(_, v)| v).unwrap_or_else(|| Verdict::cannot(format!("no usable DRM card in {dir}"), NO_CARD_FIX))
}

/// Whether `--heap drm` can work: the same rule as [`open_drm`](zcpipe_core::dmabuf::open_drm)
/// (the first card that opens and makes dumb buffers), from the reports.
pub(super) fn heap_verdict(dir: &str, cards: &[DrmCardReport], fix_for_denied: impl Fn(&str) -> String) -> Verdict {
    if cards.is_empty() {
        return Verdict::cannot(format!("no DRM card in {dir}"), format!("{NO_CARD_FIX}; or use another --heap"));
    }
    if let Some(c) = cards.iter().find(|c| c.error.is_none() && c.dumb_buffers) {
        return Verdict::can(format!("drm dumb buffers of {}", c.label()));
    }
    let why: Vec<String> = cards
        .iter()
        .map(|c| match &c.error {
            Some(e) => format!("{}: {e}", c.path),
            None => format!("{}: no dumb buffers (DRM_CAP_DUMB_BUFFER is 0)", c.label()),
        })
        .collect();
    let fix = match cards.iter().find(|c| c.permission_denied) {
        Some(c) => fix_for_denied(&c.path),
        None => "use another --heap (a render-only GPU makes no dumb buffers)".into(),
    };
    Verdict::cannot(format!("no DRM card with dumb buffers in {dir}: {}", why.join("; ")), fix)
}
