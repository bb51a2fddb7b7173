//! What `mimeo migrate` reads and what it makes of it: the [`Inventory`] of a cluster, the
//! [`Tool`]s, and the [`Migration`] each tool's module fills with rules, consents and adoptions.

use super::plan::{PLAN_API_VERSION, PLAN_KIND, on_cluster};
use super::selector::{NAME_LABEL, Selector};
use super::yaml;
use serde_json::{Value, json};
use std::collections::BTreeMap;

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
    /// openMCP HelmDeployer's configuration.
    pub helm: HelmDeployer,
    /// openMCP's resource replicator's `Replica`s and `ClusterReplica`s.
    pub replicas: ResourceReplicator,
    /// openMCP `Cluster`s (`clusters.openmcp.cloud`), as JSON: what HelmDeployer and the
    /// resource replicator select from. Read where either is served.
    pub openmcp_clusters: Vec<Value>,
    /// The openMCP `Cluster`s read through `--cluster-kubeconfig`, by `namespace/name`: their
    /// namespaces and Secrets, where HelmDeployer's `toTargetCluster` copies are.
    pub clusters: BTreeMap<String, Inventory>,
}

impl Namespace {
    /// Its labels with the one Kubernetes sets to its name, which selectors may name.
    pub(super) fn labels_with_name(&self) -> BTreeMap<String, String> {
        let mut labels = self.labels.clone();
        labels
            .entry(NAME_LABEL.to_owned())
            .or_insert_with(|| self.name.clone());
        labels
    }
}

impl Inventory {
    /// The namespaces `selector` selects.
    pub(super) fn matching(&self, selector: &Selector) -> Vec<&Namespace> {
        self.namespaces
            .iter()
            .filter(|n| selector.matches(&n.labels_with_name()))
            .collect()
    }

    pub(super) fn namespace(&self, name: &str) -> Option<&Namespace> {
        self.namespaces.iter().find(|n| n.name == name)
    }

    pub(super) fn object(&self, kind: &str, namespace: &str, name: &str) -> Option<&Object> {
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
    ResourceReplicator,
}

impl Tool {
    pub const ALL: [Tool; 6] = [
        Tool::Replicator,
        Tool::Reflector,
        Tool::Kubed,
        Tool::Kyverno,
        Tool::HelmDeployer,
        Tool::ResourceReplicator,
    ];

    /// Its name on the command line and in rule names.
    /// What shows that it ran here, for the note when it did not.
    pub(super) fn sign(self) -> &'static str {
        match self {
            Tool::Replicator => "no Secret or ConfigMap carries replicator.v1.mittwald.de/replicated-at",
            Tool::Reflector => {
                "no Secret or ConfigMap carries reflector.v1.k8s.emberstack.com/reflected-version"
            }
            Tool::Kubed => "no Secret or ConfigMap carries kubed.appscode.com/origin",
            Tool::Kyverno => "clusterpolicies.kyverno.io is not served",
            Tool::HelmDeployer => "helmdeployments.helm.open-control-plane.io is not served",
            Tool::ResourceReplicator => "replicas.core.open-control-plane.io is not served",
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
            Tool::ResourceReplicator => "openmcp-resource-replicator",
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
    pub(super) allow_system_namespaces: bool,
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
    pub(super) fn add_rule(
        &mut self,
        inventory: &Inventory,
        rule: Value,
        places: Vec<Place>,
        provenance: &Provenance,
    ) {
        self.add_copies(inventory, &rule, places, provenance);
        self.rules.push(rule);
    }

    /// [`Migration::add_rule`] without adding the rule: for a rule whose copies were asked for
    /// by different annotations.
    pub(super) fn add_copies(
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
    pub(super) fn add_copies_in(
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

    pub(super) fn note(&mut self, tool: Tool, what: &str, why: impl AsRef<str>) {
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
pub(super) fn reference_of(rule: &Value) -> String {
    let kind = rule["kind"].as_str().unwrap_or_default();
    let name = rule["metadata"]["name"].as_str().unwrap_or_default();
    match rule["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{kind}/{ns}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

/// HelmDeployer's objects on the platform cluster, as JSON.
#[derive(Clone, Debug, Default)]
pub struct HelmDeployer {
    /// Whether `helmdeployments.helm.open-control-plane.io` is served.
    pub served: bool,
    pub configs: Vec<Value>,
    pub deployments: Vec<Value>,
}

/// openMCP's resource replicator's objects on the platform cluster, as JSON.
#[derive(Clone, Debug, Default)]
pub struct ResourceReplicator {
    /// Whether `replicas.core.open-control-plane.io` is served.
    pub served: bool,
    pub replicas: Vec<Value>,
    pub cluster_replicas: Vec<Value>,
    /// The kinds (other than Secret and ConfigMap, which are always read) whose copies could not
    /// be listed, with why: their copies cannot be adopted, and the plan says so.
    pub not_read: Vec<String>,
}
