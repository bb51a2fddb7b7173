//! `mimeo reseal`: a rule's copies sealed again under a new seal key.

use crate::{connect, seal_key_secret};
use std::process::ExitCode;

/// `mimeo reseal`: exit 0 when every rule was read (and with `--apply` every seal written), 1
/// otherwise.
pub async fn reseal(args: mimeo::cli::ResealArgs) -> anyhow::Result<ExitCode> {
    let client = connect(&args.cluster).await?;
    let (namespace, name) = seal_key_secret(args.seal_key_secret.clone());
    let key = mimeo::controller::seal_key::load(&client, &namespace, &name).await?;
    let outcome = mimeo::cmd::reseal::reseal(&client, &key, &args.rules, args.apply).await;
    for line in &outcome.lines {
        println!("{line}");
    }
    let verb = if args.apply { "resealed" } else { "to reseal" };
    eprintln!(
        "{} {verb}, {} refused, {} sealed already, {} failed{}",
        outcome.resealed,
        outcome.refused,
        outcome.sealed,
        outcome.failed,
        if !args.apply && outcome.resealed > 0 {
            ": look at them, then run again with --apply"
        } else {
            ""
        }
    );
    Ok(if outcome.failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
