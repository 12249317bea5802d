//! `--snapshot-dir`, `--snapshot-every`, `--snapshot-keep` and `--snapshot-new`
//! (`zcpipe run`, `zcpipe stage publish`), and their checked form,
//! [`zcpipe_publish::snapshot::SnapshotConfig`].

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;

use zcpipe_publish::snapshot::SnapshotConfig;

/// Snapshot options.
#[derive(Args, Debug, Clone)]
pub struct SnapshotArgs {
    /// Write JPEG snapshots of each camera with its detections drawn into this folder
    /// (DIR/CAMERA/UNIX_MS-WHY.jpg): on each new tracked object, and every
    /// --snapshot-every seconds if given. A full disk is a warning, never a stop.
    #[arg(long, value_name = "DIR")]
    pub snapshot_dir: Option<PathBuf>,
    /// Also a snapshot of each camera this often, in seconds (1 to 86400).
    #[arg(long, value_name = "SECONDS", requires = "snapshot_dir", value_parser = every)]
    pub snapshot_every: Option<f64>,
    /// Snapshots kept per camera: the oldest are removed (1 to 100000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub snapshot_keep: u32,
    /// Whether each new tracked object (a tracker `new` event) gets a snapshot.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "true|false")]
    pub snapshot_new: bool,
}

fn every(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (1.0..=86400.0).contains(&v) => Ok(v),
        _ => Err(format!("{s}: expected seconds from 1 to 86400")),
    }
}

impl SnapshotArgs {
    /// The checked configuration (`None` without `--snapshot-dir`). `tracking`: whether a
    /// tracker runs (new objects come from its events). Errors (one line): a path that
    /// exists and is not a folder; nothing would ever be written (no tracker and no
    /// `--snapshot-every`, or `--snapshot-new false` without it).
    pub fn config(&self, tracking: bool) -> Result<Option<SnapshotConfig>> {
        let Some(dir) = &self.snapshot_dir else { return Ok(None) };
        if dir.exists() && !dir.is_dir() {
            bail!(
                "--snapshot-dir {}: exists and is not a folder; pick a folder (it is created if missing)",
                dir.display()
            );
        }
        let on_new = self.snapshot_new && tracking;
        if !on_new && self.snapshot_every.is_none() {
            bail!("--snapshot-dir {}: nothing would be written (no tracker for new objects, or --snapshot-new false): add --snapshot-every SECONDS", dir.display());
        }
        Ok(Some(SnapshotConfig {
            dir: dir.clone(),
            every: self.snapshot_every.map(Duration::from_secs_f64),
            on_new,
            keep: self.snapshot_keep as usize,
        }))
    }

    /// For the plan: `snapshots in DIR (on new objects, every 10 s; keep 100)`, or `None`.
    pub fn describe(&self, tracking: bool) -> Option<String> {
        let dir = self.snapshot_dir.as_ref()?;
        let mut when = vec![];
        if self.snapshot_new && tracking {
            when.push("on new objects".to_string());
        }
        if let Some(e) = self.snapshot_every {
            when.push(format!("every {e} s"));
        }
        Some(format!("snapshots in {} ({}; keep {} per camera)", dir.display(), when.join(", "), self.snapshot_keep))
    }

    /// The same options as flags, for the publish stage's command line.
    pub fn flags(&self) -> Vec<String> {
        let Some(dir) = &self.snapshot_dir else { return vec![] };
        let mut v = vec![
            format!("--snapshot-dir={}", dir.display()),
            format!("--snapshot-keep={}", self.snapshot_keep),
            format!("--snapshot-new={}", self.snapshot_new),
        ];
        if let Some(e) = self.snapshot_every {
            v.push(format!("--snapshot-every={e}"));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        s: SnapshotArgs,
    }

    #[test]
    fn flags_read_back_and_bad_values_are_one_line() {
        let d = tempfile::tempdir().unwrap();
        let a = T::parse_from([
            "t",
            "--snapshot-dir",
            d.path().to_str().unwrap(),
            "--snapshot-every",
            "30",
            "--snapshot-keep",
            "5",
        ])
        .s;
        let back = T::parse_from(std::iter::once("t".to_string()).chain(a.flags())).s;
        assert_eq!(back.config(true).unwrap(), a.config(true).unwrap());
        let c = a.config(true).unwrap().unwrap();
        assert_eq!((c.every, c.on_new, c.keep), (Some(Duration::from_secs(30)), true, 5));
        assert!(T::try_parse_from(["t", "--snapshot-every", "30"]).is_err(), "--snapshot-every needs --snapshot-dir");
        let e = T::try_parse_from(["t", "--snapshot-dir", "x", "--snapshot-every", "0.5"]).err().unwrap().to_string();
        assert!(e.contains("expected seconds from 1 to 86400"), "{e}");
        let only_new = T::parse_from(["t", "--snapshot-dir", d.path().to_str().unwrap()]).s;
        let e = only_new.config(false).unwrap_err().to_string();
        assert!(e.contains("nothing would be written"), "{e}");
        let f = d.path().join("file");
        std::fs::write(&f, b"x").unwrap();
        let e = T::parse_from(["t", "--snapshot-dir", f.to_str().unwrap()]).s.config(true).unwrap_err().to_string();
        assert!(e.contains("is not a folder"), "{e}");
    }
}
