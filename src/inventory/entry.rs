//! An inventory entry (an openMCP `Cluster`, a Cluster API `Cluster`, a `ClusterProfile`) and
//! the `RemoteCluster` it becomes: its name, its labels, its origin.

use crate::api::{ClusterInventorySpec, Origin};
use crate::sync::object_selector::{InvalidSelector, Matcher, ObjectFacts, purposes_of, selector};
use kube::core::{Selector, SelectorExt};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};

/// On every `RemoteCluster` an inventory keeps: the inventory's name. mimeo sets it last, so
/// neither an entry's labels nor the template can change it.
pub const INVENTORY_LABEL: &str = "mimeo.dev/inventory";
/// One label per openMCP purpose (`purpose.mimeo.dev/workload: "true"`), so that a rule's
/// `clusterSelector` can choose clusters by purpose.
pub const PURPOSE_LABEL_PREFIX: &str = "purpose.mimeo.dev/";

/// Which inventory a `ClusterInventory` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    OpenMcp,
    ClusterApi,
    ClusterProfile,
}

impl Kind {
    pub fn of(spec: &ClusterInventorySpec) -> Kind {
        if spec.open_mcp.is_some() {
            Kind::OpenMcp
        } else if spec.cluster_api.is_some() {
            Kind::ClusterApi
        } else {
            Kind::ClusterProfile
        }
    }

    pub fn group(self) -> &'static str {
        match self {
            Kind::OpenMcp => "clusters.openmcp.cloud",
            Kind::ClusterApi => "cluster.x-k8s.io",
            Kind::ClusterProfile => "multicluster.x-k8s.io",
        }
    }

    pub fn kind(self) -> &'static str {
        match self {
            Kind::OpenMcp | Kind::ClusterApi => "Cluster",
            Kind::ClusterProfile => "ClusterProfile",
        }
    }

    pub fn plural(self) -> &'static str {
        match self {
            Kind::OpenMcp | Kind::ClusterApi => "clusters",
            Kind::ClusterProfile => "clusterprofiles",
        }
    }

    /// The versions mimeo reads, preferred first. Cluster API serves v1beta2 and v1beta1; mimeo
    /// reads whichever of them the apiserver serves and understands both.
    pub fn versions(self) -> &'static [&'static str] {
        match self {
            Kind::OpenMcp | Kind::ClusterProfile => &["v1alpha1"],
            Kind::ClusterApi => &["v1beta2", "v1beta1"],
        }
    }

    /// `Cluster.clusters.openmcp.cloud`, as a `RemoteCluster`'s origin names it.
    pub fn qualified(self) -> String {
        format!("{}.{}", self.kind(), self.group())
    }
}

/// What mimeo reads of an entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// openMCP purposes; empty for the other inventories.
    pub purposes: Vec<String>,
    /// The labels of the entry's namespace; empty until [`Entry::in_namespace`] gives them.
    pub namespace_labels: BTreeMap<String, String>,
    /// The whole object, for what each inventory reads from its status.
    pub object: serde_json::Value,
}

