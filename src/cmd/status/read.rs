//! Reads what `mimeo status` shows, with the reader's own kubeconfig and rights: the rules, and
//! the metadata (never the content) of their copies in the cluster the rules live in.
//!
//! The copies are listed by mimeo's label across the cluster; a reader who may not do that (a
//! tenant) gets them from the namespaces it names and may read, and the tree says which copies
//! are counted but not listed.

use super::tree::{FoundCopy, Listing, RuleFacts, RuleTree, WarningView, build, recent_warnings};
use crate::api::{ClusterSyncRule, RuleSpec, RuleStatus, SyncRule};
use crate::controller::RuleResource;
use crate::sync::kinds::KindRef;
use crate::sync::ownership::{FIELD_MANAGER, MANAGED_BY_LABEL, MANAGED_BY_VALUE, RULE_ANNOTATION, RuleKey};
use crate::sync::plan::source_of;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DynamicObject, ListParams, ObjectList, PartialObjectMeta};
use kube::core::ApiResource;
use kube::discovery::Scope;
use kube::{Client, ResourceExt};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Which rules to show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// One `SyncRule`, or (no name) every one of the namespace.
    SyncRules { namespace: String, name: Option<String> },
    /// One `ClusterSyncRule`, or (no name) every one.
    ClusterSyncRules { name: Option<String> },
    /// Every `SyncRule` of every namespace, and every `ClusterSyncRule`.
    Everywhere,
}

/// The rule argument could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "{0:?} is not a rule: give NAME (a SyncRule), syncrule/NAME, clustersyncrule/NAME, or clustersyncrules \
     for every ClusterSyncRule"
)]
pub struct BadRuleArgument(String);

impl Selection {
    /// The selection a command line names: `NAME` or `syncrule/NAME` (`msr/NAME`) in
    /// `namespace`, `clustersyncrule/NAME` (`mcsr/NAME`), `clustersyncrules` for all of them,
    /// nothing for every `SyncRule` of `namespace`.
    pub fn parse(rule: Option<&str>, namespace: &str) -> Result<Selection, BadRuleArgument> {
        let sync_rules = |name: Option<&str>| Selection::SyncRules {
            namespace: namespace.to_owned(),
            name: name.map(str::to_owned),
        };
        let Some(rule) = rule else {
            return Ok(sync_rules(None));
        };
        let bad = || BadRuleArgument(rule.to_owned());
        let (kind, name) = match rule.split_once('/') {
            Some((kind, name)) if !name.is_empty() && !name.contains('/') => {
                (kind.to_ascii_lowercase(), Some(name))
            }
            Some(_) => return Err(bad()),
            None if rule.contains('.') || rule.is_empty() => return Err(bad()),
            None => match rule.to_ascii_lowercase().as_str() {
                "syncrules" | "msr" => return Ok(sync_rules(None)),
                "clustersyncrules" | "mcsr" => return Ok(Selection::ClusterSyncRules { name: None }),
                _ => return Ok(sync_rules(Some(rule))),
            },
        };
        match kind.as_str() {
            "syncrule" | "syncrules" | "msr" => Ok(sync_rules(name)),
            "clustersyncrule" | "clustersyncrules" | "mcsr" => Ok(Selection::ClusterSyncRules {
                name: name.map(str::to_owned),
            }),
            _ => Err(bad()),
        }
    }
}

