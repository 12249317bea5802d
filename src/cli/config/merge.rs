//! Laying the file and the environment under the command line: precedence, origins, and
//! `zcpipe run`'s options parsed from the result.

use super::*;

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

impl Layered {
    /// `message`, an error about a flag's value (`--score-threshold 7: use a value in
    /// 0..=1`), with where the flag was set in front when the file or the environment set it
    /// (`zcpipe.toml:4: --score-threshold 7: ...`, `ZCPIPE_FPS=...`); any other message as it is.
    pub fn locate(&self, message: &str) -> String {
        let Some(long) = message.strip_prefix("--").and_then(|r| r.split([' ', ':', '=']).next()) else {
            return message.to_string();
        };
        let run = run_command();
        let Some(arg) = run.get_arguments().find(|a| a.get_long() == Some(long)) else { return message.to_string() };
        match (self.origins.get(arg.get_id().as_str()), &self.file) {
            (Some(Origin::File(line)), Some(f)) => format!("{}:{line}: {message}", f.path.display()),
            (Some(Origin::Env(var)), _) => format!("{var}: {message}"),
            _ => message.to_string(),
        }
    }
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
        let free: Vec<&str> =
            super::file::SCOPED.iter().filter(|(_, id)| !blocked(id, &above)).map(|(k, _)| *k).collect();
        if !blocked("source", &above) {
            if let Some((s, line)) = &f.source {
                camera_tokens.push(format!("--source={s}"));
                out.cameras = Some(Origin::File(*line));
            }
            for c in &f.cameras {
                camera_tokens.push(format!("--source={}={}", c.name, c.source));
                camera_tokens.extend(c.keys.iter().map(|(k, v, _)| format!("--{k}={v}")));
                for (key, value, line) in c.scoped.iter().filter(|(k, _, _)| free.contains(k)) {
                    file_tokens.push(format!("--{key}={value}"));
                    let id = super::file::SCOPED.iter().find(|(k, _)| k == key).map_or(*key, |(_, id)| *id);
                    out.origins.entry(id.into()).or_insert(Origin::File(*line));
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
/// the environment laid under it, and the cameras split off ([`crate::cli::cameras::split`]).
/// Errors: one line (the file's, a variable's, clap's first line).
pub fn parse_run(
    args: Vec<OsString>,
    env: &BTreeMap<String, String>,
    default: &Path,
) -> Result<(crate::cli::run::RunArgs, Layered), String> {
    let layered = layer(args, env, default)?;
    let (args, cameras) = crate::cli::cameras::split(layered.args.clone()).map_err(|e| format!("{e:#}"))?;
    let cli = crate::cli::Cli::try_parse_from(args).map_err(|e| clap_line(&e))?;
    let crate::cli::Command::Run(mut a) = cli.cmd else { return Err("not a `zcpipe run` command line".into()) };
    a.pipeline.cameras = cameras;
    Ok((*a, layered))
}
