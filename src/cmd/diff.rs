//! `mimeo diff`: what applying a rule would do, read with the user's own client and decided by
//! the controller's own code. The rule is dry-run applied (the apiserver's validation and the
//! user's right to apply it), checked as the controller checks it, its sources, inputs and
//! namespaces read, its transform chain run locally under the same limits, and each copy placed
//! and decided by `sync::plan`; nothing is written.
//!
//! Only this cluster is read: copies in `RemoteCluster`s need mimeo's credentials for those
//! clusters, which the user may not hold, so targets there are named as not shown.

pub mod field_loss;
pub mod metadata;

use crate::api::{
    ClusterSyncRule, CopyState, CopyStatus, DeletionPolicy, RemoteCluster, RuleSpec, RuleStatus, SourceRef,
    SyncRule,
};
use crate::controller::error::short_message;
use crate::controller::fleet::allows;
use crate::controller::plugins::{OciPolicy, Plugins};
use crate::controller::reconcile::gather::{chain_refused, kind_not_served, rule_problem};
use crate::controller::reconcile::inputs::{self, ReadInputs};
use crate::controller::reconcile::make::{made_of, plugin_context};
use crate::controller::reconcile::stop::Stop;
use crate::controller::rule::RuleResource;
use crate::plugin::oci::{Oci, OciSettings};
use crate::plugin::{HostSettings, PluginHost};
use crate::sync::decide::{Decision, Write};
use crate::sync::desired::{CopyTarget, content};
use crate::sync::kinds::{AllowedKind, KindRef};
use crate::sync::live::LiveCopy;
use crate::sync::next_to::{self, Holders};
use crate::sync::object_selector::selector;
use crate::sync::object_selector::{Matcher, purposes_of};
use crate::sync::ownership::{
    ACCEPT_FROM_ANNOTATION, ADOPT_BY_ANNOTATION, MANAGED_BY_LABEL, MANAGED_BY_VALUE, RULE_ANNOTATION,
    RuleKey, RuleKind,
};
use crate::sync::plan::{
    ClusterPlaces, LiveCopies, Made, OwnedCopy, Pending, Plan, PlannedCopy, Read, Source, Wants, owned,
    place, unwanted,
};
use crate::sync::scope::Scope;
use crate::sync::targets::{NamespaceInfo, placements};
use crate::sync::validate;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind, SelectorExt};
use kube::discovery::Scope as DiscoveryScope;
use kube::{Client, ResourceExt};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

/// What `mimeo diff` needs besides the rule: the installation's settings as the user knows them.
pub struct DiffOptions {
    /// The kinds the controller syncs (its `--allow-kind`).
    pub allowed_kinds: Vec<AllowedKind>,
    /// The kinds `targets[].nextTo` may follow (its `--next-to-kinds`).
    pub next_to_kinds: Vec<AllowedKind>,
    /// Where `file://` plugins are read from (the controller's `--plugin-dir`, as a local copy).
    pub plugin_dir: Option<PathBuf>,
    pub host: HostSettings,
    pub oci: OciSettings,
    /// Show Secret values instead of their digests.
    pub show_secrets: bool,
    /// Told of the slow step, the plugins' first compile (15 to 20 s for Python or JavaScript),
    /// as it starts and ends: the command says so on a terminal.
    pub progress: Option<fn(&str)>,
}

/// Why `mimeo diff` could not say what the rule would do.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error("{0}")]
    Rule(String),
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0}")]
    Plugins(String),
}

fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> DiffError {
    let what = what.into();
    move |source| DiffError::Api { what, source }
}

/// A file as `mimeo diff` reads it: the rules to diff, and what else in it the rules' decisions
/// depend on once applied (server-side, as `mimeo migrate`'s output is): the labels and
/// annotations of Namespaces (consent) and the annotations of other objects (the
/// `mimeo.dev/adopt-by` marks on existing copies).
pub struct Documents {
    pub rules: Vec<RuleDocument>,
    pub overlay: Overlay,
    /// The documents that are neither rules nor a plan (Namespaces, metadata-only objects), to
    /// say what applying them server-side would delete.
    pub others: Vec<Value>,
    /// A `mimeo migrate` plan in the file, to say which annotations it adds.
    pub plan: Option<crate::cmd::migrate::Plan>,
}

/// Labels or annotations.
type Marks = BTreeMap<String, String>;

/// Metadata the file would apply, merged over what the cluster holds.
#[derive(Clone, Debug, Default)]
pub struct Overlay {
    /// Namespace name -> (labels, annotations).
    namespaces: BTreeMap<String, (Marks, Marks)>,
    /// (kind, namespace, name) -> annotations.
    objects: BTreeMap<(String, Option<String>, String), Marks>,
    /// Namespace name -> entries a `mimeo migrate` plan adds to its `mimeo.dev/accept-from`.
    accept_from: BTreeMap<String, Vec<String>>,
}

