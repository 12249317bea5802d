//! The C side of the ABI check: `abi/probe.c.in` filled in with one library's headers and
//! expressions, compiled with `-c` by a C compiler for the target under test, and the values
//! read back out of the object's `.zcabi` section (ELF64, little-endian: x86_64 and aarch64).
//! Nothing is linked or run, so the aarch64 tests under qemu-user need only the cross gcc.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The section the probe's array is put in.
const SECTION: &str = ".zcabi";

/// What compiling the probe gave.
pub(super) enum Outcome {
    /// One value per expression, in order, and the compiler that gave them.
    Values(Vec<i64>, String),
    /// No compiler for this target: the reason, for the report.
    Skipped(String),
    /// The probe did not compile (a member or constant the header lacks, ...) or its object
    /// was unreadable: the compiler's words.
    Failed(String),
}

/// `e_machine` of the target under test, and its name; `None` off x86_64 and aarch64.
fn target_machine() -> Option<(u16, &'static str)> {
    if cfg!(target_arch = "x86_64") {
        Some((62, "x86_64"))
    } else if cfg!(target_arch = "aarch64") {
        Some((183, "aarch64"))
    } else {
        None
    }
}

/// The compilers tried, in order: `$ZCPIPE_ABI_CC` alone if set, else `cc` on x86_64 and
/// `aarch64-linux-gnu-gcc` then `cc` (a native board's) on aarch64. Each one's objects are
/// checked for the target's `e_machine`, so an x86_64 `cc` found under qemu-user is refused.
fn compilers() -> Vec<String> {
    if let Some(cc) = std::env::var_os("ZCPIPE_ABI_CC").filter(|v| !v.is_empty()) {
        return vec![cc.to_string_lossy().into_owned()];
    }
    if cfg!(target_arch = "aarch64") {
        vec!["aarch64-linux-gnu-gcc".into(), "cc".into()]
    } else {
        vec!["cc".into()]
    }
}

/// The probe's C text: `template` with `#include "h"` for each of `headers` and one
/// `(long long)(expr)` initialiser per expression.
pub(super) fn render(template: &str, headers: &[&str], exprs: &[String]) -> String {
    let includes: String = headers.iter().map(|h| format!("#include \"{h}\"\n")).collect();
    let values: String = exprs.iter().enumerate().map(|(i, e)| format!("    (long long)({e}), /* {i} */\n")).collect();
    template.replace("@INCLUDES@", includes.trim_end()).replace("@VALUES@", values.trim_end())
}

/// Compiles `source` against the headers in `include` and reads `count` values back.
/// `tag` names the scratch directory (removed afterwards unless the compile failed).
pub(super) fn run(source: &str, include: &Path, count: usize, tag: &str) -> Outcome {
    let Some((machine, arch)) = target_machine() else {
        return Outcome::Skipped("no ABI probe for this target (only x86_64 and aarch64)".into());
    };
    let dir = scratch_dir(tag);
    if let Err(e) = std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(dir.join("probe.c"), source)) {
        return Outcome::Failed(format!("cannot write {}: {e}", dir.display()));
    }
    let (c, o) = (dir.join("probe.c"), dir.join("probe.o"));
    let mut tried = Vec::new();
    for cc in compilers() {
        let out = Command::new(&cc).args(["-std=gnu11", "-c", "-I"]).arg(include).arg("-o").arg(&o).arg(&c).output();
        let out = match out {
            Ok(out) => out,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                tried.push(format!("{cc} (not found)"));
                continue;
            }
            Err(e) => return Outcome::Failed(format!("cannot run {cc}: {e}")),
        };
        if !out.status.success() {
            let words = String::from_utf8_lossy(&out.stderr);
            return Outcome::Failed(format!("{cc} failed on {} ({}):\n{words}", c.display(), out.status));
        }
        let obj = std::fs::read(&o).map_err(|e| Mismatch::Other(e.to_string()));
        let values = obj.and_then(|obj| read_values(&obj, count, machine));
        match values {
            Ok(v) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Outcome::Values(v, format!("{cc} for {arch}"));
            }
            Err(Mismatch::Machine(m)) => tried.push(format!("{cc} (builds for e_machine {m}, not {arch})")),
            Err(Mismatch::Other(e)) => return Outcome::Failed(format!("{}: {e}", o.display())),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Outcome::Skipped(format!("no C compiler for {arch}: tried {}; set ZCPIPE_ABI_CC", tried.join(", ")))
}

