//! The command-line reference page of the book (`docs/src/user/cli.md`), written from clap's
//! own description of every subcommand and flag, and the configuration file's keys from the
//! same place ([`super::config::reference_keys`]). `make docs` writes it; a test fails when
//! the committed page differs from what this returns, so the page cannot drift from the
//! binary. The man pages come from the same [`command`] (clap_mangen, in that test).

use std::fmt::Write as _;

use clap::{Arg, Command, CommandFactory};

/// zcpipe's clap command, built (global flags propagated to every subcommand).
pub fn command() -> Command {
    let mut cli = super::Cli::command();
    cli.build();
    cli
}

/// zcpipe's clap command as declared, not built (clap_mangen builds it without the `help`
/// subcommands).
pub fn declared() -> Command {
    super::Cli::command()
}

/// The reference page, Markdown.
pub fn markdown() -> String {
    let cli = command();
    let mut out = String::new();
    out.push_str(
        "# Command-line reference\n\n\
         <!-- Written by `make docs` from zcpipe's argument parser; edit the help texts in src/cli/, never this page. -->\n\n\
         Every subcommand and flag with its help text and default, as `zcpipe <command> --help` prints them. \
         `make docs` writes this page from the binary's own argument parser, and `make test` fails when it \
         differs, so it is never out of date. The last section lists the [configuration file](config.md)'s keys.\n\n",
    );
    let mut all = Vec::new();
    walk(&cli, "", &mut all);
    for (path, _) in &all {
        let _ = writeln!(out, "- [{path}](#{})", anchor(path));
    }
    out.push_str("- [Configuration file keys](#configuration-file-keys)\n");
    for (path, cmd) in &all {
        section(&mut out, path, cmd);
    }
    config_keys(&mut out);
    out
}

/// Every command with its full name (`zcpipe stage capture`), depth first, parents first.
fn walk<'a>(cmd: &'a Command, parent: &str, out: &mut Vec<(String, &'a Command)>) {
    let path = if parent.is_empty() { cmd.get_name().to_string() } else { format!("{parent} {}", cmd.get_name()) };
    out.push((path.clone(), cmd));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        walk(sub, &path, out);
    }
}

/// mdBook's anchor of a heading made of `text` (lower case, spaces as `-`).
fn anchor(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// One command's section: what it does, its usage, its subcommands and its flags.
fn section(out: &mut String, path: &str, cmd: &Command) {
    let _ = writeln!(out, "\n## {path}\n");
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{}\n", escape(&about.to_string()));
    }
    let usage = cmd.clone().bin_name(path).render_usage().to_string();
    let usage = usage.trim_start_matches("Usage: ");
    let _ = writeln!(out, "```text\n{usage}\n```\n");
    let subs: Vec<&Command> = cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help").collect();
    if !subs.is_empty() {
        out.push_str("Commands:\n\n");
        for s in subs {
            let sub_path = format!("{path} {}", s.get_name());
            let about = s.get_about().map(|a| a.to_string()).unwrap_or_default();
            let _ = writeln!(out, "- [`{}`](#{}): {}", s.get_name(), anchor(&sub_path), escape(first_line(&about)));
        }
        out.push('\n');
    }
    // Global flags are listed once, under `zcpipe`.
    let args: Vec<&Arg> =
        cmd.get_arguments().filter(|a| !a.is_hide_set() && (path == "zcpipe" || !a.is_global_set())).collect();
    if args.is_empty() {
        return;
    }
    out.push_str(if path == "zcpipe" { "Options of every command:\n\n" } else { "Options:\n\n" });
    for a in args {
        arg_item(out, a);
    }
}

