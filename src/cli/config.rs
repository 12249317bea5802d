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
//!   ([`super::cameras::PER_CAMERA`]); its `zone` entries are `--zone NAME:...`. The file's
//!   cameras are appended after the user's arguments, so options given once on the command
//!   line apply to every camera, and a camera's own keys beat them, as on a command line.
//!   A `--source` on the command line (or `ZCPIPE_SOURCE`) replaces the file's cameras.
//!
//! Bad input is one line naming the file and the line (`FILE:LINE: key = value: why`) or the
//! variable (`ZCPIPE_FPS=fast: why`).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, CommandFactory, Parser};
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use zcpipe_capture::spec::redact_url;

use super::cameras::PER_CAMERA;

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
fn clap_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let mut out = lines.next().unwrap_or_default().trim_start_matches("error: ").to_string();
    for l in lines {
        if l.starts_with("[possible values") {
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

/// One key set in the file.
#[derive(Clone, Debug)]
struct Entry {
    id: String,
    /// The flag tokens it stands for (`--fps=10`; none for `json = false`).
    tokens: Vec<String>,
    line: usize,
}

/// One `[camera.NAME]` section.
#[derive(Clone, Debug)]
pub struct FileCamera {
    /// The section's NAME.
    pub name: String,
    /// The line of its header.
    pub line: usize,
    /// Its `source`.
    pub source: String,
    /// Its per-camera keys (`fps`, ...): key, value, line.
    pub keys: Vec<(String, String, usize)>,
    /// Its zones, each with the camera prefix (`NAME:door=...`), and the line.
    pub zones: Vec<(String, usize)>,
}

/// A checked configuration file.
#[derive(Clone, Debug)]
pub struct ConfigFile {
    /// Where it was read from.
    pub path: PathBuf,
    entries: Vec<Entry>,
    /// The top-level `source` (one camera), and its line.
    source: Option<(String, usize)>,
    /// The `[camera.NAME]` sections, in file order.
    pub cameras: Vec<FileCamera>,
}

impl ConfigFile {
    /// How many keys it sets (the top-level ones and those in camera sections).
    pub fn key_count(&self) -> usize {
        self.entries.len()
            + self.source.is_some() as usize
            + self.cameras.iter().map(|c| 1 + c.keys.len() + c.zones.len().min(1)).sum::<usize>()
    }

    /// How many cameras it defines: its sections, or one for a top-level `source`.
    pub fn camera_count(&self) -> usize {
        if self.cameras.is_empty() {
            self.source.is_some() as usize
        } else {
            self.cameras.len()
        }
    }
}

/// Reads and checks the file at `path`: every key is a flag of `zcpipe run`, of the right
/// TOML type, with a value the flag's parser takes. Errors (one line):
/// `PATH:LINE: key = value: why`, `PATH:LINE: unknown key ...`, `PATH:LINE: <TOML syntax error>`,
/// `PATH: cannot read: ...`.
pub fn load(path: &Path) -> Result<ConfigFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    parse(path, &text, &run_command())
}

/// The line (1-based) of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

/// A TOML scalar as the text of a flag's value; `shown` is how the file wrote it.
fn scalar(v: &DeValue<'_>) -> Option<String> {
    match v {
        DeValue::String(s) => Some(s.to_string()),
        DeValue::Integer(i) => Some(
            i64::from_str_radix(i.as_str(), i.radix())
                .map(|n| n.to_string())
                .unwrap_or_else(|_| i.as_str().to_string()),
        ),
        DeValue::Float(f) => Some(
            f.as_str()
                .replace('_', "")
                .parse::<f64>()
                .map(|x| x.to_string())
                .unwrap_or_else(|_| f.as_str().to_string()),
        ),
        _ => None,
    }
}

/// How a value is shown in an error: as the file wrote it, credentials masked.
fn shown(v: &DeValue<'_>) -> String {
    match v {
        DeValue::String(s) => quote(&redact_url(s)),
        DeValue::Integer(_) | DeValue::Float(_) => scalar(v).unwrap_or_default(),
        DeValue::Boolean(b) => b.to_string(),
        DeValue::Datetime(d) => d.to_string(),
        DeValue::Array(_) => "[...]".into(),
        DeValue::Table(_) => "{...}".into(),
    }
}

/// The name of a TOML type, for "found a ..." in an error.
fn type_name(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date-time",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// The "did you mean" of an unknown key: the same key with `-` for `_`, else the nearest one
/// (at most 2 edits, a swap of two letters counting one, and less than a third of the key).
fn suggest<'a>(unknown: &str, known: impl Iterator<Item = &'a str>) -> Option<String> {
    let kebab = unknown.replace('_', "-");
    let mut best: Option<(usize, &str)> = None;
    for k in known {
        if k == kebab {
            return Some(k.to_string());
        }
        let d = strsim::osa_distance(unknown, k);
        if d <= 2 && d * 3 <= unknown.len().max(3) && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, k));
        }
    }
    best.map(|(_, k)| k.to_string())
}

