//! `mimeo remote rbac`: the RBAC a `RemoteCluster`'s identity needs, as YAML to apply there.

use std::process::ExitCode;

/// Prints the objects; notes on stderr when they grant writing in every namespace.
pub fn rbac(args: mimeo::cli::RemoteRbacArgs) -> anyhow::Result<ExitCode> {
    let options = args.options()?;
    let yaml = mimeo::clusters::remote_rbac::render(&options)?;
    print!("{yaml}");
    if options.grants_in_every_namespace() {
        eprintln!(
            "note: no --namespace given: the ClusterRole grants writing copies in every namespace of the cluster"
        );
    }
    Ok(ExitCode::SUCCESS)
}
