//! A (Cluster)Replica's targets as a rule's targets, and the copies they make now: in this
//! cluster, next to openMCP `Cluster`s (`location: NextTo`), or onto them (`Onto`, through a
//! `ClusterInventory` of the Clusters its selector chooses).

use super::{CopyShape, Replica, Source, Untranslatable};
use crate::cmd::migrate::model::{Inventory, Place};
use crate::cmd::migrate::openmcp::{CLUSTER_API_VERSION, INVENTORY_LABEL, selected_clusters};
use crate::cmd::migrate::rules::{rule_name, selected, selector_target};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

const SELECTOR_FIELDS: [&str; 4] = [
    "matchLabels",
    "matchExpressions",
    "matchPurposes",
    "matchIdentities",
];

/// One replica's rule in the making.
#[derive(Default)]
pub(super) struct Parts {
    pub targets: Vec<Value>,
    /// The copies in this cluster.
    pub places: BTreeSet<Place>,
    /// The copies on openMCP `Cluster`s (`namespace/name`), where they are by name.
    pub cluster_places: BTreeSet<(String, Place)>,
    /// The Clusters where the copies are in namespaces chosen by labels, not read (no
    /// `--cluster-kubeconfig` for them).
    pub by_labels: BTreeSet<String>,
    pub conflicts: BTreeSet<&'static str>,
    /// A target with `namespacePolicy: Skip` writes into a namespace by name.
    pub skips_missing: bool,
    pub follows_clusters: bool,
    pub notes: Vec<String>,
}

impl Parts {
    /// Adds a rule target, once, with the copy's name.
    fn push(&mut self, copy: &CopyShape, mut target: Value) {
        if let Some(name) = &copy.name {
            target["name"] = json!(name);
        }
        if !self.targets.contains(&target) {
            self.targets.push(target);
        }
    }
}

/// A `ClusterInventory` in the making: the selector, where its Clusters are now, and whether a
/// rule creates namespaces through it.
#[derive(Clone, Default)]
pub(super) struct InventoryParts {
    pub selector: Value,
    pub namespaces: BTreeSet<String>,
    pub create_namespaces: bool,
}

/// Everything the translation of all replicas shares: the `ClusterInventory`s by name.
#[derive(Clone, Default)]
pub(super) struct Shared {
    pub inventories: BTreeMap<String, InventoryParts>,
}

impl Shared {
    /// The inventory for `selector`: one that has it already, else a new one named `name`.
    fn inventory(&mut self, name: String, selector: &Value, clusters: &[(String, String)]) -> String {
        let name = self
            .inventories
            .iter()
            .find(|(_, parts)| parts.selector == *selector)
            .map(|(name, _)| name.clone())
            .unwrap_or(name);
        let parts = self
            .inventories
            .entry(name.clone())
            .or_insert_with(|| InventoryParts {
                selector: selector.clone(),
                ..InventoryParts::default()
            });
        parts.namespaces.extend(clusters.iter().map(|(ns, _)| ns.clone()));
        name
    }
}

/// How a target chooses namespaces: by name, by labels, or not at all (the template's).
pub(super) enum Namespaces {
    Named(Vec<String>),
    Selector(Value),
    Unset,
}

pub(super) fn namespaces_of(target: &Value) -> Result<Namespaces, String> {
    let selector = &target["namespace"]["selector"];
    if selector.is_null() {
        return Ok(Namespaces::Unset);
    }
    if let Some(identities) = selector.get("matchIdentities").filter(|v| !v.is_null()) {
        let names: Vec<String> = identities
            .as_array()
            .ok_or("matchIdentities is not a list")?
            .iter()
            .filter_map(|i| i["name"].as_str().map(str::to_owned))
            .collect();
        return Ok(Namespaces::Named(names));
    }
    let mut labels = json!({});
    for field in ["matchLabels", "matchExpressions"] {
        if let Some(value) = selector.get(field).filter(|v| !v.is_null()) {
            labels[field] = value.clone();
        }
    }
    Ok(Namespaces::Selector(labels))
}

/// Whether a target copies onto (or next to) openMCP Clusters.
pub(super) fn has_cluster(target: &Value) -> bool {
    target.get("cluster").is_some_and(|c| !c.is_null())
}