/// The file's checked contents from its text (see [`load`]).
fn parse(path: &Path, text: &str, run: &clap::Command) -> Result<ConfigFile, String> {
    let file = path.display().to_string();
    let doc = DeTable::parse(text).map_err(|e| match e.span() {
        Some(span) => format!("{file}:{}: {}", line_of(text, span.start), e.message().trim()),
        None => format!("{file}: {}", e.message().trim()),
    })?;
    let keys = keys(run);
    let at = |span: std::ops::Range<usize>| line_of(text, span.start);
    let mut out = ConfigFile { path: path.to_path_buf(), entries: vec![], source: None, cameras: vec![] };
    let unknown = |key: &str, line: usize| -> String {
        let hint = suggest(key, keys.iter().map(|k| k.long.as_str()).chain(["camera", "source"]));
        match hint {
            Some(k) => format!(
                "{file}:{line}: unknown key `{key}`: did you mean `{k}`? (`zcpipe config print` lists every key)"
            ),
            None => format!("{file}:{line}: unknown key `{key}` (`zcpipe config print` lists every key)"),
        }
    };
    for (k, v) in doc.get_ref().iter() {
        let (key, line) = (k.get_ref().as_ref(), at(k.span()));
        if key == CAMERA_TABLE {
            out.cameras = cameras(&file, text, v, run)?;
            continue;
        }
        if key == "source" {
            let Some(s) = v.get_ref().as_str() else {
                return Err(format!(
                    "{file}:{line}: source = {}: expected a string (a source, as --source takes it), found {}",
                    shown(v.get_ref()),
                    type_name(v.get_ref())
                ));
            };
            out.source = Some((s.to_string(), line));
            continue;
        }
        let Some(spec) = keys.iter().find(|s| s.long == key) else { return Err(unknown(key, line)) };
        out.entries.push(Entry { id: spec.id.clone(), tokens: tokens(&file, text, spec, v, run)?, line });
    }
    if out.source.is_some() && !out.cameras.is_empty() {
        let line = out.source.as_ref().map(|s| s.1).unwrap_or(0);
        return Err(format!("{file}:{line}: source is given at the top and in [camera.NAME] sections: give each camera's source in its section, or use the top-level source alone for one camera"));
    }
    Ok(out)
}

/// The flag tokens of one top-level key, its value checked by the flag's parser.
fn tokens(
    file: &str,
    text: &str,
    spec: &Key,
    v: &Spanned<DeValue<'_>>,
    run: &clap::Command,
) -> Result<Vec<String>, String> {
    let line = line_of(text, v.span().start);
    let key = &spec.long;
    let val = v.get_ref();
    let one = |item: &DeValue<'_>| -> Result<String, String> {
        let s = scalar(item).ok_or_else(|| {
            format!("{file}:{line}: {key} = {}: expected a string or a number, found {}", shown(item), type_name(item))
        })?;
        check_value(run, key, &s).map_err(|e| format!("{file}:{line}: {key} = {}: {e}", shown(item)))?;
        Ok(format!("--{key}={s}"))
    };
    match (spec.kind, val) {
        (Kind::Switch, DeValue::Boolean(b)) => Ok(if *b { vec![format!("--{key}")] } else { vec![] }),
        (Kind::Switch, _) => {
            Err(format!("{file}:{line}: {key} = {}: expected true or false, found {}", shown(val), type_name(val)))
        }
        (Kind::Many, DeValue::Array(items)) => items.iter().map(|i| one(i.get_ref())).collect(),
        (Kind::One, DeValue::Array(_)) => {
            Err(format!("{file}:{line}: {key} = [...]: --{key} takes one value, not an array"))
        }
        _ => Ok(vec![one(val)?]),
    }
}

