//! `mimeo migrate`: what another copy tool copies in a cluster, as mimeo rules.
//!
//! Reading the cluster ([`read`]) gives an [`Inventory`] of plain values: namespaces, the Secrets
//! and ConfigMaps that carry another tool's annotations, and Kyverno's policies. Each tool's
//! module turns it into rules, pure and unit-tested: kubernetes-replicator ([`replicator`]),
//! kubernetes-reflector ([`reflector`]), config-syncer/kubed ([`kubed`]), Kyverno's
//! `generate` with `clone`/`cloneList` and `synchronize: true` ([`kyverno`]), openMCP
//! HelmDeployer's `secretsToCopy` ([`helmdeployer`]) and openMCP's resource replicator's
//! `Replica`s and `ClusterReplica`s ([`resource_replicator`]). A [`Migration`] holds the rules
//! (and the `ClusterInventory`s they reach other clusters through), the consent each target
//! namespace needs, the copies that tool made (or would make) that the rules are to adopt, and a
//! note for everything that could not be translated. For the openMCP tools, the same for their
//! copies on the openMCP `Cluster`s the user gave a kubeconfig for ([`Inventory::clusters`]).

pub mod apply;
pub mod helmdeployer;
pub mod kubed;
pub mod kyverno;
mod model;
mod openmcp;
mod plan;
pub mod read;
pub mod reflector;
pub mod replicator;
pub mod resource_replicator;
mod rules;
pub mod selector;
pub mod yaml;

pub use model::{
    Grant, Inventory, Migration, Namespace, Object, Options, Place, Provenance, ResourceReplicator,
    SYSTEM_NAMESPACES, Tool,
};
pub use plan::{
    PLAN_API_VERSION, PLAN_KIND, Plan, PlannedAdoption, PlannedConsent, accept_from_with, on_cluster,
};

/// Translates what the tools copy: those `options` names, else those with a sign of having run
/// here (their marks on a copy; Kyverno's policies served); a note for each one skipped.
pub fn migrate(inventory: &Inventory, options: &Options) -> Migration {
    let mut migration = Migration {
        allow_system_namespaces: options.allow_system_namespaces,
        ..Migration::default()
    };
    for tool in Tool::ALL {
        let named = options.named.contains(&tool);
        if !named && !options.named.is_empty() {
            continue;
        }
        if !named && !installed(inventory, tool) {
            migration.notes.push(format!(
                "{}: no sign of it in this cluster ({}); skipped: name it with --from {} to translate its annotations anyway",
                tool.name(),
                tool.sign(),
                tool.name()
            ));
            continue;
        }
        match tool {
            Tool::Replicator => replicator::translate(inventory, &mut migration),
            Tool::Reflector => reflector::translate(inventory, &mut migration),
            Tool::Kubed => kubed::translate(inventory, &mut migration),
            Tool::Kyverno => kyverno::translate(inventory, &mut migration),
            Tool::HelmDeployer => {
                let namespace = match options.helmdeployer_namespace.as_str() {
                    "" => helmdeployer::DEFAULT_NAMESPACE,
                    namespace => namespace,
                };
                helmdeployer::translate(inventory, &mut migration, namespace)
            }
            Tool::ResourceReplicator => resource_replicator::translate(inventory, &mut migration),
        }
    }
    migration
}

/// Whether `tool` has run in this cluster: an object carries the marks it leaves on its copies,
/// or (Kyverno) its policy kind is served.
fn installed(inventory: &Inventory, tool: Tool) -> bool {
    let marked = |o: &Object| match tool {
        Tool::Replicator => o.annotations.contains_key(replicator::REPLICATED_AT),
        Tool::Reflector => o.annotations.contains_key(reflector::REFLECTED_VERSION),
        Tool::Kubed => kubed::origin(o).is_some(),
        Tool::Kyverno | Tool::HelmDeployer | Tool::ResourceReplicator => false,
    };
    match tool {
        Tool::Kyverno => inventory.kyverno_served,
        Tool::HelmDeployer => inventory.helm.served,
        Tool::ResourceReplicator => inventory.replicas.served,
        _ => inventory
            .objects
            .iter()
            .chain(&inventory.not_migrated)
            .any(marked),
    }
}

#[cfg(test)]
mod tests {
    use super::rules::rule_name;
    use super::*;
    use serde_json::Value;

    use replicator::tests::{ns, object};