fn string_map(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

impl Documents {
    /// Reads every document of a YAML or JSON file; a `SyncRule` without a namespace takes
    /// `default_namespace` (the kubeconfig's), as `kubectl apply` does.
    pub fn parse(text: &str, default_namespace: &str) -> Result<Self, DiffError> {
        let mut rules = Vec::new();
        let mut overlay = Overlay::default();
        let mut others = Vec::new();
        let mut found_plan = None;
        for document in serde_yaml_ng::Deserializer::from_str(text) {
            let object: Value = serde::Deserialize::deserialize(document)
                .map_err(|e| DiffError::Rule(format!("the file is not YAML or JSON: {e}")))?;
            if object.is_null() {
                continue;
            }
            if let Some(plan) = crate::cmd::migrate::Plan::from_document(&object) {
                let plan = plan.map_err(|e| {
                    DiffError::Rule(format!(
                        "the Migration does not read as mimeo migrate's output: {e}"
                    ))
                })?;
                // The entries for an openMCP `Cluster` change that cluster, not this one: they
                // are shown apart (`diff_metadata`), not taken as this cluster's consent.
                for consent in plan.consent.iter().filter(|c| c.cluster.is_none()) {
                    overlay
                        .accept_from
                        .entry(consent.namespace.clone())
                        .or_default()
                        .extend(consent.accept_from.clone());
                }
                for adoption in plan.adopt.iter().filter(|a| a.cluster.is_none()) {
                    overlay.objects.insert(
                        (
                            adoption.kind.clone(),
                            Some(adoption.namespace.clone()),
                            adoption.name.clone(),
                        ),
                        [(ADOPT_BY_ANNOTATION.to_owned(), adoption.rule.clone())].into(),
                    );
                }
                for rule in &plan.rules {
                    rules.push(RuleDocument::from_value(rule.clone(), default_namespace)?);
                }
                found_plan = Some(plan);
                continue;
            }
            let kind = object["kind"].as_str().unwrap_or_default();
            let meta = &object["metadata"];
            let name = meta["name"].as_str().unwrap_or_default().to_owned();
            match kind {
                "SyncRule" | "ClusterSyncRule" => {
                    rules.push(RuleDocument::from_value(object, default_namespace)?)
                }
                "Namespace" => {
                    others.push(object.clone());
                    overlay.namespaces.insert(
                        name,
                        (string_map(&meta["labels"]), string_map(&meta["annotations"])),
                    );
                }
                _ => {
                    others.push(object.clone());
                    let namespace = meta["namespace"].as_str().map(str::to_owned);
                    overlay.objects.insert(
                        (kind.to_owned(), namespace, name),
                        string_map(&meta["annotations"]),
                    );
                }
            }
        }
        if rules.is_empty() {
            return Err(DiffError::Rule(
                "the file holds no SyncRule or ClusterSyncRule to diff".into(),
            ));
        }
        Ok(Documents {
            rules,
            overlay,
            others,
            plan: found_plan,
        })
    }
}

impl Overlay {
    /// The namespaces as they would be once the file is applied.
    fn namespaces(&self, mut found: Vec<NamespaceInfo>) -> Vec<NamespaceInfo> {
        for ns in &mut found {
            if let Some((labels, annotations)) = self.namespaces.get(&ns.name) {
                ns.labels.extend(labels.clone());
                ns.annotations.extend(annotations.clone());
            }
            if let Some(entries) = self.accept_from.get(&ns.name) {
                let existing = ns.annotations.get(ACCEPT_FROM_ANNOTATION).map(String::as_str);
                if let Some(value) = crate::cmd::migrate::accept_from_with(existing, entries) {
                    ns.annotations.insert(ACCEPT_FROM_ANNOTATION.to_owned(), value);
                }
            }
        }
        for (name, (labels, annotations)) in &self.namespaces {
            if !found.iter().any(|ns| &ns.name == name) {
                found.push(NamespaceInfo {
                    name: name.clone(),
                    labels: labels.clone(),
                    annotations: annotations.clone(),
                    terminating: false,
                });
            }
        }
        found
    }

    /// The object in a copy's place as it would be once the file is applied.
    fn object(&self, kind: &str, found: Option<Arc<DynamicObject>>) -> Option<Arc<DynamicObject>> {
        let found = found?;
        let key = (kind.to_owned(), found.namespace(), found.name_any());
        match self.objects.get(&key) {
            Some(annotations) => {
                let mut object = (*found).clone();
                object.annotations_mut().extend(annotations.clone());
                Some(Arc::new(object))
            }
            None => Some(found),
        }
    }
}

/// A rule as read from a file: either kind, with its identity.
pub struct RuleDocument {
    key: RuleKey,
    spec: RuleSpec,
    object: Value,
}

impl RuleDocument {
    /// Reads a `SyncRule` or `ClusterSyncRule`; a `SyncRule` without a namespace takes
    /// `default_namespace` (the kubeconfig's), as `kubectl apply` does.
    fn from_value(mut object: Value, default_namespace: &str) -> Result<Self, DiffError> {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let name = object["metadata"]["name"]
            .as_str()
            .ok_or_else(|| DiffError::Rule("the rule has no metadata.name".into()))?
            .to_owned();
        let spec_of = |object: &Value| -> Result<RuleSpec, DiffError> {
            serde_json::from_value(object["spec"].clone())
                .map_err(|e| DiffError::Rule(format!("spec does not read as a rule's: {e}")))
        };
        let key = match kind.as_str() {
            "SyncRule" => {
                if object["metadata"]["namespace"].as_str().is_none() {
                    object["metadata"]["namespace"] = json!(default_namespace);
                }
                let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
                RuleKey::sync_rule(namespace, &name)
            }
            "ClusterSyncRule" => RuleKey::cluster_sync_rule(&name),
            other => {
                return Err(DiffError::Rule(format!(
                    "the file holds a {other:?}: mimeo diff reads one SyncRule or ClusterSyncRule"
                )));
            }
        };
        let spec = spec_of(&object)?;
        Ok(RuleDocument { key, spec, object })
    }

    /// The rule as the cluster holds it.
    pub async fn read(client: &Client, key: &RuleKey) -> Result<Self, DiffError> {
        let spec = match (&key.kind, &key.namespace) {
            (RuleKind::SyncRule, Some(ns)) => {
                spec_in(Api::<SyncRule>::namespaced(client.clone(), ns), key).await?
            }
            _ => spec_in(Api::<ClusterSyncRule>::all(client.clone()), key).await?,
        };
        Ok(RuleDocument {
            key: key.clone(),
            spec,
            object: Value::Null,
        })
    }

    pub fn spec(&self) -> &RuleSpec {
        &self.spec
    }

    pub fn key(&self) -> &RuleKey {
        &self.key
    }

    /// The namespace the rule reads its source from.
    fn source_namespace(&self) -> Option<String> {
        match self.key.kind {
            RuleKind::SyncRule => self.key.namespace.clone(),
            RuleKind::ClusterSyncRule => self.spec.source.namespace.clone(),
        }
    }
}

/// The spec of the rule `key` names, read with `api`.
async fn spec_in<R>(api: Api<R>, key: &RuleKey) -> Result<RuleSpec, DiffError>
where
    R: RuleResource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(&key.name)
        .await
        .map_err(api_error(format!("reading {key}")))?
        .map(|rule| rule.rule_spec().clone())
        .ok_or_else(|| DiffError::Rule(format!("there is no {key}")))
}

/// What applying the rule would do to one copy.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    Create,
    /// Rewritten in place (server-side apply or replace), or deleted and created again.
    Update(Write),
    Delete,
    /// Kept, with mimeo's marks removed (`deletion: Orphan`).
    Orphan,
    InSync,
    /// Not written, and why: the state the rule's status would give it.
    Blocked {
        state: CopyState,
        message: String,
    },
}

