//! The configuration file (`--config FILE`, default [`DEFAULT_PATH`] when present) and the
//! environment (`ZCPIPE_<FLAG>`), for `zcpipe run`; `zcpipe config check` and
//! `zcpipe config print`.
//!
//! Nothing here knows a flag by name: the keys are the long flags of `zcpipe run` as clap's
//! `Command` lists them (so a flag added later is a key at once), and each value is checked
//! by that flag's own value parser. The file and the environment become command-line tokens
//! ([`layer`]), put in front of the user's own arguments, so clap and
//! [`super::cameras::split`] read them exactly as if they had been typed:
//!
//! - precedence: flag > environment > file > default. A key whose flag is on the command
//!   line (or conflicts with one there) is not taken from the environment or the file; a key
//!   whose variable is set is not taken from the file.
//! - a TOML table `[camera.NAME]` is `--source NAME=...` followed by its per-camera options
//!   ([`super::cameras::section_keys`]: the capture options and the recorder's); its `zone` entries are `--zone NAME:...`. The file's
//!   cameras are appended after the user's arguments, so options given once on the command
//!   line apply to every camera, and a camera's own keys beat them, as on a command line.
//!   A `--source` on the command line (or `ZCPIPE_SOURCE`) replaces the file's cameras.
//!
//! Bad input is one line naming the file and the line (`FILE:LINE: key = value: why`) or the
//! variable (`ZCPIPE_FPS=fast: why`).

mod cmd;
mod file;
mod merge;
#[cfg(test)]
mod tests;

pub use cmd::{check, print, ConfigArgs};
pub use file::{load, ConfigFile, FileCamera};
pub use merge::{layer, parse_run, process_env, Layered};

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, CommandFactory, Parser};
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use zcpipe_capture::spec::redact_url;

/// The file `zcpipe run` reads when `--config` and `$ZCPIPE_CONFIG` are not given and it exists.
pub const DEFAULT_PATH: &str = "/etc/zcpipe/zcpipe.toml";
/// The variable naming the file (empty or `none`: no file).
pub const ENV_CONFIG: &str = "ZCPIPE_CONFIG";
/// The prefix of a flag's variable: `--restart-max` is `ZCPIPE_RESTART_MAX`.
pub const ENV_PREFIX: &str = "ZCPIPE_";
/// The table of per-camera sections, `[camera.NAME]`.
const CAMERA_TABLE: &str = "camera";
/// Flags of `zcpipe run` that are not keys: `--config` itself, `--dry-run` (an action, not a
/// setting), `--camera` (the name of the table of cameras; `zcpipe run` sets it per stage).
const NOT_KEYS: [&str; 5] = ["help", "version", "config", "dry-run", "camera"];

/// Where a value came from, in precedence order (flag highest).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The command line.
    Flag,
    /// An environment variable (its name).
    Env(String),
    /// The configuration file, at this line (1-based).
    File(usize),
    /// The flag's default.
    Default,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Flag => write!(f, "flag"),
            Origin::Env(v) => write!(f, "env {v}"),
            Origin::File(l) => write!(f, "file:{l}"),
            Origin::Default => write!(f, "default"),
        }
    }
}

/// How a flag takes its value, which decides the TOML type of its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A switch (`--json`): `true` or `false`.
    Switch,
    /// One value (`--fps 10`): a string or a number.
    One,
    /// A repeated flag (`--zone a --zone b`): an array (or one value).
    Many,
}

/// One key: a long flag of `zcpipe run`.
#[derive(Clone, Debug)]
struct Key {
    /// clap's id (`zones` for `--zone`).
    id: String,
    /// The key, as the flag is spelt without its dashes (`restart-max`).
    long: String,
    kind: Kind,
}

/// `zcpipe run`'s clap command, built (globals propagated, so `quiet` and `verbose` are in).
fn run_command() -> clap::Command {
    let mut cli = super::Cli::command();
    cli.build();
    cli.find_subcommand("run").expect("zcpipe has a run subcommand").clone()
}

