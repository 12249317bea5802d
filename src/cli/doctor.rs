//! `zcpipe doctor`'s command line, turned into [`crate::doctor::DoctorOptions`].

use crate::doctor::DoctorOptions;

/// `zcpipe doctor`.
#[derive(clap::Args, Debug, Clone)]
pub struct DoctorArgs {
    /// Print one JSON object (nodes, heaps, udmabuf, libraries, soc, problems) instead of text.
    #[arg(long)]
    pub json: bool,
}

impl From<DoctorArgs> for DoctorOptions {
    fn from(a: DoctorArgs) -> DoctorOptions {
        DoctorOptions { json: a.json }
    }
}