/// One copy in the report.
#[derive(Clone, Debug)]
pub struct Entry {
    pub target: CopyTarget,
    pub source: SourceRef,
    pub change: Change,
    /// A unified diff of what is there and what would be, for creates and updates.
    pub diff: Option<String>,
}

/// What `mimeo diff` found.
#[derive(Debug)]
pub struct Report {
    pub rule: RuleKey,
    pub kind: String,
    /// The rule would be refused: the `Ready` reason and message the controller would give.
    pub refused: Option<(String, String)>,
    pub entries: Vec<Entry>,
    /// What was not looked at, and why.
    pub notes: Vec<String>,
}

impl Report {
    /// Whether applying the rule would write or delete anything.
    pub fn changes(&self) -> bool {
        self.entries.iter().any(|e| {
            matches!(
                e.change,
                Change::Create | Change::Update(_) | Change::Delete | Change::Orphan
            )
        })
    }

    /// The copies whose fate the diff could not decide: a copy it could not read (`Failed`), a
    /// transform chain that failed on it (`PluginFailed`), a cluster it could not reach or use
    /// (`Unreachable`, `Unauthorized`). Every other `!` line is a decided state the controller
    /// would report the same way (`Conflict`, `NotAccepted`, `NamespaceMissing`, `Skipped`,
    /// `Refused`, `Flapping`, `NotWatched`, `KindNotServed`, and the `RemoteCluster` lines).
    pub fn undecided(&self) -> Vec<&Entry> {
        self.entries
            .iter()
            .filter(|e| {
                matches!(
                    e.change,
                    Change::Blocked {
                        state: CopyState::Failed
                            | CopyState::PluginFailed
                            | CopyState::Unreachable
                            | CopyState::Unauthorized,
                        ..
                    }
                )
            })
            .collect()
    }

    /// `mimeo diff`'s exit code for this rule, as `kubectl diff`'s: 2 when the rule would be
    /// refused or any copy is undecided, else 1 when anything would be written or deleted, else 0.
    pub fn exit_code(&self) -> u8 {
        if self.refused.is_some() || !self.undecided().is_empty() {
            2
        } else if self.changes() {
            1
        } else {
            0
        }
    }

    /// The text `mimeo diff` prints.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Some((reason, message)) = &self.refused {
            let _ = writeln!(
                out,
                "{}: the controller would refuse it: {reason}: {message}",
                self.rule
            );
            return out;
        }
        let count = |f: fn(&Change) -> bool| self.entries.iter().filter(|e| f(&e.change)).count();
        let _ = writeln!(
            out,
            "{}: {} to create, {} to change, {} to delete, {} to orphan, {} in sync, {} not written",
            self.rule,
            count(|c| *c == Change::Create),
            count(|c| matches!(c, Change::Update(_))),
            count(|c| *c == Change::Delete),
            count(|c| *c == Change::Orphan),
            count(|c| *c == Change::InSync),
            count(|c| matches!(c, Change::Blocked { .. })),
        );
        for note in &self.notes {
            match note.starts_with('!') {
                true => writeln!(out, "{note}"),
                false => writeln!(out, "note: {note}"),
            }
            .unwrap_or_default();
        }
        for entry in &self.entries {
            let place = describe(&self.kind, &entry.target);
            let from = match &entry.source.namespace {
                Some(ns) => format!("{ns}/{}", entry.source.name),
                None => entry.source.name.clone(),
            };
            let line = match &entry.change {
                Change::Create => format!("+ create {place} (from {from})"),
                Change::Update(how) => format!("~ change {place} (from {from}; {})", how_written(*how)),
                Change::Delete => format!("- delete {place} (no target of the rule selects it)"),
                Change::Orphan => {
                    format!("- orphan {place} (kept, without mimeo's marks: deletion is Orphan)")
                }
                Change::InSync => format!("= in sync {place}"),
                Change::Blocked { state, message } => format!("! {state:?} {place}: {message}"),
            };
            let _ = writeln!(out, "{line}");
            if let Some(diff) = &entry.diff {
                for l in diff.lines() {
                    let _ = writeln!(out, "    {l}");
                }
            }
        }
        out
    }
}

fn how_written(how: Write) -> &'static str {
    match how {
        Write::Create => "created",
        Write::Apply => "server-side apply",
        Write::Replace => "replaced: fields others added go",
        Write::Recreate => "deleted and created again: immutable, or its type changes",
    }
}

fn describe(kind: &str, target: &CopyTarget) -> String {
    match &target.namespace {
        Some(ns) => format!("{kind} {ns}/{}", target.name),
        None => format!("{kind} {}", target.name),
    }
}

/// No cache: every place is read with the user's client.
struct Uncached;

impl LiveCopies for Uncached {
    fn cached(&self, _: usize, _: &CopyTarget) -> Option<Arc<LiveCopy>> {
        None
    }
}

