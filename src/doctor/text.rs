//! The report as text: one section per item, each problem as a `problem:` line and its
//! `fix:` line under the item it concerns, and a count at the end.

use super::nodes::fmt_fps;
use super::vendor::library_use;
use super::{DrmModeReport, DrmReport, FileMode, Problem, QueueReport, Report, Role, Sizes, Verdict};
use zcpipe_capture::v4l2::PREFERRED;
use zcpipe_sys::v4l2::format_name;

/// Sizes in one line: `320x180 (1-60 fps), 640x480 (30 fps), ... (12 sizes)`, or a range.
pub fn sizes_text(s: &Sizes) -> String {
    const SHOW: usize = 8;
    match s {
        Sizes::Discrete { sizes, truncated } => {
            if sizes.is_empty() {
                return "no sizes".into();
            }
            let mut v: Vec<String> = sizes
                .iter()
                .take(SHOW)
                .map(|z| match z.fps.as_slice() {
                    [] => format!("{}x{}", z.width, z.height),
                    [one] => format!("{}x{} ({} fps)", z.width, z.height, fmt_fps(*one)),
                    [lo, .., hi] => format!("{}x{} ({}-{} fps)", z.width, z.height, fmt_fps(*lo), fmt_fps(*hi)),
                })
                .collect();
            if sizes.len() > SHOW || *truncated {
                v.push(format!("... ({}{} sizes)", sizes.len(), if *truncated { "+" } else { "" }));
            }
            v.join(", ")
        }
        Sizes::Stepwise { min, max, step, continuous } => {
            if *continuous || (step[0] <= 1 && step[1] <= 1) {
                format!("any size from {}x{} to {}x{}", min[0], min[1], max[0], max[1])
            } else {
                format!("{}x{} to {}x{} in steps of {}x{}", min[0], min[1], max[0], max[1], step[0], step[1])
            }
        }
        Sizes::None { reason } => format!("sizes not enumerated ({reason})"),
    }
}

/// Words of `items` joined by ", " and wrapped at about 100 columns after `indent`.
pub(super) fn wrapped(items: &[String], indent: &str) -> String {
    let mut out = String::new();
    let mut col = 0;
    for (i, it) in items.iter().enumerate() {
        let piece = if i + 1 < items.len() { format!("{it}, ") } else { it.clone() };
        if col > 0 && col + piece.len() > 100 {
            out.truncate(out.trim_end().len());
            out.push('\n');
            out.push_str(indent);
            col = indent.len();
        }
        out.push_str(&piece);
        col += piece.len();
    }
    out.trim_end().to_string()
}

fn push_problems(out: &mut String, problems: &[Problem], about: &str, done: &mut [bool]) {
    for (i, p) in problems.iter().enumerate() {
        if !done[i] && p.about == about {
            done[i] = true;
            out.push_str(&format!("problem: {}\nfix: {}\n", p.what, p.fix));
        }
    }
}

fn queue_text(out: &mut String, role: Role, q: &QueueReport) {
    let title = match (role, q.queue) {
        (Role::Mem2mem | Role::Mem2memMplane, "output") => "OUTPUT queue (frames going in)",
        (Role::Mem2mem | Role::Mem2memMplane, _) => "CAPTURE queue (frames coming out)",
        _ => "capture formats",
    };
    out.push_str(&format!("    {title}: {} format(s)", q.formats.len()));
    if let Some(e) = &q.error {
        out.push_str(&format!(" (enumeration stopped: {e})"));
    }
    out.push('\n');
    // Long lists (vivid has about 70): zcpipe's formats one per line, the others by name.
    let compact = q.formats.len() > 12;
    let mut others = vec![];
    for f in &q.formats {
        if compact && !f.zcpipe {
            others.push(f.name.clone());
            continue;
        }
        let name = if f.name != f.fourcc { format!("{} ({})", f.name, f.fourcc) } else { f.name.clone() };
        let mut flags = String::new();
        if f.zcpipe {
            flags.push_str(" [zcpipe]");
        }
        if f.compressed {
            flags.push_str(" [compressed]");
        }
        if f.emulated {
            flags.push_str(" [emulated]");
        }
        out.push_str(&format!("      {name}: \"{}\"{flags}: {}\n", f.description, sizes_text(&f.sizes)));
    }
    if !others.is_empty() {
        out.push_str(&format!(
            "      {} more, zcpipe does not read them: {}\n",
            others.len(),
            wrapped(&others, "        ")
        ));
    }
}