fn scratch_dir(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    std::env::temp_dir().join(format!("zcpipe-abi-{tag}-{}-{nanos}", std::process::id()))
}

/// Why an object's values could not be used.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Mismatch {
    /// Built for another machine (this `e_machine`).
    Machine(u16),
    /// Not an object this reader understands, or no `.zcabi` of the right size.
    Other(String),
}

impl From<String> for Mismatch {
    fn from(s: String) -> Self {
        Mismatch::Other(s)
    }
}

/// The `count` little-endian `long long`s of the `.zcabi` section of `obj`, an ELF64 LE
/// relocatable object for `machine`.
pub(super) fn read_values(obj: &[u8], count: usize, machine: u16) -> Result<Vec<i64>, Mismatch> {
    let (m, data) = elf_section(obj, SECTION)?;
    if m != machine {
        return Err(Mismatch::Machine(m));
    }
    if data.len() != count * 8 {
        return Err(format!("{SECTION} holds {} bytes, expected {} values", data.len(), count).into());
    }
    Ok(data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect())
}

fn le_u16(b: &[u8], at: usize) -> Result<u16, String> {
    b.get(at..at + 2).map(|s| u16::from_le_bytes([s[0], s[1]])).ok_or_else(|| format!("ELF cut short at {at}"))
}

fn le_u32(b: &[u8], at: usize) -> Result<u32, String> {
    let v = b.get(at..at + 4).map(|s| u32::from_le_bytes(s.try_into().expect("4 bytes")));
    v.ok_or_else(|| format!("ELF cut short at {at}"))
}

fn le_usize(b: &[u8], at: usize) -> Result<usize, String> {
    let v = b.get(at..at + 8).map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")));
    v.and_then(|v| usize::try_from(v).ok()).ok_or_else(|| format!("ELF cut short at {at}"))
}

/// `e_machine` and the bytes of the section called `name` in an ELF64 little-endian file.
pub(super) fn elf_section<'a>(obj: &'a [u8], name: &str) -> Result<(u16, &'a [u8]), String> {
    if obj.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]) {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let machine = le_u16(obj, 18)?;
    let (shoff, shentsize) = (le_usize(obj, 0x28)?, le_u16(obj, 0x3a)? as usize);
    let (shnum, shstrndx) = (le_u16(obj, 0x3c)? as usize, le_u16(obj, 0x3e)? as usize);
    if shentsize < 0x28 || shstrndx >= shnum {
        return Err("no section headers".into());
    }
    let header = |i: usize| -> Result<(u32, usize, usize), String> {
        let at = shoff + i * shentsize;
        Ok((le_u32(obj, at)?, le_usize(obj, at + 0x18)?, le_usize(obj, at + 0x20)?))
    };
    let bytes = |off: usize, size: usize| {
        obj.get(off..off.saturating_add(size)).ok_or_else(|| "section past the end".to_string())
    };
    let (_, str_off, str_size) = header(shstrndx)?;
    let names = bytes(str_off, str_size)?;
    for i in 0..shnum {
        let (name_at, off, size) = header(i)?;
        let n = names.get(name_at as usize..).unwrap_or_default();
        let n = &n[..n.iter().position(|&c| c == 0).unwrap_or(n.len())];
        if n == name.as_bytes() {
            return Ok((machine, bytes(off, size)?));
        }
    }
    Err(format!("no {name} section"))
}