/// Says what applying `rule` would do, reading with `client`.
pub async fn diff(
    client: Client,
    rule: &RuleDocument,
    overlay: &Overlay,
    options: DiffOptions,
) -> Result<Report, DiffError> {
    let key = &rule.key;
    let spec = &rule.spec;
    let mut report = Report {
        rule: key.clone(),
        kind: spec.source.kind.clone(),
        refused: None,
        entries: Vec::new(),
        notes: Vec::new(),
    };
    let refuse = |mut report: Report, reason: &str, message: String| {
        report.refused = Some((reason.to_owned(), message));
        Ok(report)
    };

    // The apiserver's word first: its validation, and whether this user may apply the rule.
    let existing = dry_run_apply(&client, rule).await?;
    let previous = existing.as_ref().and_then(|r| r.status.clone());

    let scope = Scope::Cluster;
    let kind = match rule_problem(key, spec, &options.allowed_kinds, &options.next_to_kinds, &scope) {
        Ok(kind) => kind,
        Err(problem) => return refuse(report, problem.reason, problem.message),
    };
    if spec.source.cluster.as_deref().is_some_and(|c| !c.is_empty()) {
        return Err(DiffError::Rule(
            "the rule reads its source from a RemoteCluster: mimeo diff reads this cluster only".into(),
        ));
    }
    let (resource, namespaced) = match resolve(&client, &kind).await? {
        Some(found) => found,
        None => {
            let ready = kind_not_served(&kind, &None);
            return refuse(report, &ready.reason, ready.message);
        }
    };
    report.kind = resource.kind.clone();
    if let Err(problem) = diffable(key, spec, &kind, namespaced) {
        return refuse(report, problem.reason, problem.message);
    }

    // Inputs, as the controller places and checks them.
    let read_inputs = match diff_inputs(&client, &scope, rule).await? {
        Ok(read) => read,
        Err(stop) => return refused_by(report, stop),
    };

    // The chain, resolved from the same references, its configs checked by the plugins.
    let pins = previous
        .as_ref()
        .map(|p| p.plugins.as_slice())
        .unwrap_or_default();
    let show_secrets = options.show_secrets;
    let (plugins, chain) = match diff_chain(&client, rule, pins, options).await? {
        Ok(found) => found,
        Err(stop) => return refused_by(report, stop),
    };

    // Sources, namespaces and places.
    report.notes.extend(remote_notes(&client, key, spec).await?);
    let known: Vec<CopyStatus> = previous
        .iter()
        .flat_map(|s| s.problems.iter().filter(|c| c.cluster.is_none()).cloned())
        .collect();
    let (sources, mut plan) = placed(&client, overlay, rule, &resource, namespaced, &known).await?;

    // Make, decide, read what is there, decide again: the controller's order.
    run_chains(
        &plugins,
        &chain,
        key,
        &resource,
        &sources,
        &read_inputs,
        &mut plan,
    )
    .await;
    plan.decide(&sources, key, spec.conflict, &Uncached);
    let reads = read_places(&client, overlay, &resource, &plan).await;
    plan.decide_reads(reads, key, spec.conflict);
    plan.settle_conflicts();

    let kept = plan.kept();
    let (owned, note) = local_copies(&client, key, &resource, namespaced).await;
    report.notes.extend(note);
    let gone = unwanted(owned, &None, &resource, &kept);
    let secrets = if show_secrets {
        SecretView::Shown
    } else {
        SecretView::digested()?
    };
    report.entries = entries(plan, &secrets);
    report.entries.extend(removals(gone, spec.deletion));
    Ok(report)
}

/// The rule's chain, resolved from the same references as the controller's (`pins`: the
/// rule's recorded ones), its configs checked by the plugins; or why the controller would stop.
/// The slow step (a plugin's first compile) is told to `options.progress` as it starts and ends.
async fn diff_chain(
    client: &Client,
    rule: &RuleDocument,
    pins: &[crate::api::PluginPin],
    options: DiffOptions,
) -> Result<Result<(Plugins, crate::controller::plugins::Chain), Stop>, DiffError> {
    let plugins = Plugins::new(
        PluginHost::new(options.host).map_err(|e| DiffError::Plugins(e.to_string()))?,
        client.clone(),
        options.plugin_dir,
        Oci::new(options.oci).map_err(|e| DiffError::Plugins(e.to_string()))?,
        OciPolicy::default(),
    );
    let (key, spec) = (&rule.key, &rule.spec);
    let say = |line: &str| {
        if let Some(progress) = options.progress.filter(|_| !spec.transforms.is_empty()) {
            progress(line);
        }
    };
    let started = std::time::Instant::now();
    say(&format!(
        "{key}: loading {} plugins (compiled on first use, then cached)...",
        spec.transforms.len()
    ));
    let namespace = key.namespace.as_deref();
    let chain = plugins
        .chain(
            key,
            None,
            &spec.transforms,
            namespace,
            &spec.plugin_pull_secrets,
            pins,
            true,
        )
        .await;
    say(&format!(
        "{key}: plugins loaded in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(match chain {
        Ok(chain) => Ok((plugins, chain.chain)),
        Err(problem) => Err(chain_refused(problem, None, true)),
    })
}

/// The rule's sources, and a copy of each placed in this cluster as the controller places them.
async fn placed(
    client: &Client,
    overlay: &Overlay,
    rule: &RuleDocument,
    resource: &ApiResource,
    namespaced: bool,
    known: &[CopyStatus],
) -> Result<(Vec<Source>, Plan), DiffError> {
    let source_ns = namespaced.then(|| rule.source_namespace().unwrap_or_default());
    let sources = read_sources(client, &rule.key, &rule.spec, resource, source_ns.as_deref()).await?;
    let clusters = [local_places(client, overlay, &rule.spec, namespaced).await?];
    let plan = place(&Wants {
        rule: &rule.key,
        scope: &Scope::Cluster,
        source_cluster: &None,
        namespaced,
        sources: &sources,
        clusters: &clusters,
        unusable: Vec::new(),
        previous: known,
        unsealed: &BTreeSet::new(),
    });
    Ok((sources, plan))
}

/// Where a rule places its copies in this cluster now.
pub struct LocalPlan {
    pub resource: ApiResource,
    /// One per place, made or blocked (`from` is `None` for a copy the rule does not make).
    pub copies: Vec<PlannedCopy>,
}

/// Where `rule` places a copy in this cluster now, and of which source, as the controller
/// places them (its authority and scope checked as the controller checks them); nothing is
/// run or written. What `mimeo reseal` holds a copy's marks against.
pub async fn local_plan(client: &Client, rule: &RuleDocument) -> Result<LocalPlan, DiffError> {
    let (key, spec) = (&rule.key, &rule.spec);
    let kind = KindRef::of_source(&spec.source);
    let refused = |problem: crate::sync::rule_problem::RuleProblem| {
        DiffError::Rule(format!(
            "the controller refuses it: {}: {}",
            problem.reason, problem.message
        ))
    };
    validate::check_authority(key.kind, spec).map_err(refused)?;
    if spec.source.cluster.as_deref().is_some_and(|c| !c.is_empty()) {
        return Err(DiffError::Rule(
            "the rule reads its source from a RemoteCluster: only this cluster is read".into(),
        ));
    }
    let Some((resource, namespaced)) = resolve(client, &kind).await? else {
        return Err(DiffError::Rule(kind_not_served(&kind, &None).message));
    };
    validate::check_scope(key.kind, spec, &kind, namespaced).map_err(refused)?;
    let (_, plan) = placed(client, &Overlay::default(), rule, &resource, namespaced, &[]).await?;
    Ok(LocalPlan {
        resource,
        copies: plan.copies,
    })
}

