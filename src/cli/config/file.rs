//! The configuration file: TOML read with its spans, each key checked against the flags of
//! `zcpipe run` and turned into flag tokens, and its `[camera.NAME]` sections.

use super::*;

/// One key set in the file.
#[derive(Clone, Debug)]
pub(super) struct Entry {
    /// The clap id of its flag.
    pub(super) id: String,
    /// The flag tokens it stands for (`--fps=10`; none for `json = false`).
    pub(super) tokens: Vec<String>,
    /// Its line (1-based).
    pub(super) line: usize,
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
    /// Its zones, lines, loitering times, masks, filters and calibration ([`SCOPED`]), each
    /// with the camera prefix (`NAME:door=...`): key, value, line.
    pub scoped: Vec<(&'static str, String, usize)>,
}

/// The keys a camera section may repeat that become the flag with the camera's name in
/// front (`zone = ["door=..."]` is `--zone NAME:door=...`), and their clap ids.
pub const SCOPED: [(&str, &str); 6] = [
    ("zone", "zones"),
    ("line", "lines"),
    ("loiter", "loiter"),
    ("mask", "masks"),
    ("filter", "filters"),
    ("calibration", "calibrations"),
];

/// A checked configuration file.
#[derive(Clone, Debug)]
pub struct ConfigFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// The top-level keys, in file order.
    pub(super) entries: Vec<Entry>,
    /// The top-level `source` (one camera), and its line.
    pub(super) source: Option<(String, usize)>,
    /// The `[camera.NAME]` sections, in file order.
    pub cameras: Vec<FileCamera>,
}

impl ConfigFile {
    /// How many keys it sets (the top-level ones and those in camera sections).
    pub fn key_count(&self) -> usize {
        self.entries.len()
            + self.source.is_some() as usize
            + self.cameras.iter().map(|c| 1 + c.keys.len() + c.scoped.len().min(1)).sum::<usize>()
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
    use std::io::Read;
    let cannot = |e: std::io::Error| format!("{}: cannot read: {e}", path.display());
    let f = std::fs::File::open(path).map_err(cannot)?;
    let meta = f.metadata().map_err(cannot)?;
    // Checked before reading: a device (/dev/zero) or a huge file is refused, not read.
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return Err(format!(
            "{}: not a configuration file ({}); give a TOML file of at most {} KiB",
            path.display(),
            if meta.is_file() { format!("{} bytes", meta.len()) } else { "not a regular file".into() },
            MAX_FILE_BYTES / 1024
        ));
    }
    let mut text = String::new();
    f.take(MAX_FILE_BYTES).read_to_string(&mut text).map_err(cannot)?;
    parse(path, &text, &run_command())
}

/// The largest configuration file read, in bytes: a few cameras with their zones are a few
/// KiB.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

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
    let per_camera: Vec<&str> = super::super::cameras::section_keys();
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
        let mut cam = FileCamera { name: n.clone(), line, source: String::new(), keys: vec![], scoped: vec![] };
        for (k, v) in section.iter() {
            let (key, kline, val) = (k.get_ref().as_ref(), line_of(text, k.span().start), v.get_ref());
            if let Some(&(key, _)) = SCOPED.iter().find(|(k, _)| *k == key) {
                let items: Vec<&DeValue<'_>> = match val {
                    DeValue::Array(a) => a.iter().map(|i| i.get_ref()).collect(),
                    v => vec![v],
                };
                for item in items {
                    let Some(z) = item.as_str() else {
                        return Err(format!(
                            "{file}:{kline}: {key} = {}: expected {key} values as strings (as --{key} takes them), found {}",
                            shown(item),
                            type_name(item)
                        ));
                    };
                    let z = format!("{n}:{z}");
                    check_value(run, key, &z).map_err(|e| format!("{file}:{kline}: {key} = {}: {e}", shown(item)))?;
                    cam.scoped.push((key, z, kline));
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
                    "{file}:{kline}: [camera.{n}] {why} (a camera's keys: source, {}, zone, line, loiter, mask, filter, calibration)",
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
