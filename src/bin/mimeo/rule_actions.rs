//! `mimeo suspend`, `resume` and `reconcile`: a rule stopped, let go, or asked for a pass now.

use crate::connect;
use mimeo::cli::RuleActionArgs;
use mimeo::cmd::rule_actions::{Action, Rule, act as carry_out};
use mimeo::cmd::status::read::Selection;
use std::process::ExitCode;
use std::time::Duration;

/// Exit 0 when it was carried out (for `reconcile`, the pass made), 1 with why otherwise.
pub async fn act(
    args: RuleActionArgs,
    action: Action,
    timeout: Option<Duration>,
) -> anyhow::Result<ExitCode> {
    let client = connect(&args.cluster).await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let selection = Selection::parse(Some(&args.rule), &namespace)?;
    let rule = Rule::named(&client, &selection)?;
    match carry_out(&rule, action, timeout.unwrap_or_default()).await {
        Ok(said) => {
            println!("{said}");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(1))
        }
    }
}