/// Why the rules could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("{kind} {place} not found")]
    NotFound { kind: &'static str, place: String },
    #[error("no {kind} found {place}")]
    NoneFound { kind: &'static str, place: String },
    #[error("reading {what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
}

/// The trees of the rules `selection` names.
pub async fn read(client: &Client, selection: &Selection) -> Result<Vec<RuleTree>, StatusError> {
    let rules = rules(client, selection).await?;
    let mut lister = CopyLister::new(client.clone());
    let mut warnings = WarningLister::default();
    let mut trees = Vec::with_capacity(rules.len());
    for rule in &rules {
        let listing = lister.copies_of(rule).await;
        let facts = RuleFacts {
            kind: match rule.key.namespace {
                Some(_) => "SyncRule",
                None => "ClusterSyncRule",
            },
            namespace: rule.key.namespace.as_deref(),
            name: &rule.key.name,
            generation: rule.generation,
            source: describe_source(&rule.spec, rule.key.namespace.as_deref()),
            status: rule.status.as_ref(),
        };
        let mut tree = build(&facts, &listing);
        match warnings.of(client, &rule.key).await {
            Ok(warnings) => tree.warnings = warnings,
            Err(why) => tree.notes.push(why),
        }
        trees.push(tree);
    }
    Ok(trees)
}

/// The Warning events of the rules' namespaces, listed once per namespace however many rules
/// it holds (`mimeo status -A` over hundreds of rules makes one request per namespace).
#[derive(Default)]
struct WarningLister {
    by_namespace: HashMap<String, Result<Vec<Event>, String>>,
}

impl WarningLister {
    /// The rule's recent Warning events, from its namespace (a `ClusterSyncRule`'s are in
    /// `default`, where Kubernetes puts the events of cluster-scoped objects); a reader who may
    /// not list them gets a note instead.
    async fn of(&mut self, client: &Client, key: &RuleKey) -> Result<Vec<WarningView>, String> {
        let (namespace, kind) = match &key.namespace {
            Some(ns) => (ns.as_str(), "SyncRule"),
            None => ("default", "ClusterSyncRule"),
        };
        if !self.by_namespace.contains_key(namespace) {
            let listed = Api::<Event>::namespaced(client.clone(), namespace)
                .list(&ListParams::default().fields("type=Warning"))
                .await
                .map(|list| list.items)
                .map_err(|e| format!("its events in namespace {namespace} could not be read: {e}"));
            self.by_namespace.insert(namespace.to_owned(), listed);
        }
        let events = self.by_namespace[namespace].as_ref().map_err(Clone::clone)?;
        let about_it: Vec<Event> = events
            .iter()
            .filter(|e| {
                e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(key.name.as_str())
                })
            })
            .cloned()
            .collect();
        Ok(recent_warnings(&about_it, k8s_openapi::jiff::Timestamp::now()))
    }
}

/// A rule as read, whichever its kind.
struct Rule {
    key: RuleKey,
    generation: Option<i64>,
    spec: RuleSpec,
    status: Option<RuleStatus>,
}

async fn rules(client: &Client, selection: &Selection) -> Result<Vec<Rule>, StatusError> {
    match selection {
        Selection::SyncRules { namespace, name } => {
            let api: Api<SyncRule> = Api::namespaced(client.clone(), namespace);
            let place = |name: &str| format!("{namespace}/{name}");
            rules_of(api, name.as_deref(), place, &format!("namespace {namespace}")).await
        }
        Selection::ClusterSyncRules { name } => {
            let api: Api<ClusterSyncRule> = Api::all(client.clone());
            rules_of(api, name.as_deref(), str::to_owned, "the cluster").await
        }
        Selection::Everywhere => {
            let none_is_fine = |found: Result<Vec<Rule>, StatusError>| match found {
                Err(StatusError::NoneFound { .. }) => Ok(Vec::new()),
                other => other,
            };
            let place = |name: &str| name.to_owned();
            let mut rules = none_is_fine(
                rules_of(
                    Api::<SyncRule>::all(client.clone()),
                    None,
                    place,
                    "every namespace",
                )
                .await,
            )?;
            rules.extend(none_is_fine(
                rules_of(
                    Api::<ClusterSyncRule>::all(client.clone()),
                    None,
                    place,
                    "the cluster",
                )
                .await,
            )?);
            if rules.is_empty() {
                return Err(StatusError::NoneFound {
                    kind: "rule",
                    place: "in the cluster".into(),
                });
            }
            Ok(rules)
        }
    }
}

/// The rule of this kind named `name` (placed by `place` in messages), or every one in `scope`.
async fn rules_of<R: RuleResource>(
    api: Api<R>,
    name: Option<&str>,
    place: impl Fn(&str) -> String,
    scope: &str,
) -> Result<Vec<Rule>, StatusError> {
    let rules = match name {
        Some(name) => vec![
            api.get_opt(name)
                .await
                .map_err(|source| StatusError::Kube {
                    what: format!("{} {}", R::KIND, place(name)),
                    source,
                })?
                .ok_or_else(|| StatusError::NotFound {
                    kind: R::KIND,
                    place: place(name),
                })?,
        ],
        None => {
            let rules = api
                .list(&ListParams::default())
                .await
                .map_err(|source| StatusError::Kube {
                    what: format!("the {}s of {scope}", R::KIND),
                    source,
                })?
                .items;
            if rules.is_empty() {
                return Err(StatusError::NoneFound {
                    kind: R::KIND,
                    place: format!("in {scope}"),
                });
            }
            rules
        }
    };
    Ok(rules
        .into_iter()
        .map(|r| Rule {
            key: r.key(),
            generation: r.meta().generation,
            spec: r.rule_spec().clone(),
            status: r.rule_status().cloned(),
        })
        .collect())
}

