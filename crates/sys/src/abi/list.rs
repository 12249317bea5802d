//! The checked-in field lists (`abi/<lib>.fields`): one line per check, the value the
//! vendor's header gives on LP64 and the header file and line that define it, so that the Rust
//! definitions are compared with the header's facts even where the header itself is absent.
//!
//! ```text
//! # comments (kept when the list is rewritten)
//! size    rknn_tensor_attr                 376  rknn_api.h:310
//! offset  rknn_tensor_attr.zp              352  rknn_api.h:295
//! value   RKNN_QUERY_NATIVE_INPUT_ATTR       8  rknn_api.h:149
//! ```

use std::collections::BTreeMap;

use super::{Item, Kind};

/// One line of a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    /// The header's value (LP64).
    pub value: i128,
    /// The header file, relative to the header directory.
    pub file: String,
    /// The 1-based line in `file` that defines the item.
    pub line: usize,
}

/// A parsed list: its leading comment lines and its entries by (kind, name).
#[derive(Debug, Default)]
pub(super) struct List {
    pub comments: Vec<String>,
    pub entries: BTreeMap<(Kind, String), Entry>,
}

/// Parses a list; an error names the bad line.
pub(super) fn parse(text: &str) -> Result<List, String> {
    let mut list = List::default();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with('#') && list.entries.is_empty() {
            list.comments.push(raw.to_string());
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: &str| format!("line {}: {why}: {raw}", n + 1);
        let t: Vec<&str> = line.split_whitespace().collect();
        let [kind, name, value, at] = t[..] else { return Err(bad("want 4 columns: kind name value file:line")) };
        let kind = Kind::parse(kind).ok_or_else(|| bad("unknown kind"))?;
        let value = value.parse::<i128>().map_err(|_| bad("value is not an integer"))?;
        let (file, line_no) = at.rsplit_once(':').ok_or_else(|| bad("no file:line"))?;
        let line_no = line_no.parse::<usize>().map_err(|_| bad("line is not a number"))?;
        let e = Entry { value, file: file.to_string(), line: line_no };
        if list.entries.insert((kind, name.to_string()), e).is_some() {
            return Err(bad("listed twice"));
        }
    }
    Ok(list)
}

/// The list text for `items` with `values` (the header's) and where each is defined, after
/// `comments`.
pub(super) fn render(comments: &[String], items: &[Item], values: &[i128], at: &[(String, usize)]) -> String {
    let mut s: String = comments.iter().map(|c| format!("{c}\n")).collect();
    for ((item, v), (file, line)) in items.iter().zip(values).zip(at) {
        s += &format!("{:<7} {:<46} {:>11}  {file}:{line}\n", item.kind.word(), item.name, v);
    }
    s
}

/// A header file's lines, named as in the list.
pub(super) struct Header {
    pub file: String,
    pub lines: Vec<String>,
}

/// The code of a line: empty for a comment line, cut at a `/*` or `//` comment.
fn code(line: &str) -> &str {
    let t = line.trim();
    if t.starts_with('*') || t.starts_with("/*") || t.starts_with("//") {
        return "";
    }
    let end = [t.find("/*"), t.find("//")].into_iter().flatten().min().unwrap_or(t.len());
    t[..end].trim_end()
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The text after each whole-word occurrence of `word` in `s`.
fn after_word<'a>(s: &'a str, word: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    s.match_indices(word).filter_map(move |(i, _)| {
        let before = s[..i].chars().next_back().is_some_and(is_ident);
        let rest = &s[i + word.len()..];
        (!before && !rest.starts_with(is_ident)).then_some(rest)
    })
}

/// Whether `code` defines the constant `word`: `#define word ...` or an enumerator
/// `word = ...` / `word,` / `word`.
fn defines_value(code: &str, word: &str) -> bool {
    if let Some(d) = code.strip_prefix('#') {
        let mut t = d.split_whitespace();
        return t.next() == Some("define") && t.next().is_some_and(|n| n == word || n.starts_with(&format!("{word}(")));
    }
    let ends = |r: &str| matches!(r.trim_start().chars().next(), None | Some('=' | ','));
    code.strip_prefix(word).is_some_and(|r| !r.starts_with(is_ident) && ends(r))
}

/// Whether `code` ends the definition of type `word`: `} word;` or `typedef ... word;`.
fn defines_type(code: &str, word: &str) -> bool {
    let closes = code.starts_with('}') || code.starts_with("typedef");
    closes && after_word(code, word).any(|r| r.trim_start().starts_with(';'))
}

/// Whether `code` declares member `word`: `T word;`, `T word[N];`, `T (*word)(...);`,
/// `T word DEFAULT_INITIALIZER(...);`.
fn declares_member(code: &str, word: &str) -> bool {
    code.contains(';')
        && after_word(code, word).any(|r| {
            let r = r.trim_start();
            r.starts_with([';', '[', ')', ':', ',']) || r.starts_with("DEFAULT_INITIALIZER")
        })
}

/// The line (0-based) that closes the definition of type `ty` in `h`: the last one (a type
/// defined twice under `#ifdef`, as `rknn_context`, is the one for 64-bit targets last).
fn type_line(h: &Header, ty: &str) -> Option<usize> {
    h.lines.iter().rposition(|l| defines_type(code(l), ty))
}

/// The 0-based line of the `{` that opens the block closed on line `close`.
fn block_start(h: &Header, close: usize) -> Option<usize> {
    let mut depth = 0i32;
    for i in (0..=close).rev() {
        for c in code(&h.lines[i]).chars().rev() {
            match c {
                '}' => depth += 1,
                '{' => depth -= 1,
                _ => {}
            }
        }
        if depth <= 0 && i < close {
            return Some(i);
        }
    }
    None
}

/// Where `item` is defined in `headers` (searched in order): its file and 1-based line.
pub(super) fn find(headers: &[Header], item: &Item) -> Option<(String, usize)> {
    let (ty, member) = item.type_and_member();
    for h in headers {
        let found = match (item.kind, member) {
            (Kind::Value, _) => h.lines.iter().position(|l| defines_value(code(l), &item.name)),
            (_, None) => type_line(h, ty),
            (_, Some(m)) => type_line(h, ty).and_then(|close| {
                let open = block_start(h, close)?;
                (open..close).find(|&i| declares_member(code(&h.lines[i]), m))
            }),
        };
        if let Some(i) = found {
            return Some((h.file.clone(), i + 1));
        }
    }
    None
}

/// Whether line `line` (1-based) of `file` names `item` as its definition.
pub(super) fn names(headers: &[Header], file: &str, line: usize, item: &Item) -> bool {
    let Some(h) = headers.iter().find(|h| h.file == file) else { return false };
    let Some(text) = line.checked_sub(1).and_then(|i| h.lines.get(i)) else { return false };
    let c = code(text);
    match item.type_and_member() {
        _ if item.kind == Kind::Value => defines_value(c, &item.name),
        (ty, None) => defines_type(c, ty),
        (_, Some(m)) => declares_member(c, m),
    }
}
