//! `zcpipe doctor`'s command line, turned into [`crate::doctor::DoctorOptions`].

use crate::doctor::DoctorOptions;

/// `zcpipe doctor`.
#[derive(clap::Args, Debug, Clone)]
pub struct DoctorArgs {
    /// Print one JSON object (nodes, heaps, udmabuf, drm, libraries, soc, problems) instead of text.
    #[arg(long)]
    pub json: bool,
}

impl From<DoctorArgs> for DoctorOptions {
    fn from(a: DoctorArgs) -> DoctorOptions {
        DoctorOptions { json: a.json }
    }
}

/// The plan `zcpipe run` with no flags would use: the run command's own defaults, parsed
/// from an empty command line, so doctor cannot drift from them.
pub fn default_plan() -> anyhow::Result<crate::plan::Plan> {
    #[derive(clap::Parser)]
    struct DefaultRun {
        #[command(flatten)]
        run: super::run::RunArgs,
    }
    let d = <DefaultRun as clap::Parser>::try_parse_from(["zcpipe run"])?;
    Ok(d.run.config()?.plan)
}
