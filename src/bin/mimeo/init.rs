//! `mimeo init`: the CRDs and the seal key, before `run` starts.

use crate::{connect, seal_key_secret};
use std::process::ExitCode;
use std::time::Duration;

/// Exit 0 when the CRDs are applied and Established and the seal key exists; 1 with what failed.
pub async fn init(args: mimeo::cli::InitArgs) -> anyhow::Result<ExitCode> {
    mimeo::telemetry::init(args.log.filter(&args.platform), args.log.log_format)
        .map_err(anyhow::Error::msg)?;
    crate::log_platform(&args.platform);
    let client = connect(&args.cluster).await?;
    let (namespace, name) = seal_key_secret(args.seal_key_secret.clone());
    let wait = Duration::from_secs(args.wait_seconds.max(1));
    match mimeo::cmd::init::init(&client, (&namespace, &name), wait).await {
        Ok(done) => {
            tracing::info!(crds = done.crds.len(), seal_key = %format!("{namespace}/{name}"), "init done");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            tracing::error!(error = %mimeo::error_text::with_causes(&e), "init failed");
            eprintln!("mimeo init: {}", mimeo::error_text::with_causes(&e));
            Ok(ExitCode::FAILURE)
        }
    }
}