/// Modes in one line, the preferred one marked: `1024x768@60 (preferred), 1920x1080@60, ...
/// (34 modes)`.
pub(super) fn modes_text(modes: &[DrmModeReport]) -> String {
    const SHOW: usize = 6;
    if modes.is_empty() {
        return "no modes".into();
    }
    let mut v: Vec<String> = modes
        .iter()
        .take(SHOW)
        .map(|m| if m.preferred { format!("{} (preferred)", m.label()) } else { m.label() })
        .collect();
    if let Some(p) = modes.iter().skip(SHOW).find(|m| m.preferred) {
        v.push(format!("{} (preferred)", p.label()));
    }
    if modes.len() > SHOW {
        v.push(format!("... ({} modes)", modes.len()));
    }
    v.join(", ")
}

/// A verdict line: `  --display: can work: ...` or `  --display: cannot: ...` and its `fix:`.
pub(super) fn verdict_text(what: &str, v: &Verdict) -> String {
    if v.can_work {
        format!("  {what}: can work: {}\n", v.why)
    } else {
        format!("  {what}: cannot: {}\n    fix: {}\n", v.why, v.fix.as_deref().unwrap_or("?"))
    }
}

/// The DRM section: per card its driver and abilities, connectors, CRTCs and planes; then
/// the `--display` and `--heap drm` verdicts.
pub(super) fn drm_text(out: &mut String, d: &DrmReport, problems: &[Problem], done: &mut [bool]) {
    out.push_str(&format!("\n== DRM cards ({}/card*): {} ==\n", d.dir, d.cards.len()));
    if d.cards.is_empty() {
        out.push_str(&format!("  no DRM devices (no {}/card*): the kernel has no display driver loaded\n", d.dir));
    }
    for c in &d.cards {
        let mode = c.file.as_ref().map(FileMode::describe).unwrap_or_else(|| "mode unknown".into());
        if let Some(e) = &c.error {
            out.push_str(&format!("  {}: {mode}: cannot open: {e}\n", c.path));
            push_problems(out, problems, &c.path, done);
            continue;
        }
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        let master = if c.master_free {
            "free".to_string()
        } else if c.holders.is_empty() {
            "held by another process".to_string()
        } else {
            format!("held by another process ({})", c.holders.join(", "))
        };
        out.push_str(&format!(
            "  {}: driver {}, {mode}; dumb buffers: {}, atomic: {}, DRM master: {master}\n",
            c.path,
            c.driver.as_deref().unwrap_or("?"),
            yes_no(c.dumb_buffers),
            yes_no(c.atomic)
        ));
        if let Some(e) = &c.kms_error {
            out.push_str(&format!("    no KMS resources: {e}\n"));
        }
        for k in &c.connectors {
            let wb = if k.writeback { " (writeback: writes the picture to memory)" } else { "" };
            let modes = if k.modes.is_empty() { String::new() } else { format!(": {}", modes_text(&k.modes)) };
            out.push_str(&format!("    connector {} (id {}): {}{wb}{modes}\n", k.name, k.id, k.state));
        }
        for k in &c.crtcs {
            let m = k.mode.as_ref().map(|m| format!("active, {m}")).unwrap_or_else(|| "inactive".into());
            out.push_str(&format!("    CRTC {} (index {}): {m}\n", k.id, k.index));
        }
        for p in &c.planes {
            let crtcs: Vec<String> = p.crtcs.iter().map(|c| c.to_string()).collect();
            let head = format!("    plane {} {} (CRTCs {}): ", p.id, p.kind, crtcs.join(","));
            let indent = " ".repeat(8);
            out.push_str(&format!("{head}{} format(s): {}\n", p.formats.len(), wrapped(&p.formats, &indent)));
        }
        push_problems(out, problems, &c.path, done);
    }
    out.push_str(&verdict_text("--display", &d.display));
    out.push_str(&verdict_text("--heap drm", &d.heap_drm));
}