    fn tenant_and_victim() -> Inventory {
        Inventory {
            namespaces: vec![ns("tenant", &[]), ns("victim", &[]), ns("kube-system", &[])],
            objects: vec![
                // A tenant's own Secret, annotated to push into the victim and kube-system.
                object(
                    "Secret",
                    "tenant",
                    "db",
                    &[("replicator.v1.mittwald.de/replicate-to", "victim,kube-system")],
                ),
                // The victim's own Secret of that name, and one in kube-system: no copier's marks.
                object("Secret", "victim", "db", &[]),
                object("Secret", "kube-system", "db", &[(replicator::REPLICATED_AT, "x")]),
            ],
            ..Inventory::default()
        }
    }

    #[test]
    fn no_consent_and_no_adoption_without_the_old_tools_marks() {
        let m = migrate(
            &tenant_and_victim(),
            &Options {
                named: vec![Tool::Replicator],
                allow_system_namespaces: false,
                ..Options::default()
            },
        );
        assert_eq!(
            m.rules.len(),
            1,
            "the rule is still translated: it reports what stands in its way"
        );
        assert!(m.consents.is_empty(), "{:?}", m.consents);
        assert!(m.adoptions.is_empty(), "{:?}", m.adoptions);
        let notes = m.notes.join("\n");
        assert!(
            notes.contains("Secret victim/db: exists but carries no mark"),
            "{notes}"
        );
        assert!(
            notes.contains("Secret kube-system/db: in a system namespace"),
            "{notes}"
        );
        let m = migrate(
            &tenant_and_victim(),
            &Options {
                named: vec![Tool::Replicator],
                allow_system_namespaces: true,
                ..Options::default()
            },
        );
        assert_eq!(m.consents.keys().collect::<Vec<_>>(), ["kube-system"]);
    }

    #[test]
    fn a_tool_with_no_sign_of_having_run_is_skipped_unless_named() {
        let m = migrate(&tenant_and_victim(), &Options::default());
        assert_eq!(m.rules.len(), 1, "the replicator's mark in kube-system is a sign");
        let mut unmarked = tenant_and_victim();
        unmarked.objects.pop();
        let m = migrate(&unmarked, &Options::default());
        assert!(m.rules.is_empty());
        assert!(
            m.notes.iter().any(|n| n.starts_with("replicator: no sign of it")),
            "{:?}",
            m.notes
        );
        assert!(
            m.notes.iter().any(|n| n.starts_with("kyverno: no sign of it")),
            "{:?}",
            m.notes
        );
    }

    #[test]
    fn the_plan_reads_back_as_written() {
        let mut inventory = tenant_and_victim();
        inventory.objects[1]
            .annotations
            .insert(replicator::REPLICATED_AT.into(), "x".into());
        inventory.objects[0].annotations.insert(
            "replicator.v1.mittwald.de/replicate-to-matching".into(),
            "team=yes,on".into(),
        );
        let m = migrate(&inventory, &Options::default());
        let text = m.to_yaml();
        assert!(text.contains("team: \"yes\""), "{text}");
        let document: Value = serde_yaml_ng::from_str(&text).unwrap();
        let plan = Plan::from_document(&document).unwrap().unwrap();
        assert_eq!(
            plan.consent,
            [PlannedConsent {
                cluster: None,
                namespace: "victim".into(),
                accept_from: vec!["tenant/replicator-secret-db".into()]
            }]
        );
        assert_eq!(plan.adopt.len(), 1);
        assert_eq!(plan.adopt[0].rule, "SyncRule/tenant/replicator-secret-db");
        assert_eq!(plan.rules, m.rules);
    }

    #[test]
    fn consent_is_added_to_what_is_there() {
        let entries = ["a/r".to_owned()];
        assert_eq!(accept_from_with(None, &entries).as_deref(), Some("a/r"));
        assert_eq!(
            accept_from_with(Some("b, c"), &entries).as_deref(),
            Some("b,c,a/r")
        );
        assert_eq!(accept_from_with(Some("b,a/r"), &entries), None);
        assert_eq!(accept_from_with(Some("*"), &entries), None);
    }

    #[test]
    fn rule_names_fit() {
        assert_eq!(
            rule_name(&["replicator", "Secret", "db.creds"]),
            "replicator-secret-db-creds"
        );
        let long = "x".repeat(80);
        let a = rule_name(&["kubed", "ConfigMap", &long]);
        let b = rule_name(&["kubed", "ConfigMap", &format!("{long}y")]);
        assert!(a.len() <= 63 && b.len() <= 63 && a != b, "{a} {b}");
    }
}