/// The openMCP selector of a cluster target: its fields, none for every Cluster.
fn cluster_selector(target: &Value) -> Value {
    let selector = &target["cluster"]["selector"];
    let fields: Map<String, Value> = SELECTOR_FIELDS
        .iter()
        .filter_map(|f| {
            selector
                .get(*f)
                .filter(|v| !v.is_null())
                .map(|v| ((*f).to_owned(), v.clone()))
        })
        .collect();
    Value::Object(fields)
}

/// `targetConflictPolicy` as a rule's `conflict`, strictest first.
fn conflict(policy: &str) -> Option<&'static str> {
    match policy {
        "Fail" => Some("Fail"),
        "Skip" => Some("Skip"),
        // The replicator takes the object over in place.
        "Overwrite" => Some("Adopt"),
        _ => None,
    }
}

/// `{{object.name}}` and the other placeholders of a name filled in for one copy.
fn render(name: &str, source: &Source, cluster: Option<&(String, String)>, namespace: &str) -> String {
    let mut out = name
        .replace("{{source.name}}", &source.name)
        .replace(
            "{{source.namespace}}",
            source.namespace.as_deref().unwrap_or_default(),
        )
        .replace("{{target.namespace}}", namespace);
    if let Some((cluster_namespace, cluster_name)) = cluster {
        out = out
            .replace("{{object.name}}", cluster_name)
            .replace("{{object.namespace}}", cluster_namespace);
    }
    out
}

/// What every target of one replica shares.
struct Replicating<'a> {
    inventory: &'a Inventory,
    rule: &'a str,
    source: &'a Source,
    copy: &'a CopyShape,
}

impl Replicating<'_> {
    /// The copy in `namespace` (next to or named after `cluster`, if any).
    fn place(&self, namespace: &str, cluster: Option<&(String, String)>) -> Place {
        let name = self.copy.name.as_deref().unwrap_or(&self.source.name);
        Place {
            kind: self.source.kind.clone(),
            namespace: namespace.to_owned(),
            name: render(name, self.source, cluster, namespace),
        }
    }

    fn is_source(&self, place: &Place) -> bool {
        Some(place.namespace.as_str()) == self.source.namespace.as_deref() && place.name == self.source.name
    }

    /// The Clusters a target's selector chooses now, as `(namespace, name)`.
    fn clusters(&self, target: &Target) -> Result<Vec<(String, String)>, Untranslatable> {
        selected_clusters(&self.inventory.openmcp_clusters, &cluster_selector(target.value)).map_err(|e| {
            format!(
                "{}: its cluster selector does not read as openMCP's ({e})",
                target.at
            )
        })
    }
}

/// One target as read.
struct Target<'a> {
    /// `targets[i]`, for the notes.
    at: String,
    index: usize,
    value: &'a Value,
    namespaces: Namespaces,
    /// `namespacePolicy: Create` (the default).
    create: bool,
    /// `namespacePolicy: Skip`.
    skip: bool,
    /// The namespace the template (or the source, without one) gives, for targets that name none.
    fixed: Option<String>,
}

/// The targets of one replica and the copies they make now, or why it cannot be a rule.
pub(super) fn targets(
    inventory: &Inventory,
    shared: &mut Shared,
    replica: &Replica,
    rule: &str,
    source: &Source,
    copy: &CopyShape,
) -> Result<Parts, Untranslatable> {
    let r = Replicating {
        inventory,
        rule,
        source,
        copy,
    };
    let mut parts = Parts::default();
    let list = replica.spec()["targets"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        return Err("has no targets".into());
    }
    for (index, value) in list.iter().enumerate() {
        let target = read_target(&r, index, value, &mut parts)?;
        let location = value["cluster"]["location"].as_str().unwrap_or("Onto");
        match (has_cluster(value), location) {
            (true, "NextTo") => next_to(&r, &target, &mut parts)?,
            (true, _) => onto(&r, &target, shared, &mut parts)?,
            (false, _) => here(&r, &target, &mut parts)?,
        }
    }
    if parts.targets.is_empty() {
        return Err(format!(
            "none of its targets chooses anything now ({})",
            parts.notes.join("; ")
        ));
    }
    Ok(parts)
}

