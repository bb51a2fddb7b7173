//! `mimeo migrate`: what another copy tool copies in a cluster, as mimeo rules.
//!
//! Reading the cluster ([`read`]) gives an [`Inventory`] of plain values: namespaces, the Secrets
//! and ConfigMaps that carry another tool's annotations, and Kyverno's policies. Each tool's
//! module turns it into rules, pure and unit-tested: kubernetes-replicator ([`replicator`]),
//! kubernetes-reflector ([`reflector`]), config-syncer/kubed ([`kubed`]), Kyverno's
//! `generate` with `clone`/`cloneList` and `synchronize: true` ([`kyverno`]) and openMCP
//! HelmDeployer's `secretsToCopy` ([`helmdeployer`]). A [`Migration`] holds the rules (and the
//! `ClusterInventory`s they reach other clusters through), the consent each target namespace
//! needs, the copies that tool made (or would make) that the rules are to adopt, and a note for
//! everything that could not be translated. For HelmDeployer, the same for its copies on the
//! openMCP `Cluster`s the user gave a kubeconfig for ([`Inventory::clusters`]).

pub mod apply;
pub mod helmdeployer;
pub mod kubed;
pub mod kyverno;
pub mod read;
pub mod reflector;
pub mod replicator;
pub mod selector;
pub mod yaml;

use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The label every namespace carries with its own name.
const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// A namespace as the tools see it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Namespace {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// A Secret or ConfigMap, without its content.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Object {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// For each label, the field managers that own it (from `managedFields`).
    pub label_managers: BTreeMap<String, Vec<String>>,
}

/// What migrating reads from a cluster.
#[derive(Clone, Debug, Default)]
pub struct Inventory {
    pub namespaces: Vec<Namespace>,
    pub objects: Vec<Object>,
    /// Roles, RoleBindings and ServiceAccounts that carry kubernetes-replicator's annotations:
    /// it copies those kinds too, mimeo does not, and the plan must say so.
    pub not_migrated: Vec<Object>,
    /// Those of the kinds above that could not be listed, with why: the plan says it could not
    /// look.
    pub not_read: Vec<String>,
    /// Kyverno `ClusterPolicy` and `Policy` objects, as JSON.
    pub policies: Vec<Value>,
    /// Whether Kyverno's `ClusterPolicy` kind is served: Kyverno is installed.
    pub kyverno_served: bool,
    /// openMCP HelmDeployer's configuration and the `Cluster`s it selects from.
    pub helm: helmdeployer::HelmDeployer,
    /// The openMCP `Cluster`s read through `--cluster-kubeconfig`, by `namespace/name`: their
    /// namespaces and Secrets, where HelmDeployer's `toTargetCluster` copies are.
    pub clusters: BTreeMap<String, Inventory>,
}

impl Namespace {
    /// Its labels with the one Kubernetes sets to its name, which selectors may name.
    fn labels_with_name(&self) -> BTreeMap<String, String> {
        let mut labels = self.labels.clone();
        labels
            .entry(NAME_LABEL.to_owned())
            .or_insert_with(|| self.name.clone());
        labels
    }
}

impl Inventory {
    /// The namespaces `selector` selects.
    fn matching(&self, selector: &selector::Selector) -> Vec<&Namespace> {
        self.namespaces
            .iter()
            .filter(|n| selector.matches(&n.labels_with_name()))
            .collect()
    }

    fn namespace(&self, name: &str) -> Option<&Namespace> {
        self.namespaces.iter().find(|n| n.name == name)
    }

    fn object(&self, kind: &str, namespace: &str, name: &str) -> Option<&Object> {
        self.objects
            .iter()
            .find(|o| o.kind == kind && o.namespace == namespace && o.name == name)
    }
}

/// The tools `mimeo migrate` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tool {
    Replicator,
    Reflector,
    Kubed,
    Kyverno,
    HelmDeployer,
}

impl Tool {
    pub const ALL: [Tool; 5] = [
        Tool::Replicator,
        Tool::Reflector,
        Tool::Kubed,
        Tool::Kyverno,
        Tool::HelmDeployer,
    ];