/// The report as text: one section per item, `problem:`/`fix:` line pairs under the item
/// they concern, and a count at the end.
pub fn text(r: &Report) -> String {
    let mut out = String::new();
    let mut done = vec![false; r.problems.len()];
    out.push_str(&format!(
        "zcpipe doctor {}: kernel {}, user {} (uid {}, groups {})\n",
        r.zcpipe,
        r.kernel,
        r.user.name,
        r.user.uid,
        r.user.groups.join(",")
    ));

    nodes_text(&mut out, r, &mut done);

    heaps_text(&mut out, r, &mut done);

    udmabuf_text(&mut out, r, &mut done);

    drm_text(&mut out, &r.drm, &r.problems, &mut done);

    libraries_text(&mut out, r, &mut done);

    // Anything not printed under its item (should not happen) goes here.
    for (i, p) in r.problems.iter().enumerate() {
        if !done[i] {
            out.push_str(&format!("problem: {}\nfix: {}\n", p.what, p.fix));
        }
    }
    out.push_str(&match r.problems.len() {
        0 => "\nno problems found\n".to_string(),
        1 => "\n1 problem found (its fix is under it)\n".to_string(),
        n => format!("\n{n} problems found (each fix is under its problem)\n"),
    });
    out.push_str("\n== the plan `zcpipe run` would use (no flags given) ==\n");
    match (&r.plan, &r.plan_error) {
        (Some(p), _) => out.push_str(&p.text()),
        (None, Some(e)) => out.push_str(&format!("no plan: {e}\n")),
        (None, None) => out.push_str("not made\n"),
    }
    out
}

/// The V4L2 video nodes (`/dev/video*`): each node's driver, caps, role and queues.
fn nodes_text(out: &mut String, r: &Report, done: &mut [bool]) {
    out.push_str(&format!("\n== V4L2 video nodes (/dev/video*): {} ==\n", r.nodes.len()));
    out.push_str(&format!(
        "  [zcpipe] marks the pixel formats zcpipe reads ({})\n",
        PREFERRED.map(format_name).join(", ")
    ));
    for n in &r.nodes {
        let mode = n.file.as_ref().map(FileMode::describe).unwrap_or_else(|| "mode unknown".into());
        match &n.error {
            Some(e) => out.push_str(&format!("  {}: {mode}: cannot open: {e}\n", n.path)),
            None => {
                out.push_str(&format!(
                    "  {}: driver {}, card \"{}\", bus {}, {mode}\n",
                    n.path, n.driver, n.card, n.bus_info
                ));
                out.push_str(&format!("    caps: {}\n", n.caps_names));
                let usage = match (&n.usage, n.role) {
                    (Some(u), Role::Mem2mem | Role::Mem2memMplane) => format!("; zcpipe can scale on it: {u}"),
                    (Some(u), _) => format!("; zcpipe can capture from it: {u}"),
                    (None, Role::Capture | Role::CaptureMplane | Role::Mem2mem | Role::Mem2memMplane) => {
                        "; no streaming I/O, so zcpipe cannot use it".into()
                    }
                    (None, _) => String::new(),
                };
                out.push_str(&format!("    role: {}{usage}\n", n.role.describe()));
                for q in &n.queues {
                    queue_text(out, n.role, q);
                }
            }
        }
        push_problems(out, &r.problems, &n.path, done);
    }
    if r.nodes.is_empty() {
        out.push_str("  none\n");
    }
    push_problems(out, &r.problems, "/dev/video*", done);
}

/// The dma-buf heaps: each heap's access and the `--heap` choice that takes it, and `--heap auto`.
fn heaps_text(out: &mut String, r: &Report, done: &mut [bool]) {
    let heap_dir = &r.heap_dir;
    out.push_str(&format!("\n== dma-buf heaps ({heap_dir}): {} ==\n", r.heaps.len()));
    for h in &r.heaps {
        let mode = h.file.as_ref().map(FileMode::describe).unwrap_or_else(|| "mode unknown".into());
        let access = match (h.openable, h.read_write) {
            (true, true) => "opens read-write".to_string(),
            (true, false) => "opens read-only (enough: zcpipe allocates through a read-only fd)".to_string(),
            (false, _) => format!("cannot open: {}", h.error.as_deref().unwrap_or("?")),
        };
        let used = match (&h.choice, h.used_by_choice) {
            (Some(c), true) => format!("--heap {c}"),
            (Some(c), false) => {
                let first =
                    r.heap_choices.iter().find(|x| &x.choice == c).and_then(|x| x.heap.clone()).unwrap_or_default();
                format!("a {c} heap, but --heap {c} takes {first} first")
            }
            (None, _) => "no --heap choice uses this name".into(),
        };
        out.push_str(&format!("  {}: {mode}, {access}; {used}\n", h.path));
        push_problems(out, &r.problems, &h.path, done);
    }
    if r.heaps.is_empty() {
        out.push_str("  none\n");
    }
    for c in r.heap_choices.iter().filter(|c| c.heap.is_none()) {
        out.push_str(&format!("  --heap {}: no heap (looks for {})\n", c.choice, c.looks_for.join(", ")));
    }
    push_problems(out, &r.problems, heap_dir, done);
    match (&r.heap_auto.allocator, &r.heap_auto.error) {
        (Some(a), _) if r.heap_auto.dma_buf => out.push_str(&format!("  --heap auto uses: {a}\n")),
        (Some(a), _) => out.push_str(&format!("  --heap auto uses: {a} (not dma-bufs: no device can import them)\n")),
        (None, Some(e)) => out.push_str(&format!("  --heap auto fails: {e}\n")),
        (None, None) => {}
    }
}

