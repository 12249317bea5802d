//! Class names: from the model when it carries them (Ultralytics writes a `names` entry in
//! an ONNX export's metadata), else from `--labels`, else the 80 COCO names for an
//! 80-class model ([`resolve_labels`]). A count that does not match the model's classes is
//! an error naming both sides.

use std::path::Path;

use anyhow::{bail, Context, Result};

/// The 80 COCO detection classes in the models' output order (`models/coco80.txt`, the
/// order of YOLOX `COCO_CLASSES`, Ultralytics `coco.yaml` and YOLOv5 `coco.yaml`).
pub(crate) const COCO80_TEXT: &str = include_str!("../../../models/coco80.txt");

/// The 80 COCO names ([`COCO80_TEXT`]), class 0 first.
pub fn coco80() -> Vec<String> {
    COCO80_TEXT.lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect()
}

/// Reads a label list: one label per line, line 1 is class 0 (`models/coco80.txt`, the 80
/// COCO names in YOLOX `COCO_CLASSES` order). Trailing `\r` and surrounding whitespace are
/// trimmed; a trailing empty line is ignored. Errors name the path and the fix when the file
/// is missing, unreadable or has no labels.
pub(crate) fn load_labels(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read label file {}: pass a text file with one class name per line, class 0 first (e.g. models/coco80.txt)",
            path.display()
        )
    })?;
    let mut labels: Vec<String> = text.lines().map(|l| l.trim().to_string()).collect();
    while labels.last().is_some_and(|l| l.is_empty()) {
        labels.pop();
    }
    if labels.is_empty() {
        bail!(
            "label file {} is empty: it needs one class name per line, class 0 first (e.g. models/coco80.txt)",
            path.display()
        );
    }
    Ok(labels)
}

/// Parses the class names of an Ultralytics export's `names` metadata: the Python `repr` of
/// a dict from class index to name, `{0: 'person', 1: 'bicycle', 2: "driver's seat"}`
/// (single or double quotes, backslash escapes). The indices must be 0, 1, ... in any
/// order, each once; the result is in index order.
#[cfg_attr(not(feature = "onnx"), allow(dead_code))] // the ONNX backend's
pub(crate) fn parse_names_dict(text: &str) -> Result<Vec<String>> {
    let mut p = text.trim().chars().peekable();
    let fail = |what: &str| anyhow::anyhow!("model names `{}` are not a {{index: 'name'}} dict: {what}", short(text));
    if p.next() != Some('{') {
        return Err(fail("no opening brace"));
    }
    let mut pairs: Vec<(usize, String)> = Vec::new();
    loop {
        while p.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
            p.next();
        }
        match p.peek() {
            Some('}') => break,
            None => return Err(fail("no closing brace")),
            _ => {}
        }
        let mut digits = String::new();
        while let Some(c) = p.peek().copied().filter(char::is_ascii_digit) {
            digits.push(c);
            p.next();
        }
        let index: usize = digits.parse().map_err(|_| fail("a key is not a class index"))?;
        while p.peek().is_some_and(|c| c.is_whitespace()) {
            p.next();
        }
        if p.next() != Some(':') {
            return Err(fail("no colon after a key"));
        }
        while p.peek().is_some_and(|c| c.is_whitespace()) {
            p.next();
        }
        let quote = match p.next() {
            Some(q @ ('\'' | '"')) => q,
            _ => return Err(fail("a name is not quoted")),
        };
        let mut name = String::new();
        loop {
            match p.next() {
                Some('\\') => match p.next() {
                    Some('n') => name.push('\n'),
                    Some('t') => name.push('\t'),
                    Some(c) => name.push(c),
                    None => return Err(fail("unterminated name")),
                },
                Some(c) if c == quote => break,
                Some(c) => name.push(c),
                None => return Err(fail("unterminated name")),
            }
        }
        pairs.push((index, name));
    }
    if pairs.is_empty() {
        return Err(fail("no names"));
    }
    pairs.sort_by_key(|(i, _)| *i);
    for (want, (i, _)) in pairs.iter().enumerate() {
        if *i != want {
            return Err(fail(&format!("class {want} is missing or given twice")));
        }
    }
    Ok(pairs.into_iter().map(|(_, n)| n).collect())
}

/// The first 60 characters of a text, for messages.
#[cfg_attr(not(feature = "onnx"), allow(dead_code))] // the ONNX backend's
fn short(text: &str) -> String {
    let mut s: String = text.chars().take(60).collect();
    if text.chars().count() > 60 {
        s.push_str("...");
    }
    s
}

/// Where the labels came from, for the start-up log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LabelSource {
    /// The model's own names (ONNX metadata `names`).
    Model,
    /// `--labels FILE`.
    File,
    /// The built-in COCO 80 names.
    Coco80,
}