    /// Its name on the command line and in rule names.
    /// What shows that it ran here, for the note when it did not.
    fn sign(self) -> &'static str {
        match self {
            Tool::Replicator => "no Secret or ConfigMap carries replicator.v1.mittwald.de/replicated-at",
            Tool::Reflector => {
                "no Secret or ConfigMap carries reflector.v1.k8s.emberstack.com/reflected-version"
            }
            Tool::Kubed => "no Secret or ConfigMap carries kubed.appscode.com/origin",
            Tool::Kyverno => "clusterpolicies.kyverno.io is not served",
            Tool::HelmDeployer => "helmdeployments.helm.open-control-plane.io is not served",
        }
    }

    /// Its name on the command line and in rule names.
    pub fn named(name: &str) -> Option<Tool> {
        Tool::ALL.into_iter().find(|t| t.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Tool::Replicator => "replicator",
            Tool::Reflector => "reflector",
            Tool::Kubed => "kubed",
            Tool::Kyverno => "kyverno",
            Tool::HelmDeployer => "openmcp-helmdeployer",
        }
    }
}

/// A copy: where it is (or would be) in this cluster.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Place {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

/// Namespaces that belong to the cluster itself: no consent is given there and no copy adopted
/// without `--allow-system-namespaces`, whatever another tool did.
pub const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// How to migrate.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The tools the user named (`--from`): only those, each even with no sign of having run.
    pub named: Vec<Tool>,
    /// Consent and adoption in [`SYSTEM_NAMESPACES`] too.
    pub allow_system_namespaces: bool,
    /// HelmDeployer's pod namespace, where its config's sources are; empty:
    /// [`helmdeployer::DEFAULT_NAMESPACE`].
    pub helmdeployer_namespace: String,
}

/// Why a namespace is asked to accept a rule: the old tool's copy there, and the annotation that
/// asked for it, with the namespace of whoever wrote it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    /// The copy the old tool made, and its mark.
    pub evidence: String,
    /// The annotation that asked for the copy, and the object it is on.
    pub asked_by: String,
    /// The namespace that annotation was written in.
    pub written_in: String,
}

/// The rules for one tool's copies, and what applying them needs.
#[derive(Clone, Debug, Default)]
pub struct Migration {
    /// `SyncRule` and `ClusterSyncRule` objects.
    pub rules: Vec<Value>,
    /// `ClusterInventory` objects the rules' `clusterSelector`s need.
    pub inventories: Vec<Value>,
    /// For each target namespace, the `mimeo.dev/accept-from` entries it needs (each scoped to
    /// one rule, `<namespace>/<rule>`), with why: only where the old tool demonstrably made a
    /// copy there.
    pub consents: BTreeMap<String, BTreeMap<String, Grant>>,
    /// Every copy the rules make in this cluster now, with the rule (`SyncRule/ns/name`) that
    /// makes it. Those that exist already are adopted.
    pub copies: BTreeMap<Place, String>,
    /// The copies that exist already, with the rule to adopt each.
    pub adoptions: BTreeMap<Place, String>,
    /// [`Migration::consents`] on the openMCP `Cluster`s read (`namespace/name`, namespace).
    pub cluster_consents: BTreeMap<(String, String), BTreeMap<String, Grant>>,
    /// [`Migration::adoptions`] on the openMCP `Cluster`s read, by `namespace/name`.
    pub cluster_adoptions: BTreeMap<(String, Place), String>,
    /// What could not be translated, and why; one line each.
    pub notes: Vec<String>,
    /// Consent and adoption in system namespaces too.
    allow_system_namespaces: bool,
}

/// What a tool tells [`Migration::add_rule`] about a rule's copies: whether an existing object
/// is demonstrably that tool's copy of the rule's source (the mark that shows it, if so), and
/// which annotation, written in which namespace, asked for the copies.
pub struct Provenance<'a> {
    pub evidence: &'a dyn Fn(&Object) -> Option<String>,
    pub asked_by: String,
    pub written_in: String,
}

impl Migration {
    /// Adds a rule and records the copies it makes now (`places`). An existing object there is
    /// adopted, and its namespace asked to accept the rule, only when `provenance` shows that the
    /// old tool made it from this source: a same-named object of someone else's is left alone
    /// (the rule reports `Conflict` there), and a namespace the old tool never served is not
    /// opened. System namespaces only with `--allow-system-namespaces`.
    fn add_rule(&mut self, inventory: &Inventory, rule: Value, places: Vec<Place>, provenance: &Provenance) {
        self.add_copies(inventory, &rule, places, provenance);
        self.rules.push(rule);
    }