/// The `[camera.NAME]` sections: each a table with `source`, per-camera keys and `zone`.
fn cameras(file: &str, text: &str, v: &Spanned<DeValue<'_>>, run: &clap::Command) -> Result<Vec<FileCamera>, String> {
    let per_camera: Vec<&str> = PER_CAMERA.iter().map(|f| f.trim_start_matches("--")).collect();
    let Some(table) = v.get_ref().as_table() else {
        return Err(format!(
            "{file}:{}: camera = {}: expected [camera.NAME] sections, found {}",
            line_of(text, v.span().start),
            shown(v.get_ref()),
            type_name(v.get_ref())
        ));
    };
    let mut out = vec![];
    for (name, section) in table.iter() {
        let (n, line) = (name.get_ref().to_string(), line_of(text, name.span().start));
        zcpipe_core::config::check_camera_name(&n).map_err(|e| format!("{file}:{line}: [camera.{n}]: {e:#}"))?;
        let Some(section) = section.get_ref().as_table() else {
            return Err(format!(
                "{file}:{line}: camera.{n} = {}: expected a [camera.{n}] section, found {}",
                shown(section.get_ref()),
                type_name(section.get_ref())
            ));
        };
        let mut cam = FileCamera { name: n.clone(), line, source: String::new(), keys: vec![], zones: vec![] };
        for (k, v) in section.iter() {
            let (key, kline, val) = (k.get_ref().as_ref(), line_of(text, k.span().start), v.get_ref());
            if key == "zone" {
                let items: Vec<&DeValue<'_>> = match val {
                    DeValue::Array(a) => a.iter().map(|i| i.get_ref()).collect(),
                    v => vec![v],
                };
                for item in items {
                    let Some(z) = item.as_str() else {
                        return Err(format!(
                            "{file}:{kline}: zone = {}: expected zones as strings (\"NAME=x1,y1,x2,y2,...\"), found {}",
                            shown(item),
                            type_name(item)
                        ));
                    };
                    let z = format!("{n}:{z}");
                    check_value(run, "zone", &z).map_err(|e| format!("{file}:{kline}: zone = {}: {e}", shown(item)))?;
                    cam.zones.push((z, kline));
                }
                continue;
            }
            if key != "source" && !per_camera.contains(&key) {
                let known = keys(run).iter().any(|s| s.long == key);
                let why = if known {
                    format!("`{key}` cannot differ per camera: put it at the top of the file")
                } else {
                    format!("unknown key `{key}`")
                };
                return Err(format!(
                    "{file}:{kline}: [camera.{n}] {why} (a camera's keys: source, {}, zone)",
                    per_camera.join(", ")
                ));
            }
            let s = scalar(val).ok_or_else(|| {
                format!(
                    "{file}:{kline}: {key} = {}: expected a string or a number, found {}",
                    shown(val),
                    type_name(val)
                )
            })?;
            if key == "source" {
                cam.source = s;
            } else {
                check_value(run, key, &s).map_err(|e| format!("{file}:{kline}: {key} = {}: {e}", shown(val)))?;
                cam.keys.push((key.to_string(), s, kline));
            }
        }
        if cam.source.is_empty() {
            return Err(format!(
                "{file}:{line}: [camera.{n}] has no source: add source = \"...\" (as --source takes it)"
            ));
        }
        out.push(cam);
    }
    Ok(out)
}

/// A command line with the file and the environment laid under it ([`layer`]).
#[derive(Clone, Debug, Default)]
pub struct Layered {
    /// The whole command line to parse, program name first.
    pub args: Vec<OsString>,
    /// The file read, if any.
    pub file: Option<ConfigFile>,
    /// Where each key set by the environment or the file came from, by clap id.
    pub origins: BTreeMap<String, Origin>,
    /// Where the cameras came from (`None`: the command line or the default).
    pub cameras: Option<Origin>,
}

/// The flags the user's own arguments (after `run`) give, by clap id, and `--config`'s value.
fn given(run: &clap::Command, user: &[OsString]) -> (BTreeSet<String>, Option<String>) {
    let mut ids = BTreeSet::new();
    let mut config = None;
    let mut it = user.iter().filter_map(|a| a.to_str());
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        let arg: Option<&Arg> = if let Some(long) = a.strip_prefix("--") {
            let (k, inline) = match long.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (long, None),
            };
            let arg = run
                .get_arguments()
                .find(|x| x.get_long() == Some(k) || x.get_all_aliases().is_some_and(|al| al.contains(&k)));
            if let Some(x) = arg {
                let takes_value = matches!(x.get_action(), ArgAction::Set | ArgAction::Append);
                let value = match inline {
                    Some(v) => Some(v.to_string()),
                    None if takes_value => it.next().map(str::to_string),
                    None => None,
                };
                if x.get_id() == "config" {
                    config = value;
                }
            }
            arg
        } else if let Some(shorts) = a.strip_prefix('-').filter(|s| !s.is_empty()) {
            for c in shorts.chars() {
                if let Some(x) = run.get_arguments().find(|x| x.get_short() == Some(c)) {
                    ids.insert(x.get_id().to_string());
                }
            }
            None
        } else {
            None
        };
        if let Some(x) = arg {
            ids.insert(x.get_id().to_string());
        }
    }
    (ids, config)
}

