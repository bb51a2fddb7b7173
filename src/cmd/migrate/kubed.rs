//! config-syncer (formerly kubed, AppsCode): `kubed.appscode.com/sync` on a ConfigMap or Secret
//! copies it into every other namespace (empty value) or those its label selector selects;
//! `kubed.appscode.com/sync-contexts` names kubeconfig contexts of other clusters to copy it to.

use super::model::{Inventory, Migration, Object, Provenance, Tool};
use super::rules::{entries, places, selected, selector_target, sync_rule};
use super::selector::Selector;
use serde_json::json;

const SYNC: &str = "kubed.appscode.com/sync";
const SYNC_CONTEXTS: &str = "kubed.appscode.com/sync-contexts";
const ORIGIN: &str = "kubed.appscode.com/origin";
const ORIGIN_NAMESPACE: &str = "kubed.appscode.com/origin.namespace";
const ORIGIN_NAME: &str = "kubed.appscode.com/origin.name";

/// The source a copy's marks name, `(namespace, name)`: config-syncer writes its origin on every
/// copy, as a JSON object reference in an annotation and as labels.
pub fn origin(copy: &Object) -> Option<(String, String)> {
    if let Some(text) = copy.annotations.get(ORIGIN)
        && let Ok(reference) = serde_json::from_str::<serde_json::Value>(text)
        && let (Some(ns), Some(name)) = (reference["namespace"].as_str(), reference["name"].as_str())
    {
        return Some((ns.to_owned(), name.to_owned()));
    }
    Some((
        copy.labels.get(ORIGIN_NAMESPACE)?.clone(),
        copy.labels.get(ORIGIN_NAME)?.clone(),
    ))
}

pub fn translate(inventory: &Inventory, migration: &mut Migration) {
    for source in &inventory.objects {
        let sync = source.annotations.get(SYNC);
        let contexts = source.annotations.get(SYNC_CONTEXTS);
        if sync.is_none() && contexts.is_none() {
            continue;
        }
        let what = format!("{} {}/{}", source.kind, source.namespace, source.name);
        let mut targets = Vec::new();
        let mut namespaces = Vec::new();
        if let Some(sync) = sync {
            match Selector::parse(sync) {
                Ok(selector) => {
                    let selector = serde_json::to_value(selector.to_label_selector()).unwrap_or_default();
                    namespaces = selected(inventory, &selector)
                        .into_iter()
                        .filter(|n| n.name != source.namespace)
                        .map(|n| n.name.clone())
                        .collect();
                    targets.push(selector_target(&selector, &source.namespace));
                    migration.note(
                        Tool::Kubed,
                        &what,
                        "the sync selector becomes a namespaceSelector: a namespace that matches it later needs mimeo.dev/accept-from too, as those listed here get it",
                    );
                }
                Err(e) => migration.note(
                    Tool::Kubed,
                    &what,
                    format!("{SYNC} is not a label selector: {e}; not translated"),
                ),
            }
        }
        for context in contexts.map(|c| entries(c)).unwrap_or_default() {
            targets.push(json!({"cluster": context, "namespace": source.namespace}));
            migration.note(
                Tool::Kubed,
                &what,
                format!(
                    "the context {context:?} becomes a target in the RemoteCluster {context:?}, namespace {}: register that cluster (mimeo remote rbac, then a RemoteCluster), and give that namespace there mimeo.dev/accept-from: {}; a namespace set for the context in config-syncer's own config is not read",
                    source.namespace, source.namespace
                ),
            );
        }
        if targets.is_empty() {
            continue;
        }
        let rule = sync_rule(Tool::Kubed, source, targets, None);
        let from = (source.namespace.clone(), source.name.clone());
        let evidence = |copy: &Object| {
            (origin(copy).as_ref() == Some(&from)).then(|| format!("{ORIGIN}: {}/{}", from.0, from.1))
        };
        let provenance = Provenance {
            evidence: &evidence,
            asked_by: format!("{SYNC} on {what}"),
            written_in: source.namespace.clone(),
        };
        migration.add_rule(
            inventory,
            rule,
            places(&source.kind, &source.name, namespaces),
            &provenance,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::replicator::tests::{ns, object};
    use super::super::{Inventory, migrate};
    use super::*;

    #[test]
    fn every_namespace_a_selector_and_contexts() {
        let inventory = Inventory {
            helm: Default::default(),
            clusters: Default::default(),
            kyverno_served: true,
            namespaces: vec![ns("platform", &[]), ns("a", &[("app", "kubed")]), ns("b", &[])],
            objects: vec![
                object("ConfigMap", "platform", "omni", &[(SYNC, "")]),
                object(
                    "Secret",
                    "platform",
                    "picked",
                    &[(SYNC, "app=kubed"), (SYNC_CONTEXTS, "eu-1, us-2")],
                ),
                object("Secret", "platform", "broken", &[(SYNC, "app in kubed")]),
            ],
            policies: vec![],
            ..Inventory::default()
        };
        let m = migrate(
            &inventory,
            &crate::cmd::migrate::Options {
                named: vec![Tool::Kubed],
                allow_system_namespaces: true,
                ..crate::cmd::migrate::Options::default()
            },
        );
        assert_eq!(m.rules.len(), 2);
        assert_eq!(
            m.rules[1]["spec"]["targets"],
            json!([
                {"namespaceSelector": {"matchLabels": {"app": "kubed"}, "matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["platform"]}]}},
                {"cluster": "eu-1", "namespace": "platform"},
                {"cluster": "us-2", "namespace": "platform"}])
        );
        let copies: Vec<String> = m
            .copies
            .keys()
            .map(|p| format!("{}/{}/{}", p.kind, p.namespace, p.name))
            .collect();
        assert_eq!(
            copies,
            ["ConfigMap/a/omni", "ConfigMap/b/omni", "Secret/a/picked"]
        );
        assert!(
            m.notes
                .iter()
                .any(|n| n.contains("Secret platform/broken") && n.contains("not a label selector"))
        );
    }
}
