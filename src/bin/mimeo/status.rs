//! `mimeo status`: a rule's copies, as the cluster holds them.

use crate::connect;
use std::process::ExitCode;

/// `mimeo status`: the trees of the rules named, as text or JSON.
pub async fn status(args: mimeo::cli::StatusArgs) -> anyhow::Result<ExitCode> {
    use mimeo::cli::{ColorChoice, StatusOutput};
    use mimeo::cmd::status::{read, render};
    use std::io::IsTerminal;
    let client = connect(&args.cluster).await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let selection = match args.all_namespaces {
        true => read::Selection::Everywhere,
        false => read::Selection::parse(args.rule.as_deref(), &namespace)?,
    };
    let mut trees = read::read(&client, &selection).await?;
    if args.problems {
        trees.retain(|tree| !tree.is_ready());
    }
    match args.output {
        StatusOutput::Json => {
            let json = serde_json::json!({ "rules": trees });
            println!("{}", serde_json::to_string_pretty(&json)?);
        }
        StatusOutput::Text => {
            let colors = match args.color {
                ColorChoice::Always => true,
                ColorChoice::Never => false,
                ColorChoice::Auto => {
                    std::io::stdout().is_terminal()
                        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                }
            };
            let colors = if colors {
                render::Colors::On
            } else {
                render::Colors::Off
            };
            print!(
                "{}",
                render::render(&trees, k8s_openapi::jiff::Timestamp::now(), colors)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