/// udmabuf: present (its access and size limit) or absent.
fn udmabuf_text(out: &mut String, r: &Report, done: &mut [bool]) {
    let u = &r.udmabuf;
    out.push_str(&format!("\n== udmabuf ({}) ==\n", u.path));
    if u.present {
        let mode = u.file.as_ref().map(FileMode::describe).unwrap_or_else(|| "mode unknown".into());
        let access = if u.openable {
            "opens read-write".to_string()
        } else {
            format!("cannot open: {}", u.error.as_deref().unwrap_or("?"))
        };
        let limit = u.size_limit_mb.map(|m| format!("; buffers up to {m} MiB (size_limit_mb)")).unwrap_or_default();
        out.push_str(&format!("  present, {mode}, {access}{limit}; --heap udmabuf\n"));
    } else {
        out.push_str(
            "  absent (only --heap udmabuf, or --heap auto without a heap, uses it; sudo modprobe udmabuf loads it)\n",
        );
    }
    push_problems(out, &r.problems, &u.path, done);
}

/// The vendor libraries, MPP's service node, the SoC and the NPU driver.
fn libraries_text(out: &mut String, r: &Report, done: &mut [bool]) {
    out.push_str("\n== vendor libraries ==\n");
    for l in &r.libraries {
        let used = library_use(&l.name);
        match (l.loaded, &l.loaded_as, &l.path) {
            (true, Some(n), Some(p)) => out.push_str(&format!("  {}: loads as {n} ({p}): {used} can run\n", l.name)),
            (true, _, _) => out.push_str(&format!("  {}: loads: {used} can run\n", l.name)),
            (false, _, _) => {
                let note = if r.soc.is_rockchip() {
                    String::new()
                } else {
                    format!("; only Rockchip boards have it, for {used}")
                };
                out.push_str(&format!("  {}: does not load ({}){note}\n", l.name, l.error.as_deref().unwrap_or("?")))
            }
        }
        if let Some(v) = &l.version {
            out.push_str(&format!("    version: {v}\n"));
        }
        if let Some(e) = &l.version_error {
            out.push_str(&format!("    version: unknown: {e}\n"));
        }
        push_problems(out, &r.problems, &l.name, done);
    }
    let m = &r.mpp_service;
    match (&m.file, m.openable, &m.error) {
        (_, _, _) if !m.present => {
            out.push_str(&format!("  {}: absent (MPP's service node: only Rockchip BSP kernels have it)\n", m.path))
        }
        (f, true, _) => out.push_str(&format!(
            "  {}: {}, opens read-write: librockchip_mpp can reach the decoders\n",
            m.path,
            f.as_ref().map(FileMode::describe).unwrap_or_default()
        )),
        (f, false, e) => out.push_str(&format!(
            "  {}: {}, does not open ({})\n",
            m.path,
            f.as_ref().map(FileMode::describe).unwrap_or_default(),
            e.as_deref().unwrap_or("?")
        )),
    }
    push_problems(out, &r.problems, &m.path, done);
    match (&r.soc.soc, &r.soc.error) {
        (Some(s), _) => {
            let model = r.soc.model.as_ref().map(|m| format!("board \"{m}\", ")).unwrap_or_default();
            out.push_str(&format!("  SoC: {s} ({model}compatible: {})\n", r.soc.compatible.join(", ")));
        }
        (None, e) => out.push_str(&format!("  SoC: unknown: {}\n", e.as_deref().unwrap_or("?"))),
    }
    match (&r.npu_driver.version, &r.npu_driver.path) {
        (Some(v), Some(p)) => out.push_str(&format!("  NPU driver: {v} ({p})\n")),
        _ => {
            let hint = if r.soc.is_rockchip() { " (debugfs is readable by root only: run doctor as root)" } else { "" };
            out.push_str(&format!(
                "  NPU driver: no version file readable: {}{hint}\n",
                r.npu_driver.error.as_deref().unwrap_or("?")
            ));
        }
    }
}
