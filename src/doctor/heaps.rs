//! The dma-buf heap and udmabuf sections: each heap under `/dev/dma_heap`
//! (Documentation/userspace-api/dma-buf-heaps.rst) and the `--heap` choice that takes it,
//! what `--heap auto` picks ([`Allocator::open`]), and `/dev/udmabuf`
//! (include/uapi/linux/udmabuf.h) with its `size_limit_mb`.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::access::access_fix;
use super::{quietly, AutoReport, FileMode, HeapChoiceReport, HeapReport, Paths, Problem, UdmabufReport};
use zcpipe_core::dmabuf::{heap_names, list_heaps, Allocator, HeapChoice};

const CHOICES: [(HeapChoice, &str); 3] =
    [(HeapChoice::System, "system"), (HeapChoice::Dma32, "dma32"), (HeapChoice::Cma, "cma")];

/// Every heap name zcpipe knows, with its `--heap` choice: `system (--heap system),
/// system-dma32 or dma32 (--heap dma32), ...`.
fn known_heaps() -> String {
    CHOICES.iter().map(|(c, n)| format!("{} (--heap {n})", heap_names(*c).join(" or "))).collect::<Vec<_>>().join(", ")
}

const HEAP_KERNEL_FIX: &str = "build the kernel with CONFIG_DMABUF_HEAPS=y and CONFIG_DMABUF_HEAPS_SYSTEM=y (and CONFIG_DMABUF_HEAPS_CMA=y, with a CMA area such as cma=64M on the kernel command line, for a contiguous heap); Rockchip BSP kernels have them. Until then zcpipe uses /dev/udmabuf, else DRM dumb buffers of a /dev/dri/card* (--heap drm), else sealed memfds, which are not dma-bufs: fine on a PC, but no device can import them";

fn open_ro(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).custom_flags(libc::O_CLOEXEC).open(path)
}

pub(super) fn open_rw(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).write(true).custom_flags(libc::O_CLOEXEC).open(path)
}

pub(super) fn heaps_section(
    paths: &Paths,
    problems: &mut Vec<Problem>,
) -> (Vec<HeapReport>, Vec<HeapChoiceReport>, AutoReport) {
    let dir = &paths.heap_dir;
    let names = list_heaps(dir);
    let choice_reports: Vec<HeapChoiceReport> = CHOICES
        .iter()
        .map(|&(c, n)| HeapChoiceReport {
            choice: n.into(),
            looks_for: heap_names(c).iter().map(|s| s.to_string()).collect(),
            heap: heap_names(c).iter().find(|h| names.iter().any(|x| x == *h)).map(|h| h.to_string()),
        })
        .collect();
    let mut heaps = vec![];
    let mut open_problem = false;
    for name in &names {
        let path = dir.join(name);
        let file = FileMode::of(&path);
        let ro = open_ro(&path);
        let rw = open_rw(&path);
        let choice = CHOICES.iter().find(|(c, _)| heap_names(*c).contains(&name.as_str())).map(|(_, n)| n.to_string());
        let used = choice_reports.iter().any(|c| c.heap.as_deref() == Some(name.as_str()));
        if let Err(e) = &ro {
            open_problem = true;
            problems.push(Problem {
                what: format!(
                    "{}: cannot open it: {e} ({})",
                    path.display(),
                    file.as_ref().map(FileMode::describe).unwrap_or_default()
                ),
                fix: if e.kind() == io::ErrorKind::PermissionDenied {
                    access_fix(&path, file.as_ref())
                } else {
                    "check `dmesg`".into()
                },
                about: path.display().to_string(),
            });
        }
        heaps.push(HeapReport {
            name: name.clone(),
            path: path.display().to_string(),
            file,
            openable: ro.is_ok(),
            read_write: rw.is_ok(),
            error: ro.err().map(|e| e.to_string()),
            choice,
            used_by_choice: used,
        });
    }
    if names.is_empty() {
        let why = if dir.is_dir() { "is empty" } else { "does not exist" };
        problems.push(Problem {
            what: format!("no dma-buf heap: {} {why}; zcpipe looks for {}", dir.display(), known_heaps()),
            fix: HEAP_KERNEL_FIX.into(),
            about: dir.display().to_string(),
        });
    } else if choice_reports.iter().all(|c| c.heap.is_none()) {
        problems.push(Problem {
            what: format!(
                "no dma-buf heap zcpipe knows in {}: it has {}; zcpipe looks for {}",
                dir.display(),
                names.join(", "),
                known_heaps()
            ),
            fix: HEAP_KERNEL_FIX.into(),
            about: dir.display().to_string(),
        });
    }
    // Allocator::open logs its choice at info level; the report says it, once.
    let opened = quietly(|| Allocator::open(HeapChoice::Auto, dir, &paths.udmabuf, &paths.dri_dir));
    let auto = match opened {
        Ok(a) => AutoReport { dma_buf: !matches!(a, Allocator::Memfd), allocator: Some(a.describe()), error: None },
        Err(e) => {
            if !open_problem {
                problems.push(Problem {
                    what: format!("--heap auto fails: {e:#}"),
                    fix: "fix the heap it names (see above), or pick another with --heap".into(),
                    about: dir.display().to_string(),
                });
            }
            AutoReport { allocator: None, dma_buf: false, error: Some(format!("{e:#}")) }
        }
    };
    (heaps, choice_reports, auto)
}

pub(super) fn udmabuf_section(paths: &Paths, heap_usable: bool, problems: &mut Vec<Problem>) -> UdmabufReport {
    let path = &paths.udmabuf;
    let about = path.display().to_string();
    let size_limit_mb =
        std::fs::read_to_string(paths.udmabuf_params.join("size_limit_mb")).ok().and_then(|s| s.trim().parse().ok());
    let mut r = UdmabufReport {
        path: about.clone(),
        present: path.exists(),
        file: FileMode::of(path),
        openable: false,
        error: None,
        size_limit_mb,
    };
    if !r.present {
        if !heap_usable {
            problems.push(Problem {
                what: format!("{about} does not exist, and there is no usable dma-buf heap either: zcpipe's buffers are sealed memfds, which no device can import"),
                fix: "sudo modprobe udmabuf (kernel: CONFIG_UDMABUF=y or =m), then install udev/99-zcpipe.rules so the zcpipe group may open it; better, enable a dma-buf heap (see the heaps section)".into(),
                about,
            });
        }
        return r;
    }
    match open_rw(path) {
        Ok(_) => r.openable = true,
        Err(e) => {
            r.error = Some(e.to_string());
            problems.push(Problem {
                what: format!(
                    "{about}: cannot open it read-write: {e} ({})",
                    r.file.as_ref().map(FileMode::describe).unwrap_or_default()
                ),
                fix: if e.kind() == io::ErrorKind::PermissionDenied {
                    access_fix(path, r.file.as_ref())
                } else {
                    "check `dmesg`".into()
                },
                about,
            });
        }
    }
    r
}