/// Lays the configuration file and the environment under the command line `args` (program
/// name first) of `zcpipe run`; any other command comes back unchanged. `env` is the
/// process's environment (a map, so tests pass their own); `default` is [`DEFAULT_PATH`]
/// (read only if it exists and neither `--config` nor `$ZCPIPE_CONFIG` is given; `none` or
/// an empty value reads no file). Errors (one line): the file's ([`load`]), a variable whose
/// value its flag refuses (`ZCPIPE_FPS=fast: ...`), a `--config` file that does not exist.
pub fn layer(args: Vec<OsString>, env: &BTreeMap<String, String>, default: &Path) -> Result<Layered, String> {
    // `run` is the first word that is not a global switch (-q, -v).
    let Some(at) = args
        .iter()
        .skip(1)
        .position(|a| !a.to_str().is_some_and(|s| s.starts_with('-')))
        .map(|i| i + 1)
        .filter(|&i| args[i] == "run")
    else {
        return Ok(Layered { args, ..Default::default() });
    };
    let run = run_command();
    let keys = keys(&run);
    let pairs = conflicts(&run);
    let user = &args[at + 1..];
    let (flag_ids, config_flag) = given(&run, user);
    let path: Option<PathBuf> = match (config_flag, env.get(ENV_CONFIG)) {
        (Some(p), _) if p.is_empty() || p == "none" => None,
        (Some(p), _) if !Path::new(&p).is_file() => {
            return Err(format!("--config {p}: no such file (give a TOML file, or `none` for no file)"))
        }
        (Some(p), _) => Some(p.into()),
        (None, Some(p)) if p.is_empty() || p == "none" => None,
        (None, Some(p)) if !Path::new(p).is_file() => {
            return Err(format!("{ENV_CONFIG}={p}: no such file (give a TOML file, or set it empty for no file)"))
        }
        (None, Some(p)) => Some(p.into()),
        (None, None) => default.is_file().then(|| default.to_path_buf()),
    };
    let file = path.as_deref().map(load).transpose()?;
    let mut out = Layered { file: None, ..Default::default() };
    let blocked = |id: &str, by: &BTreeSet<String>| {
        by.contains(id) || by.iter().any(|g| pairs.contains(&(g.clone(), id.to_string())))
    };
    // The environment, under the flags.
    let mut env_ids = BTreeSet::new();
    let mut env_tokens: Vec<String> = vec![];
    let mut camera_tokens: Vec<String> = vec![];
    for k in keys.iter().filter(|k| !blocked(&k.id, &flag_ids)) {
        let var = env_name(&k.long);
        let Some(v) = env.get(&var) else { continue };
        match k.kind {
            Kind::Switch => match parse_switch(v) {
                Some(true) => env_tokens.push(format!("--{}", k.long)),
                Some(false) => {}
                None => {
                    return Err(format!(
                        "{var}={v}: --{} is a switch: expected true or false (1/0, yes/no, on/off)",
                        k.long
                    ))
                }
            },
            Kind::One | Kind::Many => {
                let values: Vec<&str> = if k.kind == Kind::Many {
                    v.split(';').map(str::trim).filter(|s| !s.is_empty()).collect()
                } else {
                    vec![v.as_str()]
                };
                for value in values {
                    check_value(&run, &k.long, value).map_err(|e| format!("{var}={}: {e}", redact_url(value)))?;
                    let t = format!("--{}={value}", k.long);
                    // A source is a camera: after every option given once.
                    if k.id == "source" {
                        camera_tokens.push(t)
                    } else {
                        env_tokens.push(t)
                    }
                }
            }
        }
        env_ids.insert(k.id.clone());
        out.origins.insert(k.id.clone(), Origin::Env(var.clone()));
        if k.id == "source" {
            out.cameras = Some(Origin::Env(var));
        }
    }
    // The file, under the environment.
    let above: BTreeSet<String> = flag_ids.union(&env_ids).cloned().collect();
    let mut file_tokens: Vec<String> = vec![];
    if let Some(f) = &file {
        for e in f.entries.iter().filter(|e| !blocked(&e.id, &above)) {
            file_tokens.extend(e.tokens.iter().cloned());
            out.origins.insert(e.id.clone(), Origin::File(e.line));
        }
        let zones_free = !blocked("zones", &above);
        if !blocked("source", &above) {
            if let Some((s, line)) = &f.source {
                camera_tokens.push(format!("--source={s}"));
                out.cameras = Some(Origin::File(*line));
            }
            for c in &f.cameras {
                camera_tokens.push(format!("--source={}={}", c.name, c.source));
                camera_tokens.extend(c.keys.iter().map(|(k, v, _)| format!("--{k}={v}")));
                if zones_free {
                    file_tokens.extend(c.zones.iter().map(|(z, _)| format!("--zone={z}")));
                    if let Some((_, line)) = c.zones.first() {
                        out.origins.entry("zones".into()).or_insert(Origin::File(*line));
                    }
                }
                out.cameras = Some(Origin::File(f.cameras[0].line));
            }
        }
    }
    let mut argv: Vec<OsString> = args[..=at].to_vec();
    argv.extend(env_tokens.into_iter().chain(file_tokens).map(OsString::from));
    argv.extend(user.iter().cloned());
    argv.extend(camera_tokens.into_iter().map(OsString::from));
    out.args = argv;
    out.file = file;
    Ok(out)
}

/// The process's environment as a map (variables that are not UTF-8 are left out).
pub fn process_env() -> BTreeMap<String, String> {
    std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect()
}

/// `zcpipe run`'s options from a whole command line (program name first), with the file and
/// the environment laid under it, and the cameras split off ([`super::cameras::split`]).
/// Errors: one line (the file's, a variable's, clap's first line).
pub fn parse_run(
    args: Vec<OsString>,
    env: &BTreeMap<String, String>,
    default: &Path,
) -> Result<(super::run::RunArgs, Layered), String> {
    let layered = layer(args, env, default)?;
    let (args, cameras) = super::cameras::split(layered.args.clone()).map_err(|e| format!("{e:#}"))?;
    let cli = super::Cli::try_parse_from(args).map_err(|e| clap_line(&e))?;
    let super::Command::Run(mut a) = cli.cmd else { return Err("not a `zcpipe run` command line".into()) };
    a.pipeline.cameras = cameras;
    Ok((*a, layered))
}

/// `zcpipe config`.
#[derive(clap::Args, Debug)]
pub struct ConfigArgs {
    #[command(subcommand)]
    cmd: ConfigCmd,
}