/// The labels of a model: its own `names` when it carries them (`--labels`, if also given,
/// must list the same names), else `--labels`, else COCO 80 when the model scores 80
/// classes (or has no model: `--infer none`). Errors, on one line naming both sides: a
/// label file whose count is not the model's class count, names that disagree with the
/// model's own, a model whose names do not match its class count, or a model of another
/// class count with no names and no `--labels`.
pub(crate) fn resolve_labels(
    model: &Path,
    classes: Option<usize>,
    embedded: Option<Vec<String>>,
    flag: Option<&Path>,
) -> Result<(Vec<String>, LabelSource)> {
    if let Some(names) = embedded {
        if let Some(n) = classes.filter(|n| *n != names.len()) {
            bail!(
                "model {} carries {} class names in its metadata but scores {n} classes: its names do not belong to it; re-export the model",
                model.display(),
                names.len()
            );
        }
        if let Some(path) = flag {
            let file = load_labels(path)?;
            if file.len() != names.len() {
                bail!(
                    "label file {} has {} names but model {} carries {} names of its own: drop --labels to use the model's names, or pass a file with the same {}",
                    path.display(),
                    file.len(),
                    model.display(),
                    names.len(),
                    names.len()
                );
            }
            if let Some(i) = (0..file.len()).find(|&i| file[i] != names[i]) {
                bail!(
                    "label file {} names class {i} `{}` but model {} names it `{}`: drop --labels to use the model's names, or pass a file with the same names",
                    path.display(),
                    file[i],
                    model.display(),
                    names[i]
                );
            }
        }
        return Ok((names, LabelSource::Model));
    }
    if let Some(path) = flag {
        let labels = load_labels(path)?;
        if let Some(n) = classes.filter(|n| *n != labels.len()) {
            bail!(
                "label file {} has {} names but model {} scores {n} classes: pass the model's own label file (models/coco80.txt for the bundled YOLOX-Nano)",
                path.display(),
                labels.len(),
                model.display()
            );
        }
        return Ok((labels, LabelSource::File));
    }
    match classes {
        None | Some(80) => Ok((coco80(), LabelSource::Coco80)),
        Some(n) => bail!(
            "model {} scores {n} classes and carries no class names: pass --labels with a file of {n} names, one per line, class 0 first",
            model.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coco80_labels_load() {
        let labels = load_labels(&zcpipe_core::data::source_root().join("models/coco80.txt")).unwrap();
        assert_eq!(labels.len(), 80);
        assert_eq!((labels[0].as_str(), labels[1].as_str(), labels[2].as_str()), ("person", "bicycle", "car"));
        assert_eq!((labels[16].as_str(), labels[79].as_str()), ("dog", "toothbrush"));
        assert_eq!(coco80(), labels);
    }

    #[test]
    fn missing_or_empty_labels_name_the_path() {
        let err = load_labels(Path::new("/nonexistent/labels.txt")).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/labels.txt") && err.contains("models/coco80.txt"), "{err}");
        let (_dir, empty) = zcpipe_core::testing::file_with("empty.txt", "\n\n");
        let err = load_labels(&empty).unwrap_err().to_string();
        assert!(err.contains("empty.txt") && err.contains("is empty"), "{err}");
    }

    #[test]
    fn ultralytics_names_parse() {
        assert_eq!(parse_names_dict("{0: 'person', 1: 'bicycle', 2: 'car'}").unwrap(), ["person", "bicycle", "car"]);
        // Double quotes for a name with an apostrophe, escapes, any key order, trailing comma.
        assert_eq!(
            parse_names_dict(r#"{1: "driver's seat", 0: 'a\'b', 2: 'back\\slash',}"#).unwrap(),
            ["a'b", "driver's seat", "back\\slash"]
        );
        assert_eq!(parse_names_dict("{0: 'only'}").unwrap(), ["only"]);
        for bad in ["[0, 1]", "{0: 'a', 2: 'c'}", "{0: 'a', 0: 'b'}", "{0: a}", "{x: 'a'}", "{0: 'a'", "{}", "{0 'a'}"]
        {
            let err = parse_names_dict(bad).unwrap_err().to_string();
            assert!(err.starts_with("model names `"), "{bad}: {err}");
        }
    }

    #[test]
    fn labels_come_from_the_model_then_the_flag_then_coco() {
        let m = Path::new("m.onnx");
        let names = vec!["cat".to_string(), "dog".to_string()];
        let (_dir, two) = zcpipe_core::testing::file_with("two.txt", "cat\ndog\n");
        let (_dir2, other) = zcpipe_core::testing::file_with("other.txt", "cat\nwolf\n");
        let (_dir3, three) = zcpipe_core::testing::file_with("three.txt", "a\nb\nc\n");
        assert_eq!(resolve_labels(m, Some(2), Some(names.clone()), None).unwrap(), (names.clone(), LabelSource::Model));
        assert_eq!(resolve_labels(m, Some(2), Some(names.clone()), Some(&two)).unwrap().1, LabelSource::Model);
        let err = resolve_labels(m, Some(2), Some(names.clone()), Some(&other)).unwrap_err().to_string();
        assert!(err.contains("other.txt names class 1 `wolf` but model m.onnx names it `dog`"), "{err}");
        let err = resolve_labels(m, Some(2), Some(names.clone()), Some(&three)).unwrap_err().to_string();
        assert!(err.contains("three.txt has 3 names but model m.onnx carries 2 names of its own"), "{err}");
        let err = resolve_labels(m, Some(3), Some(names.clone()), None).unwrap_err().to_string();
        assert!(err.contains("carries 2 class names in its metadata but scores 3 classes"), "{err}");
        assert_eq!(resolve_labels(m, Some(3), None, Some(&three)).unwrap().1, LabelSource::File);
        let err = resolve_labels(m, Some(80), None, Some(&three)).unwrap_err().to_string();
        assert!(err.contains("three.txt has 3 names but model m.onnx scores 80 classes"), "{err}");
        let (labels, src) = resolve_labels(m, Some(80), None, None).unwrap();
        assert_eq!((labels.len(), src), (80, LabelSource::Coco80));
        assert_eq!(resolve_labels(m, None, None, None).unwrap().1, LabelSource::Coco80);
        let err = resolve_labels(m, Some(3), None, None).unwrap_err().to_string();
        assert!(err.contains("model m.onnx scores 3 classes and carries no class names: pass --labels"), "{err}");
    }
}
