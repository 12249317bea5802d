//! Who may open what: a device file's owner, group and mode, this process's user and groups
//! (read from /etc/passwd and /etc/group, not NSS, so the static build works), the fix for a
//! refused open (`udev/99-zcpipe.rules`, group membership) and the processes holding a node.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use serde::Serialize;

use super::UserReport;

/// Owner, group and mode of a device file (stat(2)).
#[derive(Clone, Debug, Serialize)]
pub struct FileMode {
    /// Owner name (from /etc/passwd), else the uid as a number.
    pub owner: String,
    /// Group name (from /etc/group), else the gid as a number.
    pub group: String,
    /// Permission bits in octal, `0660`.
    pub mode: String,
    /// It is a character device (every node doctor checks should be).
    pub char_device: bool,
    #[serde(skip)]
    pub(super) gid: u32,
    #[serde(skip)]
    pub(super) bits: u32,
}

impl FileMode {
    pub(super) fn of(path: &Path) -> Option<FileMode> {
        let m = std::fs::metadata(path).ok()?;
        Some(FileMode {
            owner: user_name(m.uid()),
            group: group_name(m.gid()),
            mode: format!("{:04o}", m.mode() & 0o7777),
            char_device: m.file_type().is_char_device(),
            gid: m.gid(),
            bits: m.mode() & 0o7777,
        })
    }

    /// `0660 root:video`.
    pub(super) fn describe(&self) -> String {
        format!("{} {}:{}", self.mode, self.owner, self.group)
    }
}

/// The group `udev/99-zcpipe.rules` gives the device nodes to (its first `GROUP="..."`).
pub fn rules_group() -> &'static str {
    const RULES: &str = include_str!("../../udev/99-zcpipe.rules");
    RULES
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|l| l.split("GROUP=\"").nth(1).and_then(|r| r.split('"').next()))
        .unwrap_or("zcpipe")
}

/// Name of id `id` in an /etc/passwd- or /etc/group-style file (`name:x:id:...`). Parsed
/// here rather than through NSS so that the static build (no NSS modules) works too.
pub(super) fn id_name_in(text: &str, id: u32) -> Option<String> {
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        f.next()?;
        (f.next()?.parse::<u32>().ok()? == id).then(|| name.to_string())
    })
}

fn user_name(uid: u32) -> String {
    std::fs::read_to_string("/etc/passwd").ok().and_then(|t| id_name_in(&t, uid)).unwrap_or_else(|| uid.to_string())
}

fn group_name(gid: u32) -> String {
    std::fs::read_to_string("/etc/group").ok().and_then(|t| id_name_in(&t, gid)).unwrap_or_else(|| gid.to_string())
}

/// The members listed for `group` in an /etc/group-style file (4th field).
pub(super) fn group_members_in(text: &str, group: &str) -> Vec<String> {
    text.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 4 && f[0] == group)
                .then(|| f[3].split(',').filter(|m| !m.is_empty()).map(str::to_string).collect())
        })
        .unwrap_or_default()
}

/// This process's group ids (effective and supplementary).
fn my_gids() -> Vec<u32> {
    let mut v: Vec<u32> =
        nix::unistd::getgroups().map(|g| g.into_iter().map(|g| g.as_raw()).collect()).unwrap_or_default();
    v.push(nix::unistd::getegid().as_raw());
    v.sort_unstable();
    v.dedup();
    v
}

pub(super) fn user_report() -> UserReport {
    let uid = nix::unistd::getuid().as_raw();
    UserReport { uid, name: user_name(uid), groups: my_gids().into_iter().map(group_name).collect() }
}

/// The fix for `EACCES` on `path` (owned as `file` says), given who we are: join the group
/// that may open it (or log in again if already listed in it), or install the udev rules
/// that give the nodes to the `zcpipe` group.
pub(super) fn access_fix(path: &Path, file: Option<&FileMode>) -> String {
    let rules_group = rules_group();
    let install = format!(
        "install udev/99-zcpipe.rules so the {rules_group} group may open it (sudo cp udev/99-zcpipe.rules /etc/udev/rules.d/ && sudo udevadm control --reload && sudo udevadm trigger) and join that group (sudo groupadd -f {rules_group} && sudo usermod -aG {rules_group} $USER, then log in again)"
    );
    let Some(f) = file else {
        return format!("{install}; or run as root");
    };
    let group_rw = f.bits & 0o060 == 0o060;
    if f.gid == 0 {
        // Joining root's group is no fix.
        return format!("it belongs to group root (mode {}): {install}; or run as root", f.mode);
    }
    if !group_rw {
        return format!("its group {} may not read and write it (mode {}): {install}; or run as root", f.group, f.mode);
    }
    if my_gids().contains(&f.gid) {
        return format!(
            "its group {} may open it and you are in that group, so a security module (SELinux, AppArmor) or an ACL refuses {}: check `dmesg` and `getfacl {}`; or run as root",
            f.group,
            path.display(),
            path.display()
        );
    }
    let me = user_name(nix::unistd::getuid().as_raw());
    let listed =
        std::fs::read_to_string("/etc/group").map(|t| group_members_in(&t, &f.group).contains(&me)).unwrap_or(false);
    if listed {
        return format!("you are in the {} group in /etc/group but not in this login session: log out and in again (or run `newgrp {}`)", f.group, f.group);
    }
    let join = format!("join its group: sudo usermod -aG {} $USER, then log in again", f.group);
    if f.group == rules_group {
        format!("{join}; or run as root")
    } else {
        format!("{join}; or {install}; or run as root")
    }
}

/// Processes that have `path` open (from /proc/<pid>/fd; only those this user may inspect),
/// as `pid 1234 (zcpipe)`. `skip` is a pid to leave out (our own).
pub(super) fn holders(path: &Path, skip: Option<u32>) -> Vec<String> {
    let Ok(procs) = std::fs::read_dir("/proc") else { return vec![] };
    let mut out: Vec<(u32, String)> = vec![];
    for p in procs.filter_map(|e| e.ok()) {
        let Ok(pid) = p.file_name().to_string_lossy().parse::<u32>() else { continue };
        if Some(pid) == skip {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else { continue };
        if fds.filter_map(|e| e.ok()).any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == path)) {
            let comm = std::fs::read_to_string(p.path().join("comm")).unwrap_or_default();
            out.push((pid, comm.trim().to_string()));
        }
    }
    out.sort();
    out.into_iter().map(|(pid, comm)| format!("pid {pid} ({comm})")).collect()
}