/// The copies the rule would no longer want, as the deletion policy treats them.
fn removals(gone: Vec<OwnedCopy>, deletion: DeletionPolicy) -> impl Iterator<Item = Entry> {
    gone.into_iter().map(move |copy| Entry {
        target: CopyTarget {
            cluster: None,
            namespace: copy.namespace,
            name: copy.name,
        },
        source: copy.source,
        change: match (deletion, copy.orphan) {
            (DeletionPolicy::Delete, false) => Change::Delete,
            (DeletionPolicy::Orphan, _) | (_, true) => Change::Orphan,
        },
        diff: None,
    })
}

/// The places the rule's targets in this cluster offer, as the user's client sees them.
async fn local_places(
    client: &Client,
    overlay: &Overlay,
    spec: &RuleSpec,
    namespaced: bool,
) -> Result<ClusterPlaces, DiffError> {
    let local_targets: Vec<_> = spec
        .targets
        .iter()
        .filter(|t| t.cluster.as_deref().is_none_or(str::is_empty) && t.cluster_selector.is_none())
        .cloned()
        .collect();
    let namespaces = overlay.namespaces(read_namespaces(client, &local_targets).await?);
    let holders = read_holders(client, &local_targets).await?;
    let places = placements(&local_targets, &namespaces, &holders, namespaced)
        .map_err(|e| DiffError::Rule(e.to_string()))?;
    Ok(ClusterPlaces {
        name: None,
        places,
        annotations: namespaces.into_iter().map(|n| (n.name, n.annotations)).collect(),
    })
}

/// What is in each place the plan could not decide about without a read.
async fn read_places(
    client: &Client,
    overlay: &Overlay,
    resource: &ApiResource,
    plan: &Plan,
) -> Vec<(usize, Read)> {
    let mut reads = Vec::new();
    for (index, _) in plan.unread() {
        let target = &plan.copies[index].target;
        let read = get(client, resource, target.namespace.as_deref(), &target.name)
            .await
            .map(|found| {
                overlay
                    .object(&resource.kind, found)
                    .map(|o| Arc::new(LiveCopy::with_content(Arc::unwrap_or_clone(o))))
            })
            .map_err(|e| (CopyState::Failed, short_message(&e.to_string())));
        reads.push((index, read));
    }
    reads
}

/// The copies in this cluster whose marks name the rule: the objects of its kind carrying
/// mimeo's label, listed with the user's client (which holds no seal key, so the marks are taken
/// as they are). Where the user may not list them, a note says that removals are not shown.
async fn local_copies(
    client: &Client,
    key: &RuleKey,
    resource: &ApiResource,
    namespaced: bool,
) -> (Vec<OwnedCopy>, Option<String>) {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    let selector = format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}");
    let listed = match api.list(&ListParams::default().labels(&selector)).await {
        Ok(list) => list.items,
        Err(e) => {
            let note = format!(
                "copies this rule made that it no longer wants are not shown: {} objects labelled \
                 {selector} cannot be listed with your permissions ({})",
                resource.kind,
                short_message(&e.to_string())
            );
            return (Vec::new(), Some(note));
        }
    };
    let rule = key.to_string();
    let copies = listed
        .into_iter()
        .filter(|o| o.annotations().get(RULE_ANNOTATION) == Some(&rule))
        .map(|o| (resource.clone(), Arc::new(LiveCopy::summed_up(o))))
        .collect();
    let owned = owned(copies, &[], resource, namespaced, |_, _| true, |_| true);
    (owned, None)
}

/// The rule's inputs, placed, read with the user's client and checked as the controller does; or
/// why the controller would stop at them.
async fn diff_inputs(
    client: &Client,
    scope: &Scope,
    rule: &RuleDocument,
) -> Result<Result<ReadInputs, Stop>, DiffError> {
    let (key, spec) = (&rule.key, &rule.spec);
    let mut resolved = Vec::with_capacity(spec.inputs.len());
    for input in &spec.inputs {
        resolved.push(
            resolve(client, &KindRef::of_input(&input.from))
                .await
                .map_err(|e| match e {
                    DiffError::Api { source, .. } => source,
                    other => kube::Error::Service(other.to_string().into()),
                }),
        );
    }
    let placed = match inputs::place(
        scope,
        key,
        spec,
        resolved,
        rule.source_namespace().as_deref(),
        None,
    ) {
        Ok(placed) => placed,
        Err(stop) => return Ok(Err(stop)),
    };
    let mut found = Vec::with_capacity(placed.len());
    for input in &placed {
        found.push(
            get(
                client,
                &input.resource,
                input.namespace.as_deref(),
                &input.object_name,
            )
            .await?,
        );
    }
    Ok(inputs::read(key, &placed, found, None, None))
}

/// What can be said of the targets in `RemoteCluster`s without mimeo's credentials for them:
/// whether each cluster exists and lets the rule use it (the controller's own check); their
/// copies are not shown.
async fn remote_notes(client: &Client, key: &RuleKey, spec: &RuleSpec) -> Result<Vec<String>, DiffError> {
    let named: BTreeSet<&str> = spec
        .targets
        .iter()
        .filter_map(|t| t.cluster.as_deref().filter(|c| !c.is_empty()))
        .collect();
    let selectors: Vec<_> = spec
        .targets
        .iter()
        .filter_map(|t| t.cluster_selector.as_ref())
        .collect();
    if named.is_empty() && selectors.is_empty() {
        return Ok(Vec::new());
    }
    let api = Api::<RemoteCluster>::all(client.clone());
    let mut clusters: BTreeMap<String, Option<RemoteCluster>> =
        named.iter().map(|n| (n.to_string(), None)).collect();
    let mut notes = Vec::new();
    let listed = match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) => {
            notes.push(format!(
                "targets in RemoteClusters are not checked: RemoteClusters cannot be read with \
                 your permissions ({})",
                short_message(&e.to_string())
            ));
            return Ok(notes);
        }
    };
    for remote in listed {
        let name = remote.name_any();
        let selected = selectors
            .iter()
            .any(|s| selector(s).is_ok_and(|s| s.matches(remote.labels())));
        if selected || named.contains(name.as_str()) {
            clusters.insert(name, Some(remote));
        }
    }
    let labels = match &key.namespace {
        Some(ns) => Api::<Namespace>::all(client.clone())
            .get_opt(ns)
            .await
            .ok()
            .flatten()
            .map(|n| n.labels().clone())
            .unwrap_or_default(),
        None => BTreeMap::new(),
    };
    for (name, remote) in clusters {
        let said = match remote {
            None => format!("! ClusterMissing RemoteCluster {name}: RemoteCluster {name} does not exist"),
            Some(remote) => match allows(key, &labels, &remote) {
                Err(problem) => format!("! {:?} RemoteCluster {name}: {}", problem.state, problem.message),
                Ok(()) => format!(
                    "copies in RemoteCluster {name} are not shown: mimeo diff reads this cluster only"
                ),
            },
        };
        notes.push(said);
    }
    Ok(notes)
}

