//! `mimeo diff`: what applying a rule would change, decided by the controller's own steps.

use crate::{cluster_clients, connect};
use anyhow::Context;
use std::process::ExitCode;

/// `mimeo diff`: exit 0 when applying the rule changes nothing, 1 when it changes something, 2
/// when it would be refused, the diff failed, or a copy is undecided (`Report::exit_code`; as
/// `kubectl diff`).
pub async fn diff(args: mimeo::cli::DiffArgs) -> ExitCode {
    match diff_reports(args).await {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Diffs every rule of the file, printing each report; the exit code of the worst.
async fn diff_reports(args: mimeo::cli::DiffArgs) -> anyhow::Result<u8> {
    use mimeo::cmd::diff::{DiffOptions, Documents};
    let text = if args.file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the rule from stdin")?
    } else {
        std::fs::read_to_string(&args.file).with_context(|| format!("reading {}", args.file.display()))?
    };
    let client = connect(&args.cluster).await?;
    let documents = Documents::parse(&text, client.default_namespace())?;
    let registries: Vec<String> = documents
        .rules
        .iter()
        .flat_map(|rule| rule.spec().transforms.iter())
        .filter_map(|t| t.plugin.parse::<mimeo::plugin::oci::OciReference>().ok())
        .map(|r| r.registry)
        .collect();
    let registries: Vec<&str> = registries.iter().map(String::as_str).collect();
    let allowed_kinds = match args.allow_kinds.is_empty() {
        true => mimeo::sync::kinds::default_allowed_kinds(),
        false => args.allow_kinds.clone(),
    };
    let clusters = cluster_clients(&args.cluster_kubeconfigs).await?;
    let (lines, mut worst) =
        mimeo::cmd::diff::metadata::metadata_changes(&client, &clusters, &documents).await;
    print!("{lines}");
    for rule in &documents.rules {
        let options = DiffOptions {
            allowed_kinds: allowed_kinds.clone(),
            next_to_kinds: args.next_to_kinds.clone(),
            plugin_dir: args.plugin_dir.clone(),
            host: args.limits.host_settings(),
            oci: args.registry.oci_settings(&registries)?,
            show_secrets: args.show_secrets,
            // Step lines on a terminal; in a pipe, only the report.
            progress: std::io::IsTerminal::is_terminal(&std::io::stderr())
                .then_some(|line: &str| eprintln!("{line}")),
        };
        let code = match mimeo::cmd::diff::diff(client.clone(), rule, &documents.overlay, options).await {
            Ok(report) => {
                print!("{}", report.render());
                report.exit_code()
            }
            Err(e) => {
                eprintln!("error: {}: {e}", rule.key());
                2
            }
        };
        worst = worst.max(code);
    }
    Ok(worst)
}
