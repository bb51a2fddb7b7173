//! The command line: flags parsed into plain values, then handed to the parts that do the work.

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "mimeo",
    version,
    about = "Copies Kubernetes objects between namespaces and clusters"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the CustomResourceDefinitions mimeo serves, as YAML.
    Crds,
}