/// The controller's checks of a rule against its kind's scope, and one of a diff's own: the
/// places of a `forEach` target depend on objects in other clusters, which a diff does not read.
fn diffable(
    key: &RuleKey,
    spec: &RuleSpec,
    kind: &KindRef,
    namespaced: bool,
) -> Result<(), crate::sync::rule_problem::RuleProblem> {
    validate::check_scope(key.kind, spec, kind, namespaced)?;
    if spec.targets.iter().any(|t| t.for_each.is_some()) {
        return Err(crate::sync::rule_problem::RuleProblem {
            reason: "ForEachNotShown",
            message: "mimeo diff does not read the objects of forEach targets (they may be in other clusters): this rule is not diffed; `kubectl get clustersyncrule` and `mimeo status` show its copies".into(),
        });
    }
    Ok(())
}

fn refused_by(mut report: Report, stop: Stop) -> Result<Report, DiffError> {
    match stop {
        Stop::Refused(refusal) => {
            report.refused = Some((refusal.ready.reason, refusal.ready.message));
            Ok(report)
        }
        Stop::Failed(e) => Err(DiffError::Rule(e.to_string())),
    }
}

/// Server-side applies the rule with `dryRun=All`: the apiserver validates it (schema and CEL
/// rules) and checks that this user may apply it, as `kubectl apply` would. Returns the rule as
/// it stands now, if it exists.
async fn dry_run_apply(client: &Client, rule: &RuleDocument) -> Result<Option<RuleView>, DiffError> {
    let name = &rule.key.name;
    let (current, applied) = match rule.key.kind {
        RuleKind::SyncRule => {
            let namespace = rule.key.namespace.as_deref().unwrap_or_default();
            dry_run_in(
                Api::<SyncRule>::namespaced(client.clone(), namespace),
                name,
                &rule.object,
            )
            .await
        }
        RuleKind::ClusterSyncRule => {
            dry_run_in(Api::<ClusterSyncRule>::all(client.clone()), name, &rule.object).await
        }
    };
    match applied {
        Ok(()) => Ok(current),
        Err(kube::Error::Api(e)) => Err(DiffError::Rule(format!(
            "the apiserver refuses the rule ({}): {}",
            e.reason, e.message
        ))),
        Err(e) => Err(api_error("applying the rule as a dry run")(e)),
    }
}

/// The dry-run apply of `object` through `api`, and the rule as it stands now.
async fn dry_run_in<R>(api: Api<R>, name: &str, object: &Value) -> (Option<RuleView>, kube::Result<()>)
where
    R: RuleResource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams::apply("mimeo-diff").dry_run().force();
    let applied = api.patch(name, &params, &Patch::Apply(object)).await.map(|_| ());
    let current = api.get_opt(name).await.ok().flatten().map(|r| RuleView {
        status: r.rule_status().cloned(),
    });
    (current, applied)
}

/// The part of an existing rule the diff starts from.
struct RuleView {
    status: Option<RuleStatus>,
}