/// `Secret team-a/registry`, `ConfigMap team-a (every one labelled app=x)`, with the cluster.
fn describe_source(spec: &RuleSpec, rule_namespace: Option<&str>) -> String {
    let source = &spec.source;
    let namespace = source.namespace.as_deref().or(rule_namespace);
    let what = match (&source.name, &source.selector) {
        (Some(name), _) => match namespace {
            Some(ns) => format!("{ns}/{name}"),
            None => name.clone(),
        },
        (None, Some(selector)) => {
            let labels: Vec<String> = selector
                .match_labels
                .iter()
                .flatten()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let expressions = selector.match_expressions.as_ref().map_or(0, Vec::len);
            let mut chosen = labels.join(",");
            if expressions > 0 {
                chosen.push_str(&format!(" and {expressions} expression(s)"));
            }
            match namespace {
                Some(ns) => format!("{ns} (every one labelled {chosen})"),
                None => format!("(every one labelled {chosen})"),
            }
        }
        (None, None) => "(nothing named)".to_owned(),
    };
    let cluster = source
        .cluster
        .as_deref()
        .filter(|c| !c.is_empty())
        .map(|c| format!(" in RemoteCluster {c}"))
        .unwrap_or_default();
    format!("{} {what}{cluster}", source.kind)
}

/// Lists the copies of rules, once per kind for the whole cluster when the reader may, else
/// namespace by namespace where it may.
struct CopyLister {
    client: Client,
    /// Per kind: every copy mimeo made of it, or why it could not be listed.
    everywhere: BTreeMap<KindRef, Result<Vec<Meta>, kube::Error>>,
    /// Per kind and namespace: the copies there, or why they could not be listed.
    per_namespace: BTreeMap<(KindRef, String), Result<Vec<Meta>, kube::Error>>,
    resources: BTreeMap<KindRef, Option<(ApiResource, bool)>>,
}

impl CopyLister {
    fn new(client: Client) -> Self {
        CopyLister {
            client,
            everywhere: BTreeMap::new(),
            per_namespace: BTreeMap::new(),
            resources: BTreeMap::new(),
        }
    }

    async fn copies_of(&mut self, rule: &Rule) -> Listing {
        let kind = KindRef::of_source(&rule.spec.source);
        let Some((resource, namespaced)) = self.resource(&kind).await else {
            return Listing {
                found: Vec::new(),
                partial: Some(format!(
                    "{} is not served in this cluster: its copies here cannot be listed",
                    kind.kind
                )),
            };
        };
        let key = rule.key.to_string();
        let mine = |objects: &[Meta]| -> Vec<FoundCopy> {
            objects
                .iter()
                .filter(|o| o.annotations().get(RULE_ANNOTATION) == Some(&key))
                .map(found)
                .collect()
        };
        if !self.everywhere.contains_key(&kind) {
            let all = list(&Api::all_with(self.client.clone(), &resource)).await;
            self.everywhere.insert(kind.clone(), all);
        }
        match &self.everywhere[&kind] {
            Ok(all) => {
                return Listing {
                    found: mine(all),
                    partial: None,
                };
            }
            Err(e) if !forbidden(e) => {
                return Listing {
                    found: Vec::new(),
                    partial: Some(format!("listing {} failed: {e}", kind.kind)),
                };
            }
            Err(_) => {}
        }
        if !namespaced {
            return Listing {
                found: Vec::new(),
                partial: Some(format!(
                    "you may not list {} objects: the copies are not listed",
                    kind.kind
                )),
            };
        }
        let mut found = Vec::new();
        let mut unreadable = Vec::new();
        let namespaces = namespaces_named(rule);
        for namespace in &namespaces {
            let slot = (kind.clone(), namespace.clone());
            if !self.per_namespace.contains_key(&slot) {
                let api = Api::namespaced_with(self.client.clone(), namespace, &resource);
                self.per_namespace.insert(slot.clone(), list(&api).await);
            }
            match &self.per_namespace[&slot] {
                Ok(objects) => found.extend(mine(objects)),
                Err(_) => unreadable.push(namespace.as_str()),
            }
        }
        let mut why = format!(
            "you may not list {} in every namespace: listed in {} only",
            kind.kind,
            comma_list(
                namespaces
                    .iter()
                    .map(String::as_str)
                    .filter(|n| !unreadable.contains(n))
            )
        );
        if !unreadable.is_empty() {
            why.push_str(&format!(
                "; not readable in {}",
                comma_list(unreadable.into_iter())
            ));
        }
        Listing {
            found,
            partial: Some(why),
        }
    }