/// A target's policies and namespaces, or why they cannot be a rule's.
fn read_target<'a>(
    r: &Replicating,
    index: usize,
    value: &'a Value,
    parts: &mut Parts,
) -> Result<Target<'a>, Untranslatable> {
    let at = format!("targets[{index}]");
    let policy = value["targetConflictPolicy"].as_str().unwrap_or("Fail");
    parts
        .conflicts
        .insert(conflict(policy).ok_or_else(|| format!("{at}: unknown targetConflictPolicy {policy}"))?);
    let create = match value["namespacePolicy"].as_str().unwrap_or("Create") {
        "Create" => true,
        "Skip" | "Fail" => false,
        other => return Err(format!("{at}: unknown namespacePolicy {other}")),
    };
    let namespaces = namespaces_of(value).map_err(|e| format!("{at}: {e}"))?;
    let next_to = has_cluster(value) && value["cluster"]["location"] == "NextTo";
    if r.copy.per_cluster && !next_to {
        return Err(format!(
            "{at}: names its copies after the Cluster (.target.cluster) in a target that is not `location: NextTo`: onto a Cluster, mimeo's {{{{target.cluster}}}} is the RemoteCluster's name (<inventory>-<namespace>-<name>), not the Cluster's; on the platform cluster there is no Cluster to name; not supported"
        ));
    }
    if r.source.namespace.is_none() && !matches!(namespaces, Namespaces::Unset) {
        return Err(format!(
            "{at}: chooses namespaces for a cluster-scoped {}",
            r.source.kind
        ));
    }
    Ok(Target {
        at,
        index,
        value,
        namespaces,
        create,
        skip: value["namespacePolicy"] == "Skip",
        fixed: match r.copy.templated {
            true => r.copy.namespace.clone(),
            false => r.source.namespace.clone(),
        },
    })
}

/// `location: NextTo`: into the namespaces of the Clusters chosen, followed as they come and go
/// (`nextTo`, or `forEach` when each copy is named after its Cluster).
fn next_to(r: &Replicating, target: &Target, parts: &mut Parts) -> Result<(), Untranslatable> {
    let at = &target.at;
    if !matches!(target.namespaces, Namespaces::Unset) {
        return Err(format!(
            "{at}: `location: NextTo` with a namespace selector, which the replicator refuses too"
        ));
    }
    if r.source.namespace.is_none() {
        return Err(format!(
            "{at}: copies a cluster-scoped {} next to Clusters: it has no namespace to go in",
            r.source.kind
        ));
    }
    let clusters = r.clusters(target)?;
    parts.follows_clusters = true;
    let mut follow = json!({"apiVersion": CLUSTER_API_VERSION, "kind": "Cluster"});
    for (key, value) in cluster_selector(target.value).as_object().into_iter().flatten() {
        follow[key] = value.clone();
    }
    if r.copy.per_cluster {
        parts.push(
            r.copy,
            json!({"forEach": follow, "namespace": "{{object.namespace}}"}),
        );
        for cluster in &clusters {
            let p = r.place(&cluster.0, Some(cluster));
            if !r.is_source(&p) {
                parts.places.insert(p);
            }
        }
        return Ok(());
    }
    let namespaces: BTreeSet<&String> = clusters.iter().map(|(ns, _)| ns).collect();
    if namespaces.is_empty() {
        parts.notes.push(format!(
            "{at}: its selector chooses no Cluster now, so the rule's nextTo is not narrowed to their namespaces: it counts Clusters in every namespace, as the replicator does; add `namespaces` to it to trust only those"
        ));
    } else {
        follow["namespaces"] = json!(namespaces);
    }
    parts.push(r.copy, json!({"nextTo": follow}));
    for ns in namespaces {
        let p = r.place(ns, None);
        if !r.is_source(&p) {
            parts.places.insert(p);
        }
    }
    Ok(())
}

