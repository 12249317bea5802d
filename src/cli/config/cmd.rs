//! `zcpipe config check` and `zcpipe config print`.

use super::*;

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
                    crate::cli::print_out(&format!("{line}\n"));
                    Ok(0)
                }
                Err(e) => {
                    crate::cli::error_line("zcpipe config", &e);
                    Ok(2)
                }
            },
            ConfigCmd::Print { args } => {
                let argv: Vec<OsString> = ["zcpipe", "run"].into_iter().map(OsString::from).chain(args).collect();
                match print(argv, env, Path::new(DEFAULT_PATH)) {
                    Ok(text) => {
                        crate::cli::print_out(&text);
                        Ok(0)
                    }
                    Err(e) => {
                        crate::cli::error_line("zcpipe config", &e);
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
    let (args, _) = crate::cli::cameras::split(layered.args.clone()).map_err(|e| format!("{e:#}"))?;
    let matches = crate::cli::Cli::command().try_get_matches_from(args).map_err(|e| clap_line(&e))?;
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
            (None, _) if k.long == "scale-buffers" => {
                "# scale-buffers  # unset: zcpipe run sizes the pool (3 for one camera and one engine, more for more cameras and NPU contexts)".to_string()
            }
            (None, _) => format!("# {}  # unset", k.long),
            (Some(o), Kind::Switch) => {
                format!("{} = {}  # {o}", k.long, raw.first().map(|s| s == "true").unwrap_or(false))
            }
            (Some(o), Kind::Many) => {
                format!("{} = [{}]  # {o}", k.long, raw.iter().map(|s| toml_value(s)).collect::<Vec<_>>().join(", "))
            }
            (Some(o), Kind::One) => {
                let value = raw.first().map(String::as_str).unwrap_or_default();
                // A true|false value (`snapshot-new`) is a TOML boolean, not a string.
                let value = if is_bool(&run, &k.id) && matches!(value, "true" | "false") {
                    value.to_string()
                } else {
                    toml_value(value)
                };
                format!("{} = {value}  # {o}", k.long)
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

/// Whether the flag `id` of `run` takes `true` or `false` as its value.
fn is_bool(run: &clap::Command, id: &str) -> bool {
    run.get_arguments().find(|a| a.get_id() == id).is_some_and(|a| {
        let names: Vec<String> = a.get_possible_values().iter().map(|p| p.get_name().to_string()).collect();
        names == ["true", "false"]
    })
}