/// Every key: each long flag of `zcpipe run` but [`NOT_KEYS`] and hidden ones.
fn keys(run: &clap::Command) -> Vec<Key> {
    run.get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_positional())
        .filter_map(|a| {
            let long = a.get_long()?;
            let kind = match a.get_action() {
                ArgAction::SetTrue => Kind::Switch,
                ArgAction::Set => Kind::One,
                ArgAction::Append => Kind::Many,
                _ => return None,
            };
            (!NOT_KEYS.contains(&long)).then(|| Key { id: a.get_id().to_string(), long: long.to_string(), kind })
        })
        .collect()
}

/// The variable of a key: `ZCPIPE_` and the key in upper case, `-` as `_`.
pub fn env_name(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.to_uppercase().replace('-', "_"))
}

/// The pairs of flag ids that conflict (both ways).
fn conflicts(run: &clap::Command) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for a in run.get_arguments() {
        for b in run.get_arg_conflicts_with(a) {
            out.insert((a.get_id().to_string(), b.get_id().to_string()));
            out.insert((b.get_id().to_string(), a.get_id().to_string()));
        }
    }
    out
}

/// The first line of a clap error without `error: `, with its possible values or tip.
pub(crate) fn clap_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let mut out = lines.next().unwrap_or_default().trim_start_matches("error: ").to_string();
    // `the following required arguments were not provided:` names them on the next lines.
    let list = out.ends_with(':');
    for l in lines {
        if list && l.starts_with('-') {
            out += &format!(" {l}");
        } else if l.starts_with("[possible values") {
            out += &format!("; {}", l.trim_start_matches('[').trim_end_matches(']'));
        } else if l.starts_with("tip:") {
            out += &format!("; {l}");
        }
    }
    out
}

/// Checks one value of a flag with the flag's own parser (and range, and possible values),
/// by parsing `--long=value` alone: the error as one line, credentials in it masked. A flag
/// that needs another (`requires`) is not an error here; the whole command line checks it.
fn check_value(run: &clap::Command, long: &str, value: &str) -> Result<(), String> {
    match run.clone().try_get_matches_from(["run".to_string(), format!("--{long}={value}")]) {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::MissingRequiredArgument | clap::error::ErrorKind::ArgumentConflict
            ) =>
        {
            Ok(())
        }
        Err(e) => {
            let msg = clap_line(&e);
            let masked = redact_url(value);
            Err(if masked != value { msg.replace(value, &masked) } else { msg })
        }
    }
}

/// A switch's value from the environment: true/false, 1/0, yes/no, on/off.
fn parse_switch(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

/// `s` as a TOML basic string.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A raw value as TOML: a number when TOML reads it as one, else a string (credentials masked).
fn toml_value(raw: &str) -> String {
    match DeValue::parse(raw).map(|v| v.into_inner()) {
        Ok(DeValue::Integer(_) | DeValue::Float(_)) if !raw.contains('_') => raw.to_string(),
        _ => quote(&redact_url(raw)),
    }
}

/// The configuration file's keys as the reference lists them: each key, the flag it stands
/// for, its environment variable, and what it takes (`switch`, `value` or `list`).
pub fn reference_keys() -> Vec<(String, String, &'static str)> {
    keys(&run_command())
        .into_iter()
        .map(|k| {
            let takes = match k.kind {
                Kind::Switch => "switch: `true` or `false`",
                Kind::One => "one value",
                Kind::Many => "a list (or one value)",
            };
            let env = env_name(&k.long);
            (k.long, env, takes)
        })
        .collect()
}

/// The keys a `[camera.NAME]` section takes besides `source` and `zone` (the file's
/// per-camera keys: [`super::cameras::section_keys`]).
pub fn reference_camera_keys() -> Vec<&'static str> {
    super::cameras::section_keys()
}