    /// [`Migration::add_rule`] without adding the rule: for a rule whose copies were asked for
    /// by different annotations.
    fn add_copies(
        &mut self,
        inventory: &Inventory,
        rule: &Value,
        places: Vec<Place>,
        provenance: &Provenance,
    ) {
        self.add_copies_in(None, inventory, rule, places, provenance);
    }

    /// [`Migration::add_copies`] in `cluster` (an openMCP `Cluster`, `namespace/name`, read into
    /// `inventory`) or, with `None`, in this one. There a same-named namespace is someone else's,
    /// so consent is asked even of a namespace named like the rule's.
    fn add_copies_in(
        &mut self,
        cluster: Option<&str>,
        inventory: &Inventory,
        rule: &Value,
        places: Vec<Place>,
        provenance: &Provenance,
    ) {
        let rule_namespace = rule["metadata"]["namespace"].as_str().map(str::to_owned);
        let rule_name = rule["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let reference = reference_of(rule);
        // A copy in a namespace that does not exist is made once it does, by both tools.
        for place in places
            .into_iter()
            .filter(|p| inventory.namespace(&p.namespace).is_some())
        {
            if cluster.is_none() {
                self.copies.insert(place.clone(), reference.clone());
            }
            let Some(existing) = inventory.object(&place.kind, &place.namespace, &place.name) else {
                continue;
            };
            let what = format!(
                "{} {}/{}{}",
                place.kind,
                place.namespace,
                place.name,
                on_cluster(cluster)
            );
            let Some(evidence) = (provenance.evidence)(existing) else {
                self.notes.push(format!(
                    "{what}: exists but carries no mark of the old tool pointing at this rule's source; not adopted and no consent asked: {reference} reports Conflict there until its owner decides"
                ));
                continue;
            };
            if SYSTEM_NAMESPACES.contains(&place.namespace.as_str()) && !self.allow_system_namespaces {
                self.notes.push(format!(
                    "{what}: in a system namespace; not adopted and no consent asked (--allow-system-namespaces to include it)"
                ));
                continue;
            }
            let grant = Grant {
                evidence: format!("{what} ({evidence})"),
                asked_by: provenance.asked_by.clone(),
                written_in: provenance.written_in.clone(),
            };
            // A ClusterSyncRule's copies need no consent.
            let entry = rule_namespace
                .as_ref()
                .map(|from| (from, format!("{from}/{rule_name}")));
            match cluster {
                None => {
                    self.adoptions.insert(place.clone(), reference.clone());
                    if let Some((from, entry)) = entry
                        && *from != place.namespace
                    {
                        self.consents
                            .entry(place.namespace.clone())
                            .or_default()
                            .insert(entry, grant);
                    }
                }
                Some(cluster) => {
                    if let Some((_, entry)) = entry {
                        self.cluster_consents
                            .entry((cluster.to_owned(), place.namespace.clone()))
                            .or_default()
                            .insert(entry, grant);
                    }
                    self.cluster_adoptions
                        .insert((cluster.to_owned(), place), reference.clone());
                }
            }
        }
    }

    fn note(&mut self, tool: Tool, what: &str, why: impl AsRef<str>) {
        self.notes
            .push(format!("{}: {what}: {}", tool.name(), why.as_ref()));
    }

    /// Everything to apply, as one YAML document of kind `Migration`, which no apiserver serves:
    /// `mimeo migrate --apply` applies it with patches that add only what it names (never a
    /// server-side apply, which would take over and drop what other managers set), and `kubectl
    /// apply` refuses it whole. It holds the `mimeo.dev/accept-from` entries to add to each
    /// target namespace, the `mimeo.dev/adopt-by` mark for each existing copy (no Secret value
    /// is ever printed), and the rules. Every string is quoted, so that it reads back as one.
    pub fn to_yaml(&self) -> String {
        let platform = self
            .consents
            .iter()
            .map(|(namespace, entries)| (None, namespace, entries));
        let clusters = self
            .cluster_consents
            .iter()
            .map(|((cluster, namespace), entries)| (Some(cluster), namespace, entries));
        let consent: Vec<Value> = platform
            .chain(clusters)
            .map(|(cluster, namespace, entries)| {
                let mut consent =
                    json!({"namespace": namespace, "acceptFrom": entries.keys().collect::<Vec<_>>()});
                if let Some(cluster) = cluster {
                    consent["cluster"] = json!(cluster);
                }
                consent
            })
            .collect();
        let platform = self.adoptions.iter().map(|(place, rule)| (None, place, rule));
        let clusters = self
            .cluster_adoptions
            .iter()
            .map(|((cluster, place), rule)| (Some(cluster), place, rule));
        let adopt: Vec<Value> = platform
            .chain(clusters)
            .map(|(cluster, place, rule)| {
                let mut adoption = json!({"apiVersion": self.api_version_of(rule), "kind": place.kind,
                                          "namespace": place.namespace, "name": place.name, "rule": rule});
                if let Some(cluster) = cluster {
                    adoption["cluster"] = json!(cluster);
                }
                adoption
            })
            .collect();
        let mut plan = json!({"apiVersion": PLAN_API_VERSION, "kind": PLAN_KIND,
                              "consent": consent, "adopt": adopt, "rules": self.rules});
        if !self.inventories.is_empty() {
            plan["clusterInventories"] = json!(self.inventories);
        }
        format!(
            "# Apply with `mimeo migrate --apply FILE`: it adds the annotations named here with patches and\n\
             # creates the rules; `kubectl apply` refuses this kind (no apiserver serves it). Review it first\n\
             # with `mimeo diff -f FILE`.\n{}{}",
            self.cluster_hint(),
            yaml::to_string(&plan)
        )
    }

    /// For a plan with entries on openMCP `Cluster`s: the flags that reach them.
    fn cluster_hint(&self) -> String {
        let clusters: std::collections::BTreeSet<&str> = self
            .cluster_consents
            .keys()
            .map(|(c, _)| c.as_str())
            .chain(self.cluster_adoptions.keys().map(|(c, _)| c.as_str()))
            .collect();
        if clusters.is_empty() {
            return String::new();
        }
        let flags: Vec<String> = clusters
            .iter()
            .map(|c| format!("--cluster-kubeconfig {c}=PATH"))
            .collect();
        format!(
            "# Entries with `cluster:` are on that openMCP Cluster: to diff and apply them, add {}.\n",
            flags.join(" ")
        )
    }

    /// The `apiVersion` of the copies a rule (`Kind/ns/name`) makes: its source's.
    fn api_version_of(&self, reference: &str) -> String {
        self.rules
            .iter()
            .find(|r| reference_of(r) == reference)
            .and_then(|r| r["spec"]["source"]["apiVersion"].as_str())
            .unwrap_or("v1")
            .to_owned()
    }
}

/// `SyncRule/ns/name` or `ClusterSyncRule/name`, as `mimeo.dev/adopt-by` names a rule.
fn reference_of(rule: &Value) -> String {
    let kind = rule["kind"].as_str().unwrap_or_default();
    let name = rule["metadata"]["name"].as_str().unwrap_or_default();
    match rule["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{kind}/{ns}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

/// The kind of `mimeo migrate`'s output, and its API version.
pub const PLAN_KIND: &str = "Migration";
pub const PLAN_API_VERSION: &str = "mimeo.dev/v1alpha1";

/// One namespace's consent in a plan: the entries to add to its `mimeo.dev/accept-from`.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedConsent {
    /// The openMCP `Cluster` (`namespace/name`) the namespace is in; `None`: this cluster.
    #[serde(default)]
    pub cluster: Option<String>,
    pub namespace: String,
    pub accept_from: Vec<String>,
}

/// One existing copy in a plan: the rule to mark it for (`mimeo.dev/adopt-by`).
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedAdoption {
    /// The openMCP `Cluster` (`namespace/name`) the copy is in; `None`: this cluster.
    #[serde(default)]
    pub cluster: Option<String>,
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub rule: String,
}

impl PlannedConsent {
    /// `Namespace NAME[ on Cluster NS/NAME]`, for messages.
    pub fn what(&self) -> String {
        format!(
            "Namespace {}{}",
            self.namespace,
            on_cluster(self.cluster.as_deref())
        )
    }
}

impl PlannedAdoption {
    /// `KIND NS/NAME[ on Cluster NS/NAME]`, for messages.
    pub fn what(&self) -> String {
        let on = on_cluster(self.cluster.as_deref());
        format!("{} {}/{}{on}", self.kind, self.namespace, self.name)
    }
}

/// ` on Cluster <namespace/name>` for an entry of a target cluster, else nothing: for messages.
pub fn on_cluster(cluster: Option<&str>) -> String {
    cluster.map(|c| format!(" on Cluster {c}")).unwrap_or_default()
}

/// `mimeo migrate`'s output, read back.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct Plan {
    #[serde(default)]
    pub consent: Vec<PlannedConsent>,
    #[serde(default)]
    pub adopt: Vec<PlannedAdoption>,
    #[serde(default)]
    pub rules: Vec<Value>,
    /// `ClusterInventory` objects, created before the rules.
    #[serde(default, rename = "clusterInventories")]
    pub cluster_inventories: Vec<Value>,
}

impl Plan {
    /// A plan from a document of kind `Migration`; `None` for any other document.
    pub fn from_document(document: &Value) -> Option<Result<Plan, serde_json::Error>> {
        (document["kind"] == PLAN_KIND && document["apiVersion"] == PLAN_API_VERSION)
            .then(|| serde_json::from_value(document.clone()))
    }
}

/// `existing` (a `mimeo.dev/accept-from` value) with `entries` added, or `None` when it already
/// accepts them all (or accepts `*`). The entries already there stay, in their order.
pub fn accept_from_with(existing: Option<&str>, entries: &[String]) -> Option<String> {
    let mut accepted: Vec<String> = existing
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if accepted.iter().any(|e| e == "*") {
        return None;
    }
    let before = accepted.len();
    for entry in entries {
        if !accepted.contains(entry) {
            accepted.push(entry.clone());
        }
    }
    (accepted.len() > before).then(|| accepted.join(","))
}

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
        Tool::Kyverno | Tool::HelmDeployer => false,
    };
    match tool {
        Tool::Kyverno => inventory.kyverno_served,
        Tool::HelmDeployer => inventory.helm.served,
        _ => inventory
            .objects
            .iter()
            .chain(&inventory.not_migrated)
            .any(marked),
    }
}