/// One flag or positional argument as a list item: its names and value, its help, its
/// default and its possible values.
fn arg_item(out: &mut String, a: &Arg) {
    let values: Vec<String> =
        a.get_value_names().map(|v| v.iter().map(|n| format!("<{n}>")).collect()).unwrap_or_default();
    let takes_value = a.get_num_args().is_some_and(|n| n.takes_values()) || a.is_positional();
    let value = if takes_value && !values.is_empty() {
        values.join(" ")
    } else if takes_value {
        format!("<{}>", a.get_id().as_str().to_uppercase())
    } else {
        String::new()
    };
    let mut names = Vec::new();
    if let Some(s) = a.get_short() {
        names.push(format!("-{s}"));
    }
    if let Some(l) = a.get_long() {
        names.push(format!("--{l}"));
    }
    let name = if a.is_positional() {
        value.clone()
    } else if value.is_empty() {
        names.join(", ")
    } else {
        format!("{} {value}", names.join(", "))
    };
    let help = a.get_long_help().or(a.get_help()).map(|h| h.to_string()).unwrap_or_default();
    let _ = write!(out, "- `{name}`");
    let mut lines = help.lines();
    if let Some(first) = lines.next() {
        let _ = write!(out, ": {}", escape(first));
    }
    out.push('\n');
    for l in lines {
        if l.trim().is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(out, "  {}", escape(l));
        }
    }
    let mut facts = Vec::new();
    let defaults: Vec<String> = a.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
    if !defaults.is_empty() && takes_value {
        facts.push(format!("Default: `{}`.", defaults.join(",")));
    }
    let possible: Vec<String> =
        a.get_possible_values().iter().filter(|p| !p.is_hide_set()).map(|p| format!("`{}`", p.get_name())).collect();
    if !possible.is_empty() && takes_value {
        facts.push(format!("One of {}.", possible.join(", ")));
    }
    if !facts.is_empty() {
        let _ = writeln!(out, "\n  {}", facts.join(" "));
    }
}

/// The configuration file's keys: each with its flag and environment variable.
fn config_keys(out: &mut String) {
    out.push_str(
        "\n## Configuration file keys\n\n\
         Each key of the [configuration file](config.md) is a flag of `zcpipe run` without its dashes, \
         and each can also be given as an environment variable; precedence: flag, then variable, then file, \
         then the default.\n\n\
         | key | flag | variable | takes |\n|---|---|---|---|\n",
    );
    for (key, env, takes) in super::config::reference_keys() {
        let _ = writeln!(out, "| `{key}` | [`--{key}`](#zcpipe-run) | `{env}` | {takes} |");
    }
    let cam: Vec<String> = super::config::reference_camera_keys().iter().map(|k| format!("`{k}`")).collect();
    let _ = writeln!(
        out,
        "\nA `[camera.NAME]` section takes `source` (required), `zone` (a list) and {}. `detect-fps` and \
         `weight` are per camera on the command line (after a `--source`), one value for every camera in the file.",
        cam.join(", ")
    );
}

/// The first line of a help text.
fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// Help text for Markdown: `<` outside code spans would start an HTML tag.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_code = false;
    for c in s.chars() {
        match c {
            '`' => {
                in_code = !in_code;
                out.push(c);
            }
            '<' if !in_code => out.push_str("&lt;"),
            '>' if !in_code => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_are_mdbooks() {
        assert_eq!(anchor("zcpipe stage capture"), "zcpipe-stage-capture");
        assert_eq!(anchor("Configuration file keys"), "configuration-file-keys");
    }

    #[test]
    fn angle_brackets_outside_code_are_escaped() {
        assert_eq!(escape("a <b> `<c>`"), "a &lt;b&gt; `<c>`");
    }

    #[test]
    fn every_subcommand_and_key_is_on_the_page() {
        let page = markdown();
        for h in ["## zcpipe run", "## zcpipe stage capture", "## zcpipe config check", "## zcpipe bench ipc"] {
            assert!(page.contains(&format!("\n{h}\n")), "{h} missing");
        }
        assert!(
            page.contains("- `--frames <FRAMES>`: Stop after this many frames"),
            "{}",
            &page[..2000.min(page.len())]
        );
        assert!(page.contains("| `fps` | [`--fps`](#zcpipe-run) | `ZCPIPE_FPS` | one value |"));
    }
}