impl Entry {
    /// An entry from its JSON; `None` when it has no name or namespace (never from an apiserver).
    pub fn from_json(object: serde_json::Value) -> Option<Entry> {
        let meta = &object["metadata"];
        let namespace = meta["namespace"].as_str()?.to_owned();
        let name = meta["name"].as_str()?.to_owned();
        let labels = meta["labels"]
            .as_object()
            .map(|l| {
                l.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        Some(Entry {
            purposes: purposes_of(&object),
            namespace,
            name,
            labels,
            namespace_labels: BTreeMap::new(),
            object,
        })
    }

    /// The entry with its namespace's labels (none for a namespace not, or no longer, there).
    pub fn in_namespace(mut self, labels: Option<&BTreeMap<String, String>>) -> Entry {
        self.namespace_labels = labels.cloned().unwrap_or_default();
        self
    }

    pub fn is_deleting(&self) -> bool {
        !self.object["metadata"]["deletionTimestamp"].is_null()
    }
}

/// The namespaces an inventory reads entries from: those it names, and those its
/// `namespaceSelector` chooses by label.
#[derive(Clone, Debug)]
pub struct EntryNamespaces {
    names: BTreeSet<String>,
    selector: Option<Selector>,
}

impl EntryNamespaces {
    /// An invalid `namespaceSelector` is an error, not a selector that silently reads nothing.
    pub fn of(spec: &ClusterInventorySpec) -> Result<Self, InvalidSelector> {
        Ok(EntryNamespaces {
            names: spec.namespaces.iter().cloned().collect(),
            selector: spec.namespace_selector.as_ref().map(selector).transpose()?,
        })
    }

    /// Whether entries in `namespace` are read, given the namespace's labels.
    pub fn reads(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.names.contains(namespace) || self.selector.as_ref().is_some_and(|s| s.matches(labels))
    }

    /// Whether a namespace's labels can change what is read.
    pub fn by_labels(&self) -> bool {
        self.selector.is_some()
    }
}

/// Whether an inventory chooses an entry: it must sit in a namespace the inventory reads (entries
/// anywhere else are never looked at) and match the selector.
pub fn is_selected(namespaces: &EntryNamespaces, matcher: &Matcher, entry: &Entry) -> bool {
    namespaces.reads(&entry.namespace, &entry.namespace_labels)
        && !entry.is_deleting()
        && matcher.matches(&ObjectFacts {
            namespace: &entry.namespace,
            name: &entry.name,
            labels: &entry.labels,
            purposes: &entry.purposes,
        })
}

/// The name of the `RemoteCluster` for an entry: `<inventory>-<namespace>-<name>`, shortened
/// with a hash of all three when it would not fit a label value (63 characters), so that it can
/// stand wherever a cluster's name goes.
pub fn remote_cluster_name(inventory: &str, namespace: &str, name: &str) -> String {
    let full = format!("{inventory}-{namespace}-{name}");
    if full.len() <= 63 && !full.contains('.') {
        return full;
    }
    let digest = Sha256::digest(format!("{inventory}/{namespace}/{name}").as_bytes());
    let hash: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    let mut prefix: String = full.replace('.', "-").chars().take(63 - 9).collect();
    while prefix.ends_with('-') {
        prefix.pop();
    }
    format!("{prefix}-{hash}")
}

/// The one namespace label a `RemoteCluster` does not get: on a cluster-scoped object it would
/// claim to be the object's own name. The namespace's name is in the `RemoteCluster`'s origin.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The labels of an entry's `RemoteCluster`: the entry's own, its namespace's (which win: only
/// the platform labels its namespaces, while an entry may be written by someone with fewer
/// rights), one per purpose, the template's, and the inventory's name, later ones winning.
pub fn labels(
    inventory: &str,
    entry: &Entry,
    template: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut labels = entry.labels.clone();
    labels.extend(
        entry
            .namespace_labels
            .iter()
            .filter(|(k, _)| k.as_str() != NAMESPACE_NAME_LABEL)
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    for purpose in &entry.purposes {
        if is_label_name(purpose) {
            labels.insert(format!("{PURPOSE_LABEL_PREFIX}{purpose}"), "true".into());
        }
    }
    labels.extend(template.iter().map(|(k, v)| (k.clone(), v.clone())));
    labels.insert(INVENTORY_LABEL.into(), inventory.into());
    labels
}

pub fn origin(inventory: &str, kind: Kind, entry: &Entry) -> Origin {
    Origin {
        inventory: inventory.into(),
        kind: kind.qualified(),
        entry: format!("{}/{}", entry.namespace, entry.name),
    }
}

/// The name part of a label key: at most 63 alphanumerics, `-`, `_` and `.`, alphanumeric at
/// both ends.
fn is_label_name(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ObjectSelector, OpenMcpInventory, PurposeOperator, PurposeRequirement};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use serde_json::json;

    fn cluster(namespace: &str, name: &str, labels: serde_json::Value, purposes: &[&str]) -> Entry {
        Entry::from_json(json!({
            "metadata": {"namespace": namespace, "name": name, "labels": labels},
            "spec": {"purposes": purposes},
        }))
        .unwrap()
    }

    fn spec(namespaces: &[&str], selector: ObjectSelector) -> ClusterInventorySpec {
        ClusterInventorySpec {
            namespaces: namespaces.iter().map(|s| (*s).to_owned()).collect(),
            namespace_selector: None,
            selector: Some(selector),
            open_mcp: Some(OpenMcpInventory::default()),
            cluster_api: None,
            cluster_profile: None,
            remote_clusters: Default::default(),
        }
    }

    #[test]
    fn entries_outside_the_named_namespaces_are_never_selected() {
        let spec = spec(&["platform"], ObjectSelector::default());
        let matcher = Matcher::new(spec.selector.as_ref().unwrap()).unwrap();
        assert!(is_selected(
            &EntryNamespaces::of(&spec).unwrap(),
            &matcher,
            &cluster("platform", "a", json!({}), &[])
        ));
        assert!(!is_selected(
            &EntryNamespaces::of(&spec).unwrap(),
            &matcher,
            &cluster("tenant", "a", json!({}), &[])
        ));
    }

    #[test]
    fn purposes_select_and_become_labels() {
        let selector = ObjectSelector {
            match_purposes: vec![PurposeRequirement {
                operator: PurposeOperator::ContainsAll,
                values: vec!["workload".into()],
            }],
            ..Default::default()
        };
        let spec = spec(&["platform"], selector);
        let matcher = Matcher::new(spec.selector.as_ref().unwrap()).unwrap();
        let workload = cluster(
            "platform",
            "w",
            json!({"team": "a"}),
            &["workload", "not a label!"],
        );
        assert!(is_selected(
            &EntryNamespaces::of(&spec).unwrap(),
            &matcher,
            &workload
        ));
        assert!(!is_selected(
            &EntryNamespaces::of(&spec).unwrap(),
            &matcher,
            &cluster("platform", "m", json!({}), &["mcp"])
        ));
        let template = [("tier".to_owned(), "gold".to_owned())].into();
        let labels = labels("fleet", &workload, &template);
        assert_eq!(labels["team"], "a");
        assert_eq!(labels["purpose.mimeo.dev/workload"], "true");
        assert_eq!(labels["tier"], "gold");
        assert_eq!(labels[INVENTORY_LABEL], "fleet");
        assert_eq!(labels.len(), 4, "{labels:?}");
    }

    #[test]
    fn an_entry_cannot_claim_another_inventory() {
        let forged = cluster("platform", "w", json!({INVENTORY_LABEL: "other"}), &[]);
        assert_eq!(
            labels("fleet", &forged, &BTreeMap::new())[INVENTORY_LABEL],
            "fleet"
        );
    }

    #[test]
    fn long_names_are_shortened_with_a_hash_and_stay_distinct() {
        assert_eq!(
            remote_cluster_name("fleet", "test-0", "cluster-0"),
            "fleet-test-0-cluster-0"
        );
        let long = "c".repeat(60);
        let a = remote_cluster_name("fleet", "ns", &long);
        let b = remote_cluster_name("fleet", "ns2", &long);
        assert!(a.len() <= 63 && b.len() <= 63, "{a} {b}");
        assert_ne!(a, b);
        assert!(!remote_cluster_name("fleet", "ns", "a.b").contains('.'));
    }

    #[test]
    fn a_deleting_entry_is_not_selected() {
        let spec = spec(&["platform"], ObjectSelector::default());
        let matcher = Matcher::new(&ObjectSelector::default()).unwrap();
        let mut entry = cluster("platform", "a", json!({}), &[]);
        entry.object["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert!(!is_selected(
            &EntryNamespaces::of(&spec).unwrap(),
            &matcher,
            &entry
        ));
    }

    #[test]
    fn namespaces_chosen_by_label_are_read_beside_the_named_ones() {
        let mut spec = spec(&["platform"], ObjectSelector::default());
        spec.namespace_selector = Some(LabelSelector {
            match_labels: Some([("openmcp.cloud/managed-by".to_owned(), "mcp".to_owned())].into()),
            ..Default::default()
        });
        let namespaces = EntryNamespaces::of(&spec).unwrap();
        let matcher = Matcher::new(&ObjectSelector::default()).unwrap();
        let mcp_labels: BTreeMap<String, String> = [
            ("openmcp.cloud/managed-by".to_owned(), "mcp".to_owned()),
            ("core.openmcp.cloud/mcp-name".to_owned(), "tenant-a".to_owned()),
            (NAMESPACE_NAME_LABEL.to_owned(), "mcp--1234".to_owned()),
        ]
        .into();
        let mcp = cluster(
            "mcp--1234",
            "mcp",
            json!({"core.openmcp.cloud/mcp-name": "forged"}),
            &["mcp"],
        )
        .in_namespace(Some(&mcp_labels));
        assert!(is_selected(&namespaces, &matcher, &mcp));
        // A tenant's own namespace, unlabelled: not read, whatever the entry says.
        let tenant = cluster(
            "tenant",
            "mcp",
            json!({"openmcp.cloud/managed-by": "mcp"}),
            &["mcp"],
        )
        .in_namespace(Some(&BTreeMap::new()));
        assert!(!is_selected(&namespaces, &matcher, &tenant));
        // A namespace not (or no longer) known: only a named one is read.
        let unknown = cluster("mcp--gone", "mcp", json!({}), &[]).in_namespace(None);
        assert!(!is_selected(&namespaces, &matcher, &unknown));
        let named = cluster("platform", "a", json!({}), &[]).in_namespace(None);
        assert!(is_selected(&namespaces, &matcher, &named));
        assert!(namespaces.by_labels());

        let labels = labels("mcps", &mcp, &BTreeMap::new());
        assert_eq!(
            labels["core.openmcp.cloud/mcp-name"], "tenant-a",
            "the namespace's label wins"
        );
        assert_eq!(labels["openmcp.cloud/managed-by"], "mcp");
        assert!(!labels.contains_key(NAMESPACE_NAME_LABEL), "{labels:?}");
    }

    #[test]
    fn an_invalid_namespace_selector_is_an_error() {
        let mut spec = spec(&[], ObjectSelector::default());
        spec.namespace_selector = Some(LabelSelector {
            match_expressions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "a".into(),
                    operator: "In".into(),
                    values: None,
                },
            ]),
            ..Default::default()
        });
        assert!(EntryNamespaces::of(&spec).is_err());
    }
}