/// A rule name from its parts: lowercase, `-` for anything else, at most 63 characters (with a
/// short hash of the whole when cut, so two long names stay apart).
fn rule_name(parts: &[&str]) -> String {
    let whole: String = parts
        .join("-")
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let whole = whole.trim_matches('-').to_owned();
    if whole.len() <= 63 {
        return whole;
    }
    let hash = crate::sync::hash::digest_bytes(whole.as_bytes());
    format!("{}-{}", whole[..54].trim_end_matches('-'), &hash[7..15])
}

/// A `SyncRule` in `namespace` copying `kind`/`name` to `targets`.
fn sync_rule(tool: Tool, source: &Object, targets: Vec<Value>, metadata: Option<Value>) -> Value {
    let mut spec = json!({"source": {"kind": source.kind, "name": source.name}, "targets": targets});
    if let Some(metadata) = metadata {
        spec["metadata"] = metadata;
    }
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
           "metadata": {"name": rule_name(&[tool.name(), &source.kind, &source.name]),
                        "namespace": source.namespace,
                        "labels": {"mimeo.dev/migrated-from": tool.name()}},
           "spec": spec})
}

/// A target for the namespaces `selector` selects, but never `except` (the source's own).
fn selector_target(selector: &Value, except: &str) -> Value {
    let mut selector = selector.clone();
    let not_source = json!({"key": NAME_LABEL, "operator": "NotIn", "values": [except]});
    match selector.get_mut("matchExpressions").and_then(Value::as_array_mut) {
        Some(expressions) => expressions.push(not_source),
        None => selector["matchExpressions"] = json!([not_source]),
    }
    json!({"namespaceSelector": selector})
}

/// The namespaces of `inventory` that `selector` (as JSON) selects.
fn selected<'a>(inventory: &'a Inventory, selector: &Value) -> Vec<&'a Namespace> {
    use kube::core::SelectorExt;
    let matcher = serde_json::from_value(selector.clone())
        .ok()
        .and_then(|s| crate::sync::object_selector::selector(&s).ok());
    let Some(matcher) = matcher else {
        return Vec::new();
    };
    inventory
        .namespaces
        .iter()
        .filter(|n| matcher.matches(&n.labels_with_name()))
        .collect()
}

/// Comma-separated entries, trimmed, empty ones dropped.
fn entries(list: &str) -> Vec<&str> {
    list.split(',').map(str::trim).filter(|e| !e.is_empty()).collect()
}

/// The copies a rule makes: `kind`/`name` in each of `namespaces`.
fn places(kind: &str, name: &str, namespaces: impl IntoIterator<Item = String>) -> Vec<Place> {
    namespaces
        .into_iter()
        .map(|namespace| Place {
            kind: kind.to_owned(),
            namespace,
            name: name.to_owned(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