    /// The kind as this cluster serves it, and whether it is namespaced.
    async fn resource(&mut self, kind: &KindRef) -> Option<(ApiResource, bool)> {
        if !self.resources.contains_key(kind) {
            let resolved = match kind.builtin_resource() {
                Some(resource) => Some((resource, true)),
                None => kube::discovery::pinned_kind(&self.client, &kind.gvk())
                    .await
                    .ok()
                    .map(|(resource, caps)| (resource, caps.scope == Scope::Namespaced)),
            };
            self.resources.insert(kind.clone(), resolved);
        }
        self.resources[kind].clone()
    }
}

/// The namespaces of the rule's cluster a reader who may not list everywhere can still look in:
/// the rule's own and those its targets name.
fn namespaces_named(rule: &Rule) -> BTreeSet<String> {
    let local = |cluster: &Option<String>| cluster.as_deref().is_none_or(str::is_empty);
    rule.key
        .namespace
        .iter()
        .cloned()
        .chain(
            rule.spec
                .targets
                .iter()
                .filter(|t| local(&t.cluster) && t.cluster_selector.is_none())
                .filter_map(|t| t.namespace.clone()),
        )
        .collect()
}

fn comma_list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    match names.is_empty() {
        true => "none".to_owned(),
        false => names.join(", "),
    }
}

type Meta = PartialObjectMeta<DynamicObject>;

fn forbidden(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(e) if e.code == 403)
}

/// The metadata of every object of mimeo's label that `api` lists, page by page.
async fn list(api: &Api<DynamicObject>) -> Result<Vec<Meta>, kube::Error> {
    let mut params = ListParams::default()
        .labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"))
        .limit(500);
    let mut objects = Vec::new();
    loop {
        let page: ObjectList<Meta> = api.list_metadata(&params).await?;
        objects.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(objects),
        }
    }
}

fn found(object: &Meta) -> FoundCopy {
    let written: Option<Time> = object
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| f.manager.as_deref() == Some(FIELD_MANAGER))
        .filter_map(|f| f.time.clone())
        .max_by_key(|t| t.0);
    FoundCopy {
        namespace: object.namespace(),
        name: object.name_any(),
        source: Some(source_of(&object.metadata)),
        written,
        deleting: object.metadata.deletion_timestamp.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_arguments() {
        let ns = "team-a";
        let sync = |name: Option<&str>| Selection::SyncRules {
            namespace: ns.into(),
            name: name.map(str::to_owned),
        };
        let cluster = |name: Option<&str>| Selection::ClusterSyncRules {
            name: name.map(str::to_owned),
        };
        assert_eq!(Selection::parse(None, ns), Ok(sync(None)));
        assert_eq!(Selection::parse(Some("creds"), ns), Ok(sync(Some("creds"))));
        assert_eq!(
            Selection::parse(Some("syncrule/creds"), ns),
            Ok(sync(Some("creds")))
        );
        assert_eq!(Selection::parse(Some("msr/creds"), ns), Ok(sync(Some("creds"))));
        assert_eq!(Selection::parse(Some("SyncRules"), ns), Ok(sync(None)));
        assert_eq!(
            Selection::parse(Some("clustersyncrule/all"), ns),
            Ok(cluster(Some("all")))
        );
        assert_eq!(Selection::parse(Some("mcsr/all"), ns), Ok(cluster(Some("all"))));
        assert_eq!(Selection::parse(Some("clustersyncrules"), ns), Ok(cluster(None)));
        for bad in ["secret/x", "syncrule/", "a/b/c", "syncrules.mimeo.dev", ""] {
            assert!(Selection::parse(Some(bad), ns).is_err(), "{bad}");
        }
    }
}
