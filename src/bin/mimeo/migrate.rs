//! `mimeo migrate`: the peers' annotations, resources, HelmDeployers and Replicas read, rules written.

use crate::{cluster_clients, connect};
use anyhow::Context;
use std::process::ExitCode;

/// `mimeo migrate`: exit 0 when the plan was printed (or, with `--apply`, applied whole), 1 when
/// the cluster could not be read, the file not parsed, or a part of it not applied.
pub async fn migrate(args: mimeo::cli::MigrateArgs) -> anyhow::Result<ExitCode> {
    let client = connect(&args.cluster).await?;
    if let Some(file) = &args.apply {
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let document: serde_json::Value =
            serde_yaml_ng::from_str(&text).with_context(|| format!("{} is not YAML", file.display()))?;
        let plan = mimeo::cmd::migrate::Plan::from_document(&document)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "{} holds no Migration (the output of mimeo migrate)",
                    file.display()
                )
            })?
            .with_context(|| format!("{} does not read as a Migration", file.display()))?;
        let clusters = cluster_clients(&args.cluster_kubeconfigs).await?;
        // Each line as it is applied, not all of them at the end.
        let applied =
            mimeo::cmd::migrate::apply::apply(&client, &clusters, &plan, Some(|line| println!("{line}")))
                .await;
        for line in &applied.unreached {
            eprintln!("{line}");
        }
        if applied.failed > 0 {
            eprintln!("{} changes not applied: see the lines with !", applied.failed);
            return Ok(ExitCode::from(1));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut inventory = mimeo::cmd::migrate::read::inventory(&client).await?;
    let mut namespaces = mimeo::cmd::migrate::helmdeployer::target_namespaces(&inventory.helm);
    namespaces.extend(mimeo::cmd::migrate::resource_replicator::target_namespaces(
        &inventory,
    ));
    let selectors = mimeo::cmd::migrate::resource_replicator::target_namespace_selectors(&inventory);
    for (cluster, client) in cluster_clients(&args.cluster_kubeconfigs).await? {
        let read =
            mimeo::cmd::migrate::read::target_cluster(&cluster, &client, &namespaces, &selectors).await?;
        inventory.clusters.insert(cluster, read);
    }
    let migration = mimeo::cmd::migrate::migrate(&inventory, &args.options());
    match args.output {
        mimeo::cli::ObjectOutput::Yaml => print!("{}", migration.to_yaml()),
        mimeo::cli::ObjectOutput::Json => {
            let document: serde_json::Value = serde_yaml_ng::from_str(&migration.to_yaml())?;
            println!("{}", serde_json::to_string_pretty(&document)?);
        }
    }
    for note in &migration.notes {
        eprintln!("note: {note}");
    }
    let platform = migration.consents.iter().map(|(ns, entries)| (None, ns, entries));
    let clusters = migration
        .cluster_consents
        .iter()
        .map(|((cluster, ns), entries)| (Some(cluster.as_str()), ns, entries));
    for (cluster, namespace, entries) in platform.chain(clusters) {
        let on = mimeo::cmd::migrate::on_cluster(cluster);
        for (entry, grant) in entries {
            eprintln!(
                "consent: namespace {namespace}{on} would accept {entry} ({}): the copy there is {}; asked for by {}{}",
                mimeo::sync::ownership::ACCEPT_FROM_ANNOTATION,
                grant.evidence,
                grant.asked_by,
                if grant.written_in.is_empty() {
                    String::new()
                } else {
                    format!(", written in namespace {}", grant.written_in)
                }
            );
        }
    }
    eprintln!(
        "{} rules; {} copies, {} of them existing (to adopt); consent asked of {} namespaces; on other Clusters, {} existing copies to adopt and consent asked of {} namespaces",
        migration.rules.len(),
        migration.copies.len(),
        migration.adoptions.len(),
        migration.consents.len(),
        migration.cluster_adoptions.len(),
        migration.cluster_consents.len()
    );
    Ok(ExitCode::SUCCESS)
}
