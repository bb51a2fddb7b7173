use anyhow::Context;
use clap::Parser;
use mimeo::cli::{Cli, Command};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds => {
            let yaml = mimeo::api::crds_yaml().context("rendering the CRDs as YAML")?;
            print!("{yaml}");
        }
    }
    Ok(())
}
