//! `zcpipe detect`: one picture through a running pipeline's model, with the inference
//! service's Rust client ([`zcpipe_core::service::client`]).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use zcpipe_core::config::{check_instance, run_dir};
use zcpipe_core::schema::SocketLine;
use zcpipe_core::service::client::{image_buffer, Client, ClientError};

/// Which running pipeline's inference service to ask, and how long to wait for an answer:
/// `zcpipe detect` and `zcpipe bench service`.
#[derive(Args, Debug, Clone)]
pub struct ServiceTarget {
    /// The pipeline to ask (its `zcpipe run --instance`).
    #[arg(long, default_value = "default")]
    pub instance: String,
    /// The pipeline's run directory, if it was given one (`zcpipe run --run-dir`).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// The service's socket, if it was put elsewhere (`--serve-socket`).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Seconds to wait for an answer.
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
}

impl ServiceTarget {
    /// The socket (`--socket`, else `npu.sock` in the instance's run directory) and the wait
    /// for an answer, checked: a plain `--instance`, a `--timeout` above 0 up to an hour.
    pub fn resolve(&self) -> anyhow::Result<(PathBuf, Duration)> {
        check_instance(&self.instance)?;
        if !(self.timeout > 0.0 && self.timeout <= 3600.0) {
            anyhow::bail!("--timeout {}: use seconds above 0 up to 3600", self.timeout);
        }
        let socket = self
            .socket
            .clone()
            .unwrap_or_else(|| zcpipe_core::service::socket_path(&run_dir(&self.instance, self.run_dir.as_deref())));
        Ok((socket, Duration::from_secs_f64(self.timeout)))
    }
}

/// `zcpipe detect`.
#[derive(Args, Debug, Clone)]
pub struct DetectArgs {
    /// A JPEG or PNG picture.
    #[arg(long)]
    pub image: PathBuf,
    /// The service to ask.
    #[command(flatten)]
    pub target: ServiceTarget,
}

impl DetectArgs {
    /// Sends the picture, waits for its detections and prints them as the frame line
    /// `zcpipe run --json` prints (one JSON object). Exit 0; errors are one line.
    pub fn run(&self) -> anyhow::Result<i32> {
        let (socket, timeout) = self.target.resolve()?;
        let bytes = std::fs::read(&self.image)
            .map_err(|e| anyhow::anyhow!("cannot read image {}: {e}", self.image.display()))?;
        let max = zcpipe_core::service::MAX_BUFFER_BYTES;
        if bytes.len() as u64 > max {
            anyhow::bail!(
                "{} is {} bytes; the inference service takes pictures up to {max} bytes",
                self.image.display(),
                bytes.len()
            );
        }
        let (fd, spec) = image_buffer(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", self.image.display()))?;
        let run = || -> Result<String, ClientError> {
            let mut client = Client::connect_within(&socket, "zcpipe-detect", 0.0, timeout)?;
            let index = client.register(&[(&fd, spec)])?;
            let frame = client.detect(index)?;
            SocketLine::Frame(frame).to_line().map_err(|e| ClientError::Other(e.to_string()))
        };
        let line = run().map_err(anyhow::Error::new)?;
        print!("{line}");
        Ok(0)
    }
}
