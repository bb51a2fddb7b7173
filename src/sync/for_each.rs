//! `targets[].forEach`: a target made once for every object of a kind (an order), with the
//! object's name and namespace filled in where the target chooses its places. Expanding a rule's
//! targets this way, before anything else looks at them, lets every later step (clusters by
//! selector, namespaces by label, namespaces created, names, removal of copies no longer wanted)
//! work on plain targets: when an order goes, its targets go, and so do their copies.
//!
//! What an object's creator controls (its name and namespace) only fills in label values, a
//! namespace or a name; so a rule that matches on both (`core.openmcp.cloud/mcp-name` and
//! `.../mcp-namespace`) gives an order in namespace `x` only the places labelled for `x`.

use super::kinds::KindRef;
use crate::api::{ForEach, Target};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

pub const OBJECT_NAME: &str = "{{object.name}}";
pub const OBJECT_NAMESPACE: &str = "{{object.namespace}}";

/// The kind a `forEach` names.
pub fn kind_of(for_each: &ForEach) -> KindRef {
    KindRef::of(Some(&for_each.api_version), &for_each.kind)
}

/// The objects each `forEach` of a rule was found to choose: namespace and name, sorted.
#[derive(Clone, Debug, Default)]
pub struct Orders(Vec<(ForEach, Vec<(String, String)>)>);

impl Orders {
    pub fn insert(&mut self, for_each: ForEach, mut objects: Vec<(String, String)>) {
        objects.sort();
        objects.dedup();
        self.0.push((for_each, objects));
    }

    fn of(&self, for_each: &ForEach) -> &[(String, String)] {
        self.0
            .iter()
            .find(|(f, _)| f == for_each)
            .map(|(_, objects)| objects.as_slice())
            .unwrap_or_default()
    }
}

/// The rule's targets with every `forEach` target made once per object it found (in the order
/// found), and the objects left out because what they would fill in is no valid label value,
/// namespace or name (as `namespace/name`).
pub fn expand(targets: &[Target], orders: &Orders) -> (Vec<Target>, Vec<String>) {
    let mut out = Vec::with_capacity(targets.len());
    let mut left_out = Vec::new();
    for target in targets {
        let Some(for_each) = &target.for_each else {
            out.push(target.clone());
            continue;
        };
        for (namespace, name) in orders.of(for_each) {
            match fill(target, namespace, name) {
                Some(filled) => out.push(filled),
                None => left_out.push(format!("{namespace}/{name}")),
            }
        }
    }
    left_out.sort();
    left_out.dedup();
    (out, left_out)
}

/// Whether a text says anything about the object.
pub fn names_object(text: &str) -> bool {
    text.contains(OBJECT_NAME) || text.contains(OBJECT_NAMESPACE)
}

/// The target for one object: placeholders filled in, `forEach` gone. `None` when a filled-in
/// label value, namespace or cluster is not valid.
fn fill(target: &Target, namespace: &str, name: &str) -> Option<Target> {
    let put = |text: &str| {
        text.replace(OBJECT_NAME, name)
            .replace(OBJECT_NAMESPACE, namespace)
    };
    let mut filled = target.clone();
    filled.for_each = None;
    if let Some(ns) = &mut filled.namespace {
        *ns = put(ns);
        is_label_value(ns).then_some(())?;
    }
    if let Some(cluster) = &mut filled.cluster {
        *cluster = put(cluster);
    }
    // Names may hold the source's placeholders too, filled in per copy later.
    filled.name = filled.name.as_deref().map(put);
    for selector in [&mut filled.namespace_selector, &mut filled.cluster_selector]
        .into_iter()
        .flatten()
    {
        fill_labels(selector, &put)?;
    }
    Some(filled)
}

fn fill_labels(selector: &mut LabelSelector, put: &impl Fn(&str) -> String) -> Option<()> {
    for value in selector.match_labels.iter_mut().flat_map(|m| m.values_mut()) {
        *value = put(value);
        is_label_value(value).then_some(())?;
    }
    Some(())
}

/// A label value: at most 63 characters, alphanumerics, `-`, `_` and `.`, alphanumeric at both
/// ends (or empty).
fn is_label_value(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    s.is_empty()
        || (s.len() <= 63
            && s.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
            && s.starts_with(alnum)
            && s.ends_with(alnum))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crossplane() -> ForEach {
        serde_json::from_value(json!({"cluster": "onboarding",
            "apiVersion": "crossplane.services.openmcp.cloud/v1alpha1", "kind": "Crossplane"}))
        .unwrap()
    }

    fn targets() -> Vec<Target> {
        serde_json::from_value(json!([
            {"forEach": crossplane(),
             "clusterSelector": {"matchLabels": {"core.openmcp.cloud/mcp-name": "{{object.name}}",
                                                 "core.openmcp.cloud/mcp-namespace": "{{object.namespace}}"}},
             "namespace": "crossplane-system", "createNamespace": true},
            {"forEach": crossplane(),
             "namespaceSelector": {"matchLabels": {"core.openmcp.cloud/mcp-name": "{{object.name}}",
                                                   "core.openmcp.cloud/mcp-namespace": "{{object.namespace}}"}},
             "name": "sp-crossplane-{{object.name}}-{{source.name}}"},
            {"namespace": "platform"},
        ]))
        .unwrap()
    }

    #[test]
    fn each_order_gets_its_own_targets() {
        let mut orders = Orders::default();
        orders.insert(
            crossplane(),
            vec![
                ("project-b".into(), "mcp-2".into()),
                ("project-a".into(), "mcp-1".into()),
            ],
        );
        let (expanded, left_out) = expand(&targets(), &orders);
        assert!(left_out.is_empty());
        let got = serde_json::to_value(&expanded).unwrap();
        assert_eq!(
            got,
            json!([
                {"clusterSelector": {"matchLabels": {"core.openmcp.cloud/mcp-name": "mcp-1",
                                                     "core.openmcp.cloud/mcp-namespace": "project-a"}},
                 "namespace": "crossplane-system", "createNamespace": true},
                {"clusterSelector": {"matchLabels": {"core.openmcp.cloud/mcp-name": "mcp-2",
                                                     "core.openmcp.cloud/mcp-namespace": "project-b"}},
                 "namespace": "crossplane-system", "createNamespace": true},
                {"namespaceSelector": {"matchLabels": {"core.openmcp.cloud/mcp-name": "mcp-1",
                                                       "core.openmcp.cloud/mcp-namespace": "project-a"}},
                 "name": "sp-crossplane-mcp-1-{{source.name}}"},
                {"namespaceSelector": {"matchLabels": {"core.openmcp.cloud/mcp-name": "mcp-2",
                                                       "core.openmcp.cloud/mcp-namespace": "project-b"}},
                 "name": "sp-crossplane-mcp-2-{{source.name}}"},
                {"namespace": "platform"},
            ])
        );
    }

    #[test]
    fn no_order_no_target_and_an_unfit_name_is_left_out() {
        let (expanded, _) = expand(&targets(), &Orders::default());
        assert_eq!(expanded.len(), 1, "only the plain target: {expanded:?}");
        let mut orders = Orders::default();
        let long = "x".repeat(64);
        orders.insert(
            crossplane(),
            vec![
                ("project-a".into(), long.clone()),
                ("project-a".into(), "ok".into()),
            ],
        );
        let (expanded, left_out) = expand(&targets(), &orders);
        assert_eq!(left_out, [format!("project-a/{long}")]);
        assert_eq!(expanded.len(), 3);
    }
}