/// A kind as this cluster serves it, and whether it is namespaced; `None` when it is not served.
async fn resolve(client: &Client, kind: &KindRef) -> Result<Option<(ApiResource, bool)>, DiffError> {
    if let Some(resource) = kind.builtin_resource() {
        return Ok(Some((resource, true)));
    }
    let gvk: GroupVersionKind = kind.gvk();
    match kube::discovery::pinned_kind(client, &gvk).await {
        Ok((resource, capabilities)) => {
            Ok(Some((resource, capabilities.scope == DiscoveryScope::Namespaced)))
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(kube::Error::Discovery(_)) => Ok(None),
        Err(e) => Err(api_error(format!("looking up {kind}"))(e)),
    }
}

async fn get(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Arc<DynamicObject>>, DiffError> {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    let place = namespace
        .map(|ns| format!("{ns}/{name}"))
        .unwrap_or_else(|| name.to_owned());
    api.get_opt(name)
        .await
        .map(|o| o.map(Arc::new))
        .map_err(api_error(format!("reading {} {place}", resource.kind)))
}

/// The sources the rule reads, sorted by name, as the controller's `Source`s.
async fn read_sources(
    client: &Client,
    key: &RuleKey,
    spec: &RuleSpec,
    resource: &ApiResource,
    namespace: Option<&str>,
) -> Result<Vec<Source>, DiffError> {
    let mut found: Vec<DynamicObject> = match (&spec.source.name, &spec.source.selector) {
        (Some(name), _) => get(client, resource, namespace, name)
            .await?
            .map(|o| (*o).clone())
            .into_iter()
            .collect(),
        (None, Some(labels)) => {
            let selector = selector(labels).map_err(|e| DiffError::Rule(e.to_string()))?;
            let api: Api<DynamicObject> = match namespace {
                Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
                None => Api::all_with(client.clone(), resource),
            };
            api.list(&ListParams::default())
                .await
                .map_err(api_error(format!("listing the sources ({})", resource.plural)))?
                .items
                .into_iter()
                .filter(|o| selector.matches(o.labels()))
                .collect()
        }
        (None, None) => Vec::new(),
    };
    found.sort_by_key(|o| o.name_any());
    Ok(found
        .iter()
        .map(|o| Source::new(key, &spec.metadata, spec.secret_type, o, resource))
        .collect())
}

/// The namespaces the targets may select: every one when a target selects by labels or name
/// pattern (which needs the right to list them), else those named.
async fn read_namespaces(
    client: &Client,
    targets: &[crate::api::Target],
) -> Result<Vec<NamespaceInfo>, DiffError> {
    let api = Api::<Namespace>::all(client.clone());
    let info = |ns: Namespace| NamespaceInfo {
        name: ns.name_any(),
        labels: ns.labels().clone(),
        annotations: ns.annotations().clone(),
        terminating: ns.metadata.deletion_timestamp.is_some(),
    };
    if targets
        .iter()
        .any(|t| t.namespace_selector.is_some() || t.namespace_pattern.is_some() || t.next_to.is_some())
    {
        let list = api.list(&ListParams::default()).await.map_err(api_error(
            "listing namespaces (a target selects them by labels, pattern or nextTo)",
        ))?;
        return Ok(list.items.into_iter().map(info).collect());
    }
    let mut out = Vec::new();
    for name in targets.iter().filter_map(|t| t.namespace.as_deref()) {
        if let Some(ns) = api
            .get_opt(name)
            .await
            .map_err(api_error(format!("reading namespace {name}")))?
        {
            out.push(info(ns));
        }
    }
    Ok(out)
}

/// The namespaces each `nextTo` selects, from a list of its kind made with the user's rights.
async fn read_holders(client: &Client, targets: &[crate::api::Target]) -> Result<Holders, DiffError> {
    let mut holders = Holders::default();
    for next_to in targets.iter().filter_map(|t| t.next_to.as_ref()) {
        let kind = next_to::kind_of(next_to);
        let refused = |problem: crate::sync::rule_problem::RuleProblem| {
            DiffError::Rule(format!("{}: {}", problem.reason, problem.message))
        };
        let resource = match resolve(client, &kind).await? {
            Some((resource, true)) => resource,
            Some((_, false)) => return Err(refused(next_to::cluster_scoped(next_to))),
            None => return Err(refused(next_to::not_served(next_to))),
        };
        let matcher = Matcher::new(&next_to.selector).map_err(|e| DiffError::Rule(format!("nextTo: {e}")))?;
        let list = Api::<DynamicObject>::all_with(client.clone(), &resource)
            .list(&ListParams::default())
            .await
            .map_err(api_error(format!("listing {kind} (a target is nextTo it)")))?;
        let objects: next_to::HeldObjects = list
            .items
            .into_iter()
            .map(|o| {
                let at = (o.namespace().unwrap_or_default(), o.name_any());
                let held = next_to::Held {
                    labels: o.labels().clone(),
                    purposes: purposes_of(&o.data),
                };
                (at, held)
            })
            .collect();
        holders.insert(next_to.clone(), next_to::holding_namespaces(&objects, &matcher));
    }
    Ok(holders)
}

/// Runs the chain on every placed copy, as the make step does (without its memory of outputs).
async fn run_chains(
    plugins: &Plugins,
    chain: &crate::controller::plugins::Chain,
    key: &RuleKey,
    resource: &ApiResource,
    sources: &[Source],
    inputs: &ReadInputs,
    plan: &mut Plan,
) {
    if chain.is_empty() {
        return;
    }
    for copy in &mut plan.copies {
        let (Some((s, _)), Pending::Make) = (copy.from, &copy.pending) else {
            continue;
        };
        let source = &sources[s];
        let context = plugin_context(key, resource, source, &None, &copy.target, inputs);
        let mut desired = source.template.copy_for(copy.target.clone());
        let object = std::mem::take(&mut desired.object);
        copy.pending = Pending::Made(match plugins.run(chain, context, object, |_, _| {}).await {
            Ok(outcome) => made_of(outcome, desired),
            Err(e) => Made::Failed {
                message: short_message(&e.to_string()),
                summary: e.summary(),
            },
        });
    }
}

/// How a Secret's values appear in a diff.
enum SecretView {
    Shown,
    /// As a digest keyed with a secret of this run: equal values show equal digests within one
    /// diff, yet a short password cannot be looked up from its digest, or compared across runs.
    Digested([u8; 32]),
}

impl SecretView {
    fn digested() -> Result<Self, DiffError> {
        use std::io::Read as _;
        let mut key = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut key))
            .map_err(|e| {
                DiffError::Rule(format!(
                    "reading /dev/urandom for the digests of Secret values: {e}"
                ))
            })?;
        Ok(SecretView::Digested(key))
    }

    fn digest(key: &[u8; 32], value: &[u8]) -> String {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        hasher.update(key);
        hasher.update(value);
        let hex: String = hasher
            .finalize()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect();
        hex
    }
}

/// The object as it was read (its kind named as the copy's), to be shown.
fn as_read(live: &LiveCopy, desired: &Value) -> Value {
    let mut object = Map::new();
    object.insert("apiVersion".into(), desired["apiVersion"].clone());
    object.insert("kind".into(), desired["kind"].clone());
    object.insert(
        "metadata".into(),
        serde_json::to_value(live.object_meta()).unwrap_or_default(),
    );
    object.extend(live.full.clone().unwrap_or_default());
    Value::Object(object)
}

/// The report's entries for the planned copies, with a diff for each write.
fn entries(plan: Plan, secrets: &SecretView) -> Vec<Entry> {
    plan.copies
        .into_iter()
        .map(|copy| {
            let (change, diff) = match (&copy.decision, &copy.pending) {
                // The sources here were read from the apiserver just now: a copy that claims a
                // newer one than that claims falsely, and the controller writes it as decided.
                (
                    Some(Decision::Write(how) | Decision::Behind { write: how, .. }),
                    Pending::Write(desired),
                ) => {
                    let change = match how {
                        Write::Create => Change::Create,
                        other => Change::Update(*other),
                    };
                    let after = shown(&desired.object, secrets);
                    let before = copy
                        .live
                        .as_deref()
                        .map(|live| shown(&as_read(live, &desired.object), secrets));
                    (change, Some(unified(before.as_deref(), &after, &copy.target)))
                }
                (Some(Decision::InSync), _) => (Change::InSync, None),
                _ => (
                    Change::Blocked {
                        state: copy.state,
                        message: copy.message.clone().unwrap_or_default(),
                    },
                    None,
                ),
            };
            Entry {
                target: copy.target,
                source: copy.source,
                change,
                diff,
            }
        })
        .collect()
}

