//! The documentation cannot drift from the binary: the command-line reference
//! (`docs/src/user/cli.md`) and the man pages (`packaging/man/`) are what the argument parser
//! generates, and the guide's runnable examples (every ```` ```console ```` block under
//! `docs/src/`) print what the pages say. `make docs` (ZCPIPE_WRITE_DOCS=1) rewrites the
//! generated files instead of comparing them.

use std::collections::BTreeMap;
use std::path::Path;

use crate::common::root;

/// Whether this run writes the generated files (`make docs`) instead of checking them.
fn writing() -> bool {
    std::env::var_os("ZCPIPE_WRITE_DOCS").is_some_and(|v| v == "1")
}

/// The man pages clap_mangen writes for zcpipe and each of its subcommands, by file name.
fn man_pages() -> BTreeMap<String, Vec<u8>> {
    let dir = tempfile::tempdir().unwrap();
    clap_mangen::generate_to(zcpipe::cli::reference::declared(), dir.path()).unwrap();
    std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap())
        })
        .collect()
}

/// The committed man pages, by file name.
fn committed_man_pages(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            name.ends_with(".1").then(|| (name, std::fs::read(e.path()).unwrap()))
        })
        .collect()
}

#[test]
fn the_cli_reference_and_the_man_pages_are_what_the_parser_generates() {
    let page = zcpipe::cli::reference::markdown();
    let page_path = root().join("docs/src/user/cli.md");
    let man_dir = root().join("packaging/man");
    let man = man_pages();
    if writing() {
        std::fs::write(&page_path, &page).unwrap();
        for (name, _) in committed_man_pages(&man_dir) {
            std::fs::remove_file(man_dir.join(name)).unwrap();
        }
        for (name, text) in &man {
            std::fs::write(man_dir.join(name), text).unwrap();
        }
        return;
    }
    let committed = std::fs::read_to_string(&page_path).unwrap_or_default();
    assert!(
        committed == page,
        "docs/src/user/cli.md differs from what the argument parser generates: run `make docs` and commit it\n{}",
        first_difference(&committed, &page)
    );
    let committed_man = committed_man_pages(&man_dir);
    assert_eq!(
        committed_man.keys().collect::<Vec<_>>(),
        man.keys().collect::<Vec<_>>(),
        "packaging/man/ has other pages than the parser's commands: run `make docs`"
    );
    for (name, text) in &man {
        assert!(committed_man[name] == *text, "packaging/man/{name} is out of date: run `make docs` and commit it");
    }
    // One page per command, `zcpipe run` among them with its flags.
    assert!(
        man.contains_key("zcpipe.1") && man.contains_key("zcpipe-run.1") && man.contains_key("zcpipe-stage-capture.1")
    );
    assert!(String::from_utf8_lossy(&man["zcpipe-run.1"]).contains("\\-\\-copy\\-mode"));
}

/// The first line where `a` and `b` differ, both versions.
fn first_difference(a: &str, b: &str) -> String {
    for (i, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        if x != y {
            return format!("line {}:\n  committed: {x}\n  generated: {y}", i + 1);
        }
    }
    format!("committed {} lines, generated {}", a.lines().count(), b.lines().count())
}

/// Every ```` ```console ```` block of the book runs as written: each `$ zcpipe ...` line's
/// output and exit status as the page shows them (`[..]` stands for the part of a line that
/// differs between machines and runs, `...` for lines). The commands run from the
/// repository's root in a runtime directory of their own.
#[test]
fn the_guides_examples_print_what_the_pages_say() {
    let runtime = tempfile::tempdir().unwrap();
    let cases = trycmd::TestCases::new();
    cases
        .register_bin("zcpipe", Path::new(env!("CARGO_BIN_EXE_zcpipe")))
        .env("XDG_RUNTIME_DIR", runtime.path().to_string_lossy())
        .env("NO_COLOR", "1")
        // As a user runs them: not with cargo's target folder on the library path, where
        // `make test` puts the fake librknnrt.so.
        .env("LD_LIBRARY_PATH", "")
        .timeout(std::time::Duration::from_secs(60));
    for page in pages_with_examples() {
        cases.case(page);
    }
    cases.run();
}

/// The book's pages that hold a ```` ```console ```` block (at least the examples page).
fn pages_with_examples() -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root().join("docs/src")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "md")
                && std::fs::read_to_string(&p).unwrap().lines().any(|l| l.trim_end() == "```console")
            {
                out.push(p);
            }
        }
    }
    out.sort();
    assert!(out.iter().any(|p| p.ends_with("user/examples.md")), "{out:?}");
    out
}
