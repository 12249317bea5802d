//! One library's check: the Rust values against the field list and, when the headers are
//! there, against the compiler's values; a table of every disagreement.

use std::path::PathBuf;

use super::list::{self, Header, List};
use super::probe::{self, Outcome};
use super::{abi_dir, env_names, header_dir, read_headers, say, Item, Lib};

/// One disagreement, for the table.
#[derive(Debug)]
pub(super) struct Row {
    pub check: String,
    pub c: Option<i128>,
    pub list: Option<i128>,
    pub rust: Option<i128>,
    pub at: String,
    pub problem: String,
}

/// The compiler's values over the headers in `dir`.
pub(super) struct Probed {
    pub dir: PathBuf,
    pub how: String,
    pub cc: String,
    pub values: Vec<i128>,
    pub headers: Vec<Header>,
}

/// The headers probed, `Ok(Err(why))` when skipped (no headers, no compiler), `Err` when the
/// probe failed (a header without an item the Rust side names, ...).
fn probe_headers(lib: &Lib, items: &[Item]) -> Result<Result<Probed, String>, String> {
    let (dir, how) = match header_dir(lib) {
        Ok(d) => d,
        Err(why) => return Ok(Err(why)),
    };
    let headers = read_headers(lib, &dir).map_err(|e| format!("headers from {how}: {e}"))?;
    let template_path = abi_dir().join("probe.c.in");
    let template = std::fs::read_to_string(&template_path).map_err(|e| format!("{}: {e}", template_path.display()))?;
    let exprs: Vec<String> = items.iter().map(Item::c_expr).collect();
    let source = probe::render(&template, lib.include, &exprs);
    match probe::run(&source, &dir, exprs.len(), lib.name) {
        Outcome::Values(v, cc) => {
            let values = v.into_iter().map(i128::from).collect();
            Ok(Ok(Probed { dir, how, cc, values, headers }))
        }
        Outcome::Skipped(why) => Ok(Err(why)),
        Outcome::Failed(why) => Err(why),
    }
}

fn row(item: &Item, c: Option<i128>, list: Option<&list::Entry>, problem: String) -> Row {
    Row {
        check: format!("{} {}", item.kind.word(), item.name),
        c,
        list: list.map(|e| e.value),
        rust: Some(item.rust),
        at: list.map_or_else(|| "-".into(), |e| format!("{}:{}", e.file, e.line)),
        problem,
    }
}

/// Every disagreement between the Rust values, the list (when `lp64`: it holds LP64 values)
/// and the probe (when there is one). Also: items missing from the list, list entries no item
/// has, and listed lines that do not define their item.
pub(super) fn compare(items: &[Item], list: &List, probed: Option<&Probed>, lp64: bool, list_name: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let e = list.entries.get(&(item.kind, item.name.clone()));
        let c = probed.map(|p| p.values[i]);
        let mut why = Vec::new();
        match e {
            None => why.push(format!("not in abi/{list_name}")),
            Some(e) if lp64 && e.value != item.rust => why.push("Rust != list".to_string()),
            _ => {}
        }
        if let Some(c) = c {
            if c != item.rust {
                why.push("Rust != header".into());
            }
            if e.is_some_and(|e| e.value != c) {
                why.push("list != header (stale list: ZCPIPE_ABI_UPDATE=1)".into());
            }
        }
        if let (Some(p), Some(e)) = (probed, e) {
            if !list::names(&p.headers, &e.file, e.line, item) {
                why.push(format!("{}:{} does not define it", e.file, e.line));
            }
        }
        if !why.is_empty() {
            rows.push(row(item, c, e, why.join("; ")));
        }
    }
    for ((kind, name), e) in &list.entries {
        if !items.iter().any(|i| i.kind == *kind && i.name == *name) {
            let check = format!("{} {name}", kind.word());
            let (at, problem) = (format!("{}:{}", e.file, e.line), "listed, but not in the Rust table".into());
            rows.push(Row { check, c: None, list: Some(e.value), rust: None, at, problem });
        }
    }
    rows
}

/// The rows as a table.
pub(super) fn table(rows: &[Row]) -> String {
    let n = |v: Option<i128>| v.map_or_else(|| "-".into(), |v| v.to_string());
    let line = |check: &str, c: &str, list: &str, rust: &str, at: &str, problem: &str| {
        format!("{check:<48} {c:>11} {list:>11} {rust:>11}  {at:<22} {problem}\n")
    };
    let mut s = line("check", "header (C)", "list", "Rust", "where", "problem");
    for r in rows {
        s += &line(&r.check, &n(r.c), &n(r.list), &n(r.rust), &r.at, &r.problem);
    }
    s
}

/// Rewrites `abi/<lib>.fields` from the probe (`ZCPIPE_ABI_UPDATE`), keeping its comments.
fn update_list(lib: &Lib, items: &[Item], list: &List, p: &Probed) -> Result<List, String> {
    let mut at = Vec::new();
    for item in items {
        let found = list::find(&p.headers, item);
        let why = || format!("{} {}: no line of {:?} defines it", item.kind.word(), item.name, lib.headers);
        at.push(found.ok_or_else(why)?);
    }
    let text = list::render(&list.comments, items, &p.values, &at);
    let path = abi_dir().join(lib.list);
    std::fs::write(&path, &text).map_err(|e| format!("{}: {e}", path.display()))?;
    say(&format!("sys::abi {}: wrote {} from {}", lib.name, path.display(), p.dir.display()));
    list::parse(&text)
}

/// Runs `lib`'s check: panics with the table of disagreements, says what ran and what was
/// skipped on stderr.
pub(super) fn run(lib: &Lib) {
    let items = (lib.items)().0;
    let list_path = abi_dir().join(lib.list);
    let text = std::fs::read_to_string(&list_path).unwrap_or_else(|e| panic!("{}: {e}", list_path.display()));
    let mut list = list::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", list_path.display()));
    let probed = probe_headers(lib, &items);
    let probed = probed.unwrap_or_else(|e| panic!("sys::abi {}: the header probe failed: {e}", lib.name));
    if let Ok(p) = &probed {
        if env_names("ZCPIPE_ABI_UPDATE", lib.name) {
            list = update_list(lib, &items, &list, p).unwrap_or_else(|e| panic!("sys::abi {}: {e}", lib.name));
        }
    }
    let lp64 = cfg!(target_pointer_width = "64");
    let rows = compare(&items, &list, probed.as_ref().ok(), lp64, lib.list);
    let vs_list = if lp64 {
        format!("against abi/{}", lib.list)
    } else {
        "list SKIPPED (it holds LP64 values; this target is not LP64)".into()
    };
    let vs_header = match &probed {
        Ok(p) => format!("against the header in {} ({}), compiled by {}", p.dir.display(), p.how, p.cc),
        Err(why) => format!("header check SKIPPED: {why} (abi/README.md)"),
    };
    say(&format!("sys::abi {}: {} checks {vs_list}; {vs_header}: {} problems", lib.name, items.len(), rows.len()));
    if let Err(why) = &probed {
        if env_names("ZCPIPE_ABI_REQUIRE", lib.name) {
            panic!("sys::abi {}: $ZCPIPE_ABI_REQUIRE asks for the header check, which was skipped: {why}", lib.name);
        }
    }
    if !rows.is_empty() {
        let (name, list) = (lib.name, lib.list);
        panic!("sys::abi {name}: the Rust definitions, abi/{list} and the header disagree:\n{}", table(&rows));
    }
}