#[derive(clap::Subcommand, Debug)]
enum ConfigCmd {
    /// Check a configuration file: every key a flag of `zcpipe run` with a value it takes, every
    /// camera section complete. Prints `FILE: ok (N keys, M cameras)`, or the error with its
    /// line and exits 2.
    Check {
        /// The file (TOML).
        file: PathBuf,
    },
    /// Print the effective configuration of `zcpipe run` as TOML, each value's origin (flag,
    /// env, file:LINE, default) in a comment. Takes `zcpipe run`'s flags (`--config FILE` too).
    Print {
        /// `zcpipe run`'s flags.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

impl ConfigArgs {
    /// Runs the subcommand: its exit code (check: 0 or 2), or its error (one line).
    pub fn run(self, env: &BTreeMap<String, String>) -> anyhow::Result<i32> {
        match self.cmd {
            ConfigCmd::Check { file } => match check(&file) {
                Ok(line) => {
                    println!("{line}");
                    Ok(0)
                }
                Err(e) => {
                    super::error_line("zcpipe config", &e);
                    Ok(2)
                }
            },
            ConfigCmd::Print { args } => {
                let argv: Vec<OsString> = ["zcpipe", "run"].into_iter().map(OsString::from).chain(args).collect();
                match print(argv, env, Path::new(DEFAULT_PATH)) {
                    Ok(text) => {
                        print!("{text}");
                        Ok(0)
                    }
                    Err(e) => {
                        super::error_line("zcpipe config", &e);
                        Ok(2)
                    }
                }
            }
        }
    }
}

/// `zcpipe config check FILE`: `FILE: ok (N keys, M cameras)`, or the error (one line). Beyond
/// each key, the whole: the file's flags together (conflicts), its cameras (names, a source
/// given twice), its zones' cameras.
pub fn check(path: &Path) -> Result<String, String> {
    let f = load(path)?;
    let argv: Vec<OsString> =
        ["zcpipe", "run", "--config"].into_iter().map(OsString::from).chain([path.as_os_str().to_owned()]).collect();
    let (a, _) = parse_run(argv, &BTreeMap::new(), Path::new(""))?;
    let file = path.display();
    let cams = a.pipeline.cams().map_err(|e| format!("{file}: {e:#}"))?;
    // Each camera's options together (a V4L2-only option on a test pattern, ...); nothing is opened.
    for (name, c) in &cams {
        c.config().map_err(|e| format!("{file}: camera {name}: {e:#}"))?;
    }
    let names: Vec<String> = cams.iter().map(|(n, _)| n.clone()).collect();
    a.track.config(&names).map_err(|e| format!("{file}: {e:#}"))?;
    let plural = |n: usize, one: &str| format!("{n} {one}{}", if n == 1 { "" } else { "s" });
    Ok(format!("{file}: ok ({}, {})", plural(f.key_count(), "key"), plural(f.camera_count(), "camera")))
}

/// `zcpipe config print`: the effective configuration of the `zcpipe run` command line
/// `args` as TOML, each value's origin in a comment, unset keys commented out.
pub fn print(args: Vec<OsString>, env: &BTreeMap<String, String>, default: &Path) -> Result<String, String> {
    let (a, layered) = parse_run(args, env, default)?;
    let (args, _) = super::cameras::split(layered.args.clone()).map_err(|e| format!("{e:#}"))?;
    let matches = super::Cli::command().try_get_matches_from(args).map_err(|e| clap_line(&e))?;
    let m = matches.subcommand_matches("run").ok_or("not a `zcpipe run` command line")?;
    let run = run_command();
    let mut out = String::from(
        "# zcpipe run's effective configuration (zcpipe config print); precedence: flag > env > file > default\n",
    );
    out += &match &layered.file {
        Some(f) => format!("# file: {}\n", f.path.display()),
        None => "# file: none\n".to_string(),
    };
    let origin = |id: &str| -> Option<Origin> {
        match m.value_source(id) {
            Some(clap::parser::ValueSource::CommandLine) => {
                Some(layered.origins.get(id).cloned().unwrap_or(Origin::Flag))
            }
            // A switch set to false in the file or the environment gives no flag.
            Some(_) => Some(layered.origins.get(id).cloned().unwrap_or(Origin::Default)),
            None => None,
        }
    };
    for k in keys(&run) {
        if k.id == "source" && !a.pipeline.cameras.is_empty() {
            continue;
        }
        let raw: Vec<String> =
            m.get_raw(&k.id).map(|v| v.map(|s| s.to_string_lossy().into_owned()).collect()).unwrap_or_default();
        let line = match (origin(&k.id), k.kind) {
            (None, Kind::Many) => format!("# {} = []  # unset", k.long),
            (None, _) => format!("# {}  # unset", k.long),
            (Some(o), Kind::Switch) => {
                format!("{} = {}  # {o}", k.long, raw.first().map(|s| s == "true").unwrap_or(false))
            }
            (Some(o), Kind::Many) => {
                format!("{} = [{}]  # {o}", k.long, raw.iter().map(|s| toml_value(s)).collect::<Vec<_>>().join(", "))
            }
            (Some(o), Kind::One) => {
                format!("{} = {}  # {o}", k.long, raw.first().map(|s| toml_value(s)).unwrap_or_default())
            }
        };
        out += &line;
        out.push('\n');
    }
    let from_file = matches!(layered.cameras, Some(Origin::File(_)));
    for (i, g) in a.pipeline.cameras.iter().enumerate() {
        let name = g.name.clone().unwrap_or_else(|| format!("cam{i}"));
        let fc = layered.file.as_ref().filter(|_| from_file).and_then(|f| f.cameras.iter().find(|c| c.name == name));
        let o = |key: &str| -> Origin {
            match (fc, &layered.cameras) {
                (Some(c), _) if key == "source" => Origin::File(c.line),
                (Some(c), _) => c
                    .keys
                    .iter()
                    .find(|(k, _, _)| k == key)
                    .map(|(_, _, l)| Origin::File(*l))
                    .unwrap_or(Origin::File(c.line)),
                (None, Some(o)) => o.clone(),
                (None, None) => Origin::Flag,
            }
        };
        out += &format!("\n[camera.{name}]\nsource = {}  # {}\n", quote(&redact_url(&g.source)), o("source"));
        for f in &g.flags {
            let (k, v) = f.trim_start_matches("--").split_once('=').unwrap_or((f, ""));
            out += &format!("{k} = {}  # {}\n", toml_value(v), o(k));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    /// A config file in a private temporary directory.
    fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("zcpipe.toml");
        std::fs::write(&p, text).unwrap();
        (dir, p)
    }

    fn env(v: &[(&str, &str)]) -> BTreeMap<String, String> {
        v.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    const NO_DEFAULT: &str = "/nonexistent/zcpipe.toml";

    fn run_with(p: &Path, extra: &[&str], e: &[(&str, &str)]) -> Result<(super::super::run::RunArgs, Layered), String> {
        let mut argv = os(&["zcpipe", "run", "--config", p.to_str().unwrap()]);
        argv.extend(os(extra));
        parse_run(argv, &env(e), Path::new(NO_DEFAULT))
    }

    #[test]
    fn precedence_default_file_env_flag_on_one_key() {
        let (_d, p) = file("restart-max = 7\n");
        let (none, _) = parse_run(os(&["zcpipe", "run"]), &env(&[]), Path::new(NO_DEFAULT)).unwrap();
        assert_eq!(none.restart_max, 5, "default");
        let (a, l) = run_with(&p, &[], &[]).unwrap();
        assert_eq!((a.restart_max, l.origins.get("restart_max")), (7, Some(&Origin::File(1))));
        let (a, l) = run_with(&p, &[], &[("ZCPIPE_RESTART_MAX", "9")]).unwrap();
        assert_eq!((a.restart_max, l.origins.get("restart_max")), (9, Some(&Origin::Env("ZCPIPE_RESTART_MAX".into()))));
        let (a, l) = run_with(&p, &["--restart-max", "11"], &[("ZCPIPE_RESTART_MAX", "9")]).unwrap();
        assert_eq!((a.restart_max, l.origins.get("restart_max")), (11, None));
        // The default file is read only when present; ZCPIPE_CONFIG names another; empty: none.
        let (a, _) = parse_run(os(&["zcpipe", "run"]), &env(&[]), &p).unwrap();
        assert_eq!(a.restart_max, 7);
        let (a, _) = parse_run(os(&["zcpipe", "run"]), &env(&[("ZCPIPE_CONFIG", "")]), &p).unwrap();
        assert_eq!(a.restart_max, 5);
        let (a, _) = parse_run(os(&["zcpipe", "run", "--config", "none"]), &env(&[]), &p).unwrap();
        assert_eq!(a.restart_max, 5);
        let (a, _) =
            parse_run(os(&["zcpipe", "run"]), &env(&[("ZCPIPE_CONFIG", p.to_str().unwrap())]), Path::new(NO_DEFAULT))
                .unwrap();
        assert_eq!(a.restart_max, 7);
        let e = parse_run(os(&["zcpipe", "run", "--config", "/nonexistent/x.toml"]), &env(&[]), Path::new(NO_DEFAULT))
            .unwrap_err();
        assert_eq!(e, "--config /nonexistent/x.toml: no such file (give a TOML file, or `none` for no file)");
        // Switches: the environment turns a file's `true` off.
        let (_d, p) = file("json = true\n");
        assert!(run_with(&p, &[], &[]).unwrap().0.json);
        assert!(!run_with(&p, &[], &[("ZCPIPE_JSON", "false")]).unwrap().0.json);
        // A flag conflicting with a file key wins over it (no clap conflict).
        assert!(run_with(&p, &["--no-print"], &[]).unwrap().0.no_print);
    }

    /// The stage command lines of a `zcpipe run` (everything `run` starts), host-only options.
    fn stages(a: &super::super::run::RunArgs) -> Vec<(String, Vec<String>)> {
        let c = a.config().unwrap();
        c.stage_flags
            .into_iter()
            .map(|(_, n, f)| (n, f.into_iter().filter(|f| !f.starts_with("--run-dir=")).collect()))
            .collect()
    }

    #[test]
    fn camera_sections_are_the_same_run_as_the_command_line() {
        let (_d, p) = file(
            "scaler = \"cpu\"\ninfer = \"none\"\nfps = 10\nzone = [\"all=0,0,10,0,10,10\"]\n\n[camera.front]\nsource = \"testsrc:64x48\"\nfps = 5\nzone = \"door=0,0,9,0,9,9\"\n\n[camera.back]\nsource = \"testsrc:32x32\"\nfps = 2.5\n",
        );
        let (from_file, l) = run_with(&p, &[], &[]).unwrap();
        assert_eq!(l.cameras, Some(Origin::File(6)));
        let (typed, _) = parse_run(
            os(&[
                "zcpipe",
                "run",
                "--scaler",
                "cpu",
                "--infer",
                "none",
                "--fps",
                "10",
                "--zone",
                "all=0,0,10,0,10,10",
                "--zone",
                "front:door=0,0,9,0,9,9",
                "--source",
                "front=testsrc:64x48",
                "--fps",
                "5",
                "--source",
                "back=testsrc:32x32",
                "--fps",
                "2.5",
            ]),
            &env(&[]),
            Path::new(NO_DEFAULT),
        )
        .unwrap();
        assert_eq!(from_file.pipeline.cameras, typed.pipeline.cameras);
        assert_eq!(stages(&from_file), stages(&typed));
        let cams: Vec<(String, Option<f64>)> =
            from_file.pipeline.cams().unwrap().into_iter().map(|(n, c)| (n, c.fps)).collect();
        assert_eq!(cams, vec![("front".to_string(), Some(5.0)), ("back".to_string(), Some(2.5))]);
        // A --source on the command line replaces the file's cameras; its options stay.
        let (a, l) = run_with(&p, &["--source", "testsrc:16x16"], &[]).unwrap();
        assert_eq!(
            a.pipeline.cams().unwrap().iter().map(|(n, c)| (n.as_str(), c.source.as_str(), c.fps)).collect::<Vec<_>>(),
            vec![("cam0", "testsrc:16x16", Some(10.0))]
        );
        assert_eq!(l.cameras, None);
        // And ZCPIPE_SOURCE too.
        let (a, l) = run_with(&p, &[], &[("ZCPIPE_SOURCE", "testsrc:8x8")]).unwrap();
        assert_eq!(a.pipeline.cams().unwrap()[0].1.source, "testsrc:8x8");
        assert_eq!(l.cameras, Some(Origin::Env("ZCPIPE_SOURCE".into())));
    }

    #[test]
    fn repeated_flags_are_arrays() {
        let (_d, p) = file("zone = [\"a=0,0,9,0,9,9\", \"front:b=1,1,8,1,8,8\"]\n");
        let (a, _) = run_with(&p, &[], &[]).unwrap();
        assert_eq!(
            a.track.zones.iter().map(|z| (z.camera.clone(), z.zone.name.clone())).collect::<Vec<_>>(),
            vec![(None, "a".to_string()), (Some("front".to_string()), "b".to_string())]
        );
        // One string is one zone; the flag replaces the file's whole list; the environment's are `;`-separated.
        let (_d1, p1) = file("zone = \"a=0,0,9,0,9,9\"\n");
        assert_eq!(run_with(&p1, &[], &[]).unwrap().0.track.zones.len(), 1);
        let (a, _) = run_with(&p, &["--zone", "c=0,0,5,0,5,5"], &[]).unwrap();
        assert_eq!(a.track.zones.iter().map(|z| z.zone.name.as_str()).collect::<Vec<_>>(), vec!["c"]);
        let (a, _) = run_with(&p, &[], &[("ZCPIPE_ZONE", "x=0,0,5,0,5,5; y=0,0,6,0,6,6")]).unwrap();
        assert_eq!(a.track.zones.iter().map(|z| z.zone.name.as_str()).collect::<Vec<_>>(), vec!["x", "y"]);
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let err = |text: &str| {
            let (_d, p) = file(text);
            let e = load(&p).unwrap_err();
            e.strip_prefix(&format!("{}:", p.display())).unwrap_or_else(|| panic!("{e}")).to_string()
        };
        assert_eq!(
            err("# zcpipe\nfps = 10\nfsp = 5\n"),
            "3: unknown key `fsp`: did you mean `fps`? (`zcpipe config print` lists every key)"
        );
        assert_eq!(
            err("restart_max = 5\n"),
            "1: unknown key `restart_max`: did you mean `restart-max`? (`zcpipe config print` lists every key)"
        );
        assert_eq!(err("\n\nqqqqqqqq = 1\n"), "3: unknown key `qqqqqqqq` (`zcpipe config print` lists every key)");
        assert_eq!(err("json = \"yes\"\n"), "1: json = \"yes\": expected true or false, found a string");
        assert_eq!(err("\nfps = true\n"), "2: fps = true: expected a string or a number, found a boolean");
        assert_eq!(err("buffers = [1, 2]\n"), "1: buffers = [...]: --buffers takes one value, not an array");
        let e = err("# a\n\nrestart-max = 5000\n");
        assert!(e.starts_with("3: restart-max = 5000: invalid value '5000' for '--restart-max <RESTART_MAX>': 5000 is not in 0..=1000"), "{e}");
        let e = err("fps = \"fast\"\n");
        assert!(e.starts_with("1: fps = \"fast\": invalid value 'fast' for '--fps <FPS>'"), "{e}");
        let e = err("tracker = \"deepsort\"\n");
        assert!(
            e.starts_with("1: tracker = \"deepsort\": invalid value 'deepsort' for '--tracker <TRACKER>'")
                && e.contains("possible values: bytetrack, sort, iou, none"),
            "{e}"
        );
        let e = err("[camera.front]\nsource = \"testsrc\"\nfps = \"x\"\n");
        assert!(e.starts_with("3: fps = \"x\": invalid value 'x' for '--fps <FPS>'"), "{e}");
        assert_eq!(err("[camera.front]\nsource = \"testsrc\"\nbuffers = 3\n"), "3: [camera.front] `buffers` cannot differ per camera: put it at the top of the file (a camera's keys: source, fps, size, format, capture-io, zone)");
        assert_eq!(
            err("x = 1\n[camera.front]\nfps = 3\n"),
            "1: unknown key `x` (`zcpipe config print` lists every key)"
        );
        assert_eq!(
            err("[camera.front]\nfps = 3\n"),
            "1: [camera.front] has no source: add source = \"...\" (as --source takes it)"
        );
        assert!(err("\n[camera.Front]\nsource = \"testsrc\"\n").starts_with("2: [camera.Front]: "));
        assert!(err("fps = \n").starts_with("1: "), "a TOML syntax error names its line");
        let e = err("\n\nsource = 5\n");
        assert_eq!(e, "3: source = 5: expected a string (a source, as --source takes it), found an integer");
        // A password in a refused value is masked, in the value shown and in clap's message.
        let e = err("rtsp-transport = \"rtsp://u:secret@h/x\"\n");
        assert!(
            e.starts_with(
                "1: rtsp-transport = \"rtsp://u:***@h/x\": invalid value 'rtsp://u:***@h/x' for '--rtsp-transport"
            ),
            "{e}"
        );
        assert!(!e.contains("secret"), "{e}");
    }

    #[test]
    fn a_bad_environment_value_names_the_variable() {
        let (_d, p) = file("fps = 10\n");
        let e = run_with(&p, &[], &[("ZCPIPE_FPS", "fast")]).unwrap_err();
        assert!(e.starts_with("ZCPIPE_FPS=fast: invalid value 'fast' for '--fps <FPS>'"), "{e}");
        let e = run_with(&p, &[], &[("ZCPIPE_JSON", "maybe")]).unwrap_err();
        assert_eq!(e, "ZCPIPE_JSON=maybe: --json is a switch: expected true or false (1/0, yes/no, on/off)");
        // Variables of flags given on the command line are not read at all.
        assert!(run_with(&p, &["--fps", "3"], &[("ZCPIPE_FPS", "fast")]).is_ok());
        // Other ZCPIPE_ variables (not flags) are not ours to refuse.
        assert!(run_with(&p, &[], &[("ZCPIPE_LIBRGA", "x"), ("ZCPIPE_TEST_ROOT", "/")]).is_ok());
    }

    #[test]
    fn print_shows_each_origin() {
        let (_d, p) =
            file("# c\nbuffers = 6\nrestart-max = 7\n\n[camera.front]\nsource = \"rtsp://u:secret@h/x\"\nfps = 5\n");
        let argv = os(&["zcpipe", "run", "--config", p.to_str().unwrap(), "--watchdog", "9"]);
        let t = print(argv, &env(&[("ZCPIPE_RESTART_MAX", "8")]), Path::new(NO_DEFAULT)).unwrap();
        for want in [
            "\nbuffers = 6  # file:2\n",
            "\nrestart-max = 8  # env ZCPIPE_RESTART_MAX\n",
            "\nwatchdog = 9  # flag\n",
            "\nrestart-window = 60  # default\n",
            "\njson = false  # default\n",
            "\n# format  # unset\n",
            "\n[camera.front]\nsource = \"rtsp://u:***@h/x\"  # file:5\nfps = 5  # file:7\n",
        ] {
            assert!(t.contains(want), "{want:?} in:\n{t}");
        }
        assert!(!t.contains("secret"));
        // A switch turned off by the environment says so.
        let (_d, p) = file("json = true\n");
        let t = print(
            os(&["zcpipe", "run", "--config", p.to_str().unwrap()]),
            &env(&[("ZCPIPE_JSON", "no")]),
            Path::new(NO_DEFAULT),
        )
        .unwrap();
        assert!(t.contains("\njson = false  # env ZCPIPE_JSON\n"), "{t}");
    }

    #[test]
    fn every_flag_of_run_is_a_key() {
        let k: Vec<String> = keys(&run_command()).into_iter().map(|k| k.long).collect();
        for want in ["fps", "source", "zone", "restart-max", "json", "scaler", "stats-interval", "track-high"] {
            assert!(k.contains(&want.to_string()), "{want}: {k:?}");
        }
        for not in ["config", "dry-run", "camera", "report-fd", "help"] {
            assert!(!k.contains(&not.to_string()), "{not}");
        }
    }
}