/// An object as the diff shows it: what a copy holds and says of itself (its identity, labels,
/// annotations and content), a Secret's values as digests unless asked for.
fn shown(object: &Value, secrets: &SecretView) -> String {
    let mut out = Map::new();
    out.insert("apiVersion".into(), object["apiVersion"].clone());
    out.insert("kind".into(), object["kind"].clone());
    let mut meta = Map::new();
    for field in ["name", "namespace", "labels", "annotations"] {
        if let Some(value) = object["metadata"].get(field).filter(|v| !v.is_null()) {
            meta.insert(field.into(), value.clone());
        }
    }
    out.insert("metadata".into(), Value::Object(meta));
    let mut body = content(object);
    body.remove("status");
    let is_secret = object["kind"] == "Secret" && object["apiVersion"] == "v1";
    if let (true, SecretView::Digested(key)) = (is_secret, secrets) {
        for field in ["data", "stringData"] {
            if let Some(values) = body.get_mut(field).and_then(Value::as_object_mut) {
                for value in values.values_mut() {
                    let text = value.as_str().unwrap_or_default();
                    let bytes = match field {
                        "data" => base64_decoded(text),
                        _ => text.as_bytes().to_vec(),
                    };
                    *value = json!(format!(
                        "({} bytes, digest {})",
                        bytes.len(),
                        SecretView::digest(key, &bytes)
                    ));
                }
            }
        }
    }
    out.extend(body);
    serde_yaml_ng::to_string(&Value::Object(out)).unwrap_or_default()
}

fn base64_decoded(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap_or_else(|_| text.as_bytes().to_vec())
}

fn unified(before: Option<&str>, after: &str, target: &CopyTarget) -> String {
    let place = match &target.namespace {
        Some(ns) => format!("{ns}/{}", target.name),
        None => target.name.clone(),
    };
    let before_name = match before {
        Some(_) => format!("{place} (now)"),
        None => "(nothing there)".to_owned(),
    };
    similar::TextDiff::from_lines(before.unwrap_or_default(), after)
        .unified_diff()
        .context_radius(3)
        .header(&before_name, &format!("{place} (after apply)"))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::hash::digest_bytes;

    #[test]
    fn a_plans_entries_on_another_cluster_are_not_this_clusters() {
        let plan = r#"
apiVersion: mimeo.dev/v1alpha1
kind: Migration
consent:
- {namespace: "helm", acceptFrom: ["default/r"]}
- {cluster: "test-0/cluster-0", namespace: "apps", acceptFrom: ["default/r"]}
adopt:
- {cluster: "test-0/cluster-0", apiVersion: "v1", kind: "Secret", namespace: "apps", name: "s", rule: "SyncRule/default/r"}
rules:
- {apiVersion: mimeo.dev/v1alpha1, kind: SyncRule, metadata: {name: r, namespace: default},
   spec: {source: {kind: Secret, name: s}, targets: [{namespace: helm}]}}
"#;
        let documents = Documents::parse(plan, "default").unwrap();
        assert_eq!(
            documents.overlay.accept_from.keys().collect::<Vec<_>>(),
            ["helm"],
            "apps is consent on cluster-0, not here"
        );
        assert!(documents.overlay.objects.is_empty());
        let read = documents.plan.unwrap();
        assert_eq!(read.consent[0].cluster, None);
        assert_eq!(read.adopt[0].cluster.as_deref(), Some("test-0/cluster-0"));
    }

    #[test]
    fn secret_values_are_shown_as_digests_unless_asked() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                            "metadata": {"name": "s", "namespace": "a", "uid": "x", "resourceVersion": "9"},
                            "data": {"password": "aHVudGVyMg=="}});
        let run = SecretView::digested().unwrap();
        let hidden = shown(&secret, &run);
        assert!(!hidden.contains("aHVudGVyMg=="), "{hidden}");
        assert!(hidden.contains("(7 bytes, digest "), "{hidden}");
        assert!(!hidden.contains("resourceVersion"), "{hidden}");
        assert_eq!(hidden, shown(&secret, &run), "one run, one digest");
        let unsalted = digest_bytes(b"hunter2");
        assert!(
            !hidden.contains(&unsalted[7..23]),
            "not the plain digest: {hidden}"
        );
        assert_ne!(
            hidden,
            shown(&secret, &SecretView::digested().unwrap()),
            "another run, another digest"
        );
        let plain = shown(&secret, &SecretView::Shown);
        assert!(plain.contains("aHVudGVyMg=="), "{plain}");
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                                "data": {"k": "visible"}});
        assert!(shown(&config_map, &run).contains("visible"));
    }

    #[test]
    fn an_undecided_copy_exits_2_whatever_else_changes() {
        let entry = |change: Change| Entry {
            target: CopyTarget {
                cluster: None,
                namespace: Some("a".into()),
                name: "s".into(),
            },
            source: SourceRef {
                namespace: Some("p".into()),
                name: "s".into(),
            },
            change,
            diff: None,
        };
        let blocked = |state| {
            entry(Change::Blocked {
                state,
                message: "m".into(),
            })
        };
        let report = |entries: Vec<Entry>| Report {
            rule: RuleKey::sync_rule("p", "r"),
            kind: "Secret".into(),
            refused: None,
            entries,
            notes: Vec::new(),
        };
        assert_eq!(report(vec![entry(Change::InSync)]).exit_code(), 0);
        assert_eq!(report(vec![blocked(CopyState::Conflict)]).exit_code(), 0);
        assert_eq!(report(vec![blocked(CopyState::NotAccepted)]).exit_code(), 0);
        assert_eq!(
            report(vec![entry(Change::Create), blocked(CopyState::Skipped)]).exit_code(),
            1
        );
        for state in [
            CopyState::Failed,
            CopyState::PluginFailed,
            CopyState::Unreachable,
            CopyState::Unauthorized,
        ] {
            let r = report(vec![entry(Change::Create), blocked(state)]);
            assert_eq!(r.exit_code(), 2, "{state:?}");
            assert_eq!(r.undecided().len(), 1);
        }
        let mut refused = report(Vec::new());
        refused.refused = Some(("KindNotAllowed".into(), "m".into()));
        assert_eq!(refused.exit_code(), 2);
    }

    #[test]
    fn a_diff_names_both_sides() {
        let target = CopyTarget {
            cluster: None,
            namespace: Some("a".into()),
            name: "s".into(),
        };
        let text = unified(Some("k: 1\n"), "k: 2\n", &target);
        assert!(text.contains("--- a/s (now)"), "{text}");
        assert!(text.contains("+++ a/s (after apply)"), "{text}");
        assert!(text.contains("-k: 1") && text.contains("+k: 2"), "{text}");
        let created = unified(None, "k: 2\n", &target);
        assert!(created.contains("--- (nothing there)"), "{created}");
    }
}