/// `location: Onto`: onto the Clusters chosen, through a `ClusterInventory` of them.
fn onto(
    r: &Replicating,
    target: &Target,
    shared: &mut Shared,
    parts: &mut Parts,
) -> Result<(), Untranslatable> {
    let at = &target.at;
    let clusters = r.clusters(target)?;
    if clusters.is_empty() {
        parts.notes.push(format!(
            "{at}: its selector chooses no Cluster now; no ClusterInventory and no target for it (add them once it does: a ClusterInventory with this selector, and a clusterSelector target on its mimeo.dev/inventory label)"
        ));
        return Ok(());
    }
    let suffix = target.index.to_string();
    let selector = cluster_selector(target.value);
    let inventory = shared.inventory(rule_name(&[r.rule, &suffix]), &selector, &clusters);
    let remote = json!({"matchLabels": {INVENTORY_LABEL: inventory}});
    let named_cluster = |(ns, n): &(String, String)| format!("{ns}/{n}");
    // A copy by name in `ns` of each Cluster.
    let mut by_name = |ns: &str, parts: &mut Parts| {
        let mut t = json!({"clusterSelector": remote, "namespace": ns});
        if target.create {
            t["createNamespace"] = json!(true);
            shared.inventories.get_mut(&inventory).unwrap().create_namespaces = true;
        }
        parts.skips_missing |= target.skip;
        parts.push(r.copy, t);
        let p = r.place(ns, None);
        parts
            .cluster_places
            .extend(clusters.iter().map(|c| (named_cluster(c), p.clone())));
    };
    match (&target.namespaces, &target.fixed) {
        (Namespaces::Named(names), _) => {
            if names.is_empty() {
                parts
                    .notes
                    .push(format!("{at}: matchIdentities is empty: no namespace, no copy"));
            }
            for ns in names {
                by_name(ns, parts);
            }
        }
        (Namespaces::Selector(labels), _) => {
            parts.push(
                r.copy,
                json!({"clusterSelector": remote, "namespaceSelector": labels}),
            );
            for cluster in &clusters {
                let cluster = named_cluster(cluster);
                match r.inventory.clusters.get(&cluster) {
                    Some(read) => parts.cluster_places.extend(
                        selected(read, labels)
                            .into_iter()
                            .map(|there| (cluster.clone(), r.place(&there.name, None))),
                    ),
                    None => {
                        parts.by_labels.insert(cluster);
                    }
                }
            }
        }
        (Namespaces::Unset, Some(ns)) => by_name(ns, parts),
        (Namespaces::Unset, None) if r.source.namespace.is_none() => {
            // A cluster-scoped copy on each Cluster: not planned for adoption (a plan's entries
            // are namespaced).
            parts.push(r.copy, json!({"clusterSelector": remote}));
            parts.notes.push(format!(
                "{at}: the replicator's cluster-scoped copies on the Clusters are not planned for adoption: annotate each mimeo.dev/adopt-by: ClusterSyncRule/{} there before the rule runs, or mimeo reports Conflict on them",
                r.rule
            ));
        }
        (Namespaces::Unset, None) => {
            return Err(format!("{at}: names no namespace, and neither does its template"));
        }
    }
    Ok(())
}

/// No cluster: into namespaces of the platform cluster itself.
fn here(r: &Replicating, target: &Target, parts: &mut Parts) -> Result<(), Untranslatable> {
    let at = &target.at;
    if r.source.namespace.is_none() {
        return Err(format!(
            "{at}: copies a cluster-scoped {} within the platform cluster: mimeo writes a cluster-scoped copy only into another cluster",
            r.source.kind
        ));
    }
    let by_name = |ns: &str, parts: &mut Parts| {
        let mut t = json!({"namespace": ns});
        if target.create {
            t["createNamespace"] = json!(true);
        }
        parts.skips_missing |= target.skip;
        parts.push(r.copy, t);
    };
    match (&target.namespaces, &target.fixed) {
        (Namespaces::Named(names), _) => {
            if names.is_empty() {
                parts
                    .notes
                    .push(format!("{at}: matchIdentities is empty: no namespace, no copy"));
            }
            for ns in names {
                by_name(ns, parts);
                let p = r.place(ns, None);
                if !r.is_source(&p) {
                    parts.places.insert(p);
                }
            }
        }
        (Namespaces::Selector(labels), _) => {
            let source_namespace = r.source.namespace.as_deref().unwrap_or_default();
            // Not the source's own namespace, where a copy of its name would be the source.
            let labels = match r.copy.name {
                None => selector_target(labels, source_namespace)["namespaceSelector"].clone(),
                Some(_) => labels.clone(),
            };
            for ns in selected(r.inventory, &labels) {
                let p = r.place(&ns.name, None);
                if !r.is_source(&p) {
                    parts.places.insert(p);
                }
            }
            parts.push(r.copy, json!({"namespaceSelector": labels}));
        }
        (Namespaces::Unset, Some(ns)) => {
            let p = r.place(ns, None);
            if r.is_source(&p) {
                return Err(format!(
                    "{at}: writes its copy onto its own source ({} {ns}/{}): there is nothing to copy",
                    r.source.kind, r.source.name
                ));
            }
            by_name(ns, parts);
            parts.places.insert(p);
        }
        (Namespaces::Unset, None) => {
            return Err(format!("{at}: names no namespace, and neither does its template"));
        }
    }
    Ok(())
}
