//! openMCP's resource replicator: `Replica` (namespaced) and `ClusterReplica` (cluster-scoped),
//! group `core.open-control-plane.io`, each rendering its sources through a Go template into
//! namespaces of the platform cluster, next to openMCP `Cluster`s (`location: NextTo`) or onto
//! them (`Onto`).
//!
//! Each (Cluster)Replica becomes one `ClusterSyncRule` (its sources may be in any namespace, and
//! only a `ClusterSyncRule` may create namespaces) when what it does can be said in mimeo's
//! terms: one source, copied as it is or renamed with the placeholders a target's `name` fills
//! in. Anything else (a text template, several sources, computed values, a kind turned into
//! another) is a note that says what it does and how mimeo would do it: never a rule that copies
//! something else. Its copies carry its labels naming the (Cluster)Replica; those are adopted, a
//! same-named object without them is left alone. Pure: nothing here reads the cluster.

mod targets;

use super::model::{Inventory, Migration, Object, Place, Provenance, ResourceReplicator, Tool};
use super::openmcp::InventorySpec;
use super::rules::name_within;
use regex::Regex;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;
use targets::{Namespaces, Parts, Shared, has_cluster, namespaces_of, targets};

/// The replicator's marks on every copy.
pub const MANAGED_BY: &str = "openmcp.cloud/managed-by";
/// `replica` or `clusterreplica`: which kind made the copy.
pub const KIND_LABEL: &str = "replica.core.open-control-plane.io/kind";
pub const NAME_LABEL: &str = "replica.core.open-control-plane.io/name";
/// A `Replica`'s namespace; not set by a `ClusterReplica`.
pub const NAMESPACE_LABEL: &str = "replica.core.open-control-plane.io/namespace";
/// The (Cluster)Replica's generation the copy was written at.
pub const GENERATION_LABEL: &str = "replica.core.open-control-plane.io/generation";
/// `Keep`, set by a user on a copy: the replicator strips its labels instead of deleting it.
pub const DELETION_POLICY_LABEL: &str = "replica.core.open-control-plane.io/deletion-policy";
/// The replicator's finalizer on each (Cluster)Replica; it never lets go of it while ignored.
pub const FINALIZER: &str = "replica.core.open-control-plane.io/finalizer";
/// openMCP's operation annotation: `ignore` stops the replicator reconciling that object.
pub const OPERATION_ANNOTATION: &str = "openmcp.cloud/operation";
const GROUP: &str = "core.open-control-plane.io";
/// The types a rule's `secretType` may name.
const SECRET_TYPES: [&str; 6] = [
    "Opaque",
    "kubernetes.io/dockerconfigjson",
    "kubernetes.io/dockercfg",
    "kubernetes.io/basic-auth",
    "kubernetes.io/ssh-auth",
    "kubernetes.io/tls",
];

/// One `{{ ... }}` action of a Go template, with its trim markers.
static ACTION: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\{\{-?\s*(.*?)\s*-?\}\}").unwrap());
/// The `kind:` line of a text template.
static TEMPLATE_KIND: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?m)^kind:\s*(\S+)\s*$").unwrap());
/// `index .sources.<id>.<field> "<key>"` or `.sources.<id>.<field>.<key>`: one key of a source.
static KEY_OF_SOURCE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"^(?:index\s+\.sources\.([A-Za-z0-9_]+)\.([A-Za-z]+)\s+"((?:[^"\\]|\\.)*)"|\.sources\.([A-Za-z0-9_]+)\.([A-Za-z]+)\.([A-Za-z0-9_]+))$"#).unwrap()
});

/// A (Cluster)Replica as read.
struct Replica<'a> {
    /// `Replica` or `ClusterReplica`.
    kind: &'static str,
    namespace: Option<&'a str>,
    name: &'a str,
    value: &'a Value,
}

impl Replica<'_> {
    fn what(&self) -> String {
        match self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }

    /// Its resource and name as kubectl takes them.
    fn kubectl(&self) -> String {
        let resource = format!("{}s.{GROUP}", self.kind.to_lowercase());
        match self.namespace {
            Some(ns) => format!("{resource} -n {ns} {}", self.name),
            None => format!("{resource} {}", self.name),
        }
    }

    fn spec(&self) -> &Value {
        &self.value["spec"]
    }
}

/// The one source, as a rule names it.
#[derive(Clone, Debug)]
struct Source {
    id: String,
    api_version: String,
    kind: String,
    /// `None`: a cluster-scoped kind.
    namespace: Option<String>,
    name: String,
}

impl Source {
    fn core(&self) -> bool {
        self.api_version == "v1" && matches!(self.kind.as_str(), "Secret" | "ConfigMap")
    }

    fn as_rule_source(&self) -> Value {
        let mut source = json!({"kind": self.kind, "name": self.name});
        if !self.core() {
            source["apiVersion"] = json!(self.api_version);
        }
        if let Some(ns) = &self.namespace {
            source["namespace"] = json!(ns);
        }
        source
    }
}

/// What each copy is, from the template (or, without one, the source).
#[derive(Clone, Debug, Default, PartialEq)]
struct CopyShape {
    /// The copy's name as a target's `name` says it; `None`: the source's.
    name: Option<String>,
    /// Whether the name holds `{{object.name}}` or `{{object.namespace}}`: one copy per `Cluster`.
    per_cluster: bool,
    /// The template's literal `metadata.namespace`, for targets that name no namespace.
    namespace: Option<String>,
    /// The rule's `secretType`.
    secret_type: Option<String>,
    /// The keys the template copies (`data` and `binaryData`); `None`: every key (no template).
    keys: Option<BTreeSet<String>>,
    /// Whether the copy carries the source's labels and annotations (without a template).
    carries_metadata: bool,
    /// Whether a template makes it (the namespace is then the template's, not the source's).
    templated: bool,
}

/// A replica that cannot be said as a rule: what it does, and how mimeo would do it.
type Untranslatable = String;

/// The source and the copy of a replica, or why it cannot be a rule.
fn source_and_copy(replica: &Replica) -> Result<(Source, CopyShape), Untranslatable> {
    let spec = replica.spec();
    let sources = spec["sources"].as_array().cloned().unwrap_or_default();
    let described: Vec<String> = sources.iter().map(describe_source).collect();
    if sources.len() != 1 {
        return Err(format!(
            "combines {} sources ({}) through its template: a mimeo rule copies one source; make it by hand with the main source as `source`, each other one as an `inputs` entry, and a `transforms` step with the template plugin that writes the keys from `inputs` (docs/plugins.md)",
            sources.len(),
            described.join(", ")
        ));
    }
    let raw = &sources[0];
    let group = raw["group"].as_str().unwrap_or_default();
    let version = raw["version"].as_str().unwrap_or_default();
    // A fake-client fixture writes `apiVersion` instead of group and version.
    let api_version = match (group, version, raw["apiVersion"].as_str()) {
        (_, "", Some(api_version)) => api_version.to_owned(),
        ("", version, _) => version.to_owned(),
        (group, version, _) => format!("{group}/{version}"),
    };
    let source = Source {
        id: raw["id"].as_str().unwrap_or_default().to_owned(),
        api_version,
        kind: raw["kind"].as_str().unwrap_or_default().to_owned(),
        namespace: raw["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .map(str::to_owned),
        name: raw["name"].as_str().unwrap_or_default().to_owned(),
    };
    if source.kind.is_empty() || source.name.is_empty() || source.api_version.is_empty() {
        return Err(format!(
            "its source {} does not name a version, kind and name",
            described[0]
        ));
    }
    let copy = match &spec["template"] {
        Value::Null => CopyShape {
            carries_metadata: true,
            ..CopyShape::default()
        },
        Value::String(text) => {
            let kind = TEMPLATE_KIND
                .captures(text)
                .map(|k| k[1].trim_matches(['"', '\'']).to_owned());
            if let Some(kind) = kind.filter(|k| *k != source.kind) {
                return Err(format!(
                    "turns its source {} into a {kind} through a text template ({text:?}): mimeo copies an object as its own kind; a kind converted is not supported",
                    described[0]
                ));
            }
            return Err(format!(
                "renders its copies from a text template ({text:?}): mimeo writes no Go template; make it by hand: a rule with source {} and a `transforms` step with the template plugin for computed keys (docs/plugins.md)",
                described[0]
            ));
        }
        Value::Object(template) => structured(template, &source)?,
        other => return Err(format!("its template {other} is neither text nor a mapping")),
    };
    Ok((source, copy))
}

fn describe_source(source: &Value) -> String {
    let kind = source["kind"].as_str().unwrap_or_default();
    let name = source["name"].as_str().unwrap_or_default();
    match source["namespace"].as_str().filter(|n| !n.is_empty()) {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// A mapping template that only renames the copy, keeps its type and lists keys of the one
/// source, each as itself: the copy those say. Anything else: what it does.
fn structured(template: &Map<String, Value>, source: &Source) -> Result<CopyShape, Untranslatable> {
    let shown = serde_json::to_string(template).unwrap_or_default();
    let computed = |what: String| {
        format!(
            "its template {what} ({shown}): mimeo copies the source as it is (renamed at most); make it by hand with a `transforms` step (the template plugin writes computed keys, labels and annotations; docs/plugins.md)"
        )
    };
    let kind = template.get("kind").and_then(Value::as_str).unwrap_or_default();
    let api_version = template
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if kind != source.kind || api_version != source.api_version {
        return Err(format!(
            "renders a {api_version} {kind} from its source {} {} (a kind converted, or rewritten as another version): mimeo copies an object as its own kind; not supported",
            source.api_version, source.kind
        ));
    }
    if !source.core() {
        return Err(computed(format!("writes a {kind} field by field")));
    }
    let mut copy = CopyShape {
        templated: true,
        ..CopyShape::default()
    };
    let metadata = template.get("metadata").and_then(Value::as_object);
    for key in metadata.into_iter().flat_map(|m| m.keys()) {
        if key != "name" && key != "namespace" {
            return Err(computed(format!("sets metadata.{key}")));
        }
    }
    let Some(name) = metadata.and_then(|m| m.get("name")).and_then(Value::as_str) else {
        return Err(computed("names no metadata.name".into()));
    };
    let (name, per_cluster) = copy_name(name, source).map_err(&computed)?;
    copy.per_cluster = per_cluster;
    copy.name = (name != "{{source.name}}" && name != source.name).then_some(name);
    match metadata.and_then(|m| m.get("namespace")) {
        None => {}
        Some(Value::String(ns)) if !ns.contains("{{") => copy.namespace = Some(ns.clone()),
        Some(ns) => return Err(computed(format!("computes metadata.namespace {ns}"))),
    }
    let mut keys = BTreeSet::new();
    for (field, value) in template {
        match (field.as_str(), source.kind.as_str()) {
            ("apiVersion" | "kind" | "metadata", _) => {}
            ("type", "Secret") => copy.secret_type = secret_type(value, source).map_err(computed)?,
            ("data", _) | ("binaryData", "ConfigMap") => {
                for (key, value) in value.as_object().into_iter().flatten() {
                    let same = value
                        .as_str()
                        .is_some_and(|v| is_key_of_source(v, source, field, key));
                    if !same {
                        return Err(computed(format!("writes {field}.{key} as {value}")));
                    }
                    keys.insert(key.clone());
                }
            }
            (field, _) => return Err(computed(format!("sets {field}"))),
        }
    }
    if source.kind == "Secret" && !template.contains_key("type") {
        // Written without a type, the replicator's copy is Opaque whatever the source's.
        copy.secret_type = Some("Opaque".into());
    }
    copy.keys = Some(keys);
    Ok(copy)
}

/// The copy's name in a target's placeholders, and whether it is one per `Cluster`.
fn copy_name(template: &str, source: &Source) -> Result<(String, bool), String> {
    let mut out = String::new();
    let mut per_cluster = false;
    let mut last = 0;
    for found in ACTION.captures_iter(template) {
        let whole = found.get(0).unwrap();
        out.push_str(&template[last..whole.start()]);
        last = whole.end();
        let action = found[1].trim();
        let of_source = |field: &str| action == format!(".sources.{}.metadata.{field}", source.id);
        let placeholder = match action {
            ".target.cluster.name" => {
                per_cluster = true;
                "{{object.name}}"
            }
            ".target.cluster.namespace" => {
                per_cluster = true;
                "{{object.namespace}}"
            }
            ".target.namespace" => "{{target.namespace}}",
            _ if of_source("name") => "{{source.name}}",
            _ if of_source("namespace") => "{{source.namespace}}",
            _ => return Err(format!("computes metadata.name with {{{{ {action} }}}}")),
        };
        out.push_str(placeholder);
    }
    out.push_str(&template[last..]);
    let placeholders = [
        "{{object.name}}",
        "{{object.namespace}}",
        "{{target.namespace}}",
        "{{source.name}}",
        "{{source.namespace}}",
    ];
    let rest = placeholders
        .iter()
        .fold(out.clone(), |rest, p| rest.replace(p, ""));
    if rest.contains("{{") || rest.contains("}}") {
        return Err(format!("computes metadata.name {template:?}"));
    }
    Ok((out, per_cluster))
}

/// Whether a template value is exactly the same key of the one source.
fn is_key_of_source(value: &str, source: &Source, field: &str, key: &str) -> bool {
    let Some(action) = ACTION.captures(value.trim()) else {
        return false;
    };
    if action.get(0).map(|m| m.as_str()) != Some(value.trim()) {
        return false;
    }
    let Some(found) = KEY_OF_SOURCE.captures(action[1].trim()) else {
        return false;
    };
    let (id, of, named) = match (found.get(1), found.get(4)) {
        (Some(id), _) => (id.as_str(), &found[2], found[3].replace("\\\"", "\"")),
        (None, Some(id)) => (id.as_str(), &found[5], found[6].to_owned()),
        _ => return false,
    };
    id == source.id && of == field && named == key
}

/// A template's `type`: the source's (`{{ .sources.<id>.type }}`: nothing to say), or a literal
/// one a rule's `secretType` can name.
fn secret_type(value: &Value, source: &Source) -> Result<Option<String>, String> {
    let text = value.as_str().unwrap_or_default().trim();
    let same = format!(".sources.{}.type", source.id);
    if let Some(action) = ACTION.captures(text)
        && action.get(0).map(|m| m.as_str()) == Some(text)
        && action[1].trim() == same
    {
        return Ok(None);
    }
    if SECRET_TYPES.contains(&text) {
        return Ok(Some(text.to_owned()));
    }
    Err(format!("sets type {value}"))
}

/// Whether `copy` carries the replicator's marks naming `replica`: its kind, name and (for a
/// `Replica`) namespace, and the managed-by label. Anyone who may write the object may write them
/// too, and only such a one: the evidence is as good as the object's own RBAC.
fn made_by_replicator(copy: &Object, replica: &Replica) -> Option<String> {
    let label = |key: &str| copy.labels.get(key).map(String::as_str);
    let kind = replica.kind.to_lowercase();
    let managed_by = label(MANAGED_BY).filter(|v| !v.is_empty())?;
    if label(KIND_LABEL) != Some(kind.as_str())
        || label(NAME_LABEL) != Some(replica.name)
        || label(NAMESPACE_LABEL) != replica.namespace
    {
        return None;
    }
    let namespace = replica
        .namespace
        .map(|ns| format!(", {NAMESPACE_LABEL}={ns}"))
        .unwrap_or_default();
    Some(format!(
        "{MANAGED_BY}={managed_by}, {KIND_LABEL}={kind}, {NAME_LABEL}={}{namespace}",
        replica.name
    ))
}

/// The kinds, other than Secret and ConfigMap, whose copies in this cluster a (Cluster)Replica
/// with one namespaced source makes: their metadata is read to find the copies to adopt.
pub fn copy_kinds(replicas: &ResourceReplicator) -> BTreeSet<(String, String)> {
    all(replicas)
        .filter_map(|r| source_and_copy(&r).ok())
        .map(|(source, _)| source)
        .filter(|s| !s.core() && s.namespace.is_some())
        .map(|s| (s.api_version, s.kind))
        .collect()
}

/// The namespaces, by name, the replicator's rules copy into on other Clusters: what is read of
/// a Cluster given with `--cluster-kubeconfig`.
pub fn target_namespaces(inventory: &Inventory) -> BTreeSet<String> {
    let mut shared = Shared::default();
    all(&inventory.replicas)
        .filter_map(|r| {
            let (source, copy) = source_and_copy(&r).ok()?;
            targets(inventory, &mut shared, &r, "", &source, &copy).ok()
        })
        .flat_map(|parts| parts.cluster_places.into_iter().map(|(_, p)| p.namespace))
        .collect()
}

/// The label selectors (as JSON) by which the replicator's rules choose namespaces on other
/// Clusters: the namespaces they select there are read too.
pub fn target_namespace_selectors(inventory: &Inventory) -> Vec<Value> {
    let mut selectors = Vec::new();
    for replica in all(&inventory.replicas) {
        let onto = replica.spec()["targets"].as_array().into_iter().flatten();
        for target in onto.filter(|t| has_cluster(t)) {
            if let Ok(Namespaces::Selector(labels)) = namespaces_of(target)
                && !selectors.contains(&labels)
            {
                selectors.push(labels);
            }
        }
    }
    selectors
}

fn all(replicas: &ResourceReplicator) -> impl Iterator<Item = Replica<'_>> {
    let mut ordered: Vec<Replica> = replicas
        .replicas
        .iter()
        .filter_map(|v| replica_of("Replica", v))
        .chain(
            replicas
                .cluster_replicas
                .iter()
                .filter_map(|v| replica_of("ClusterReplica", v)),
        )
        .collect();
    ordered.sort_by_key(|r| (r.kind, r.namespace.map(str::to_owned), r.name.to_owned()));
    ordered.into_iter()
}

fn replica_of<'a>(kind: &'static str, value: &'a Value) -> Option<Replica<'a>> {
    Some(Replica {
        kind,
        namespace: (kind == "Replica")
            .then(|| value["metadata"]["namespace"].as_str())
            .flatten(),
        name: value["metadata"]["name"].as_str()?,
        value,
    })
}

/// The rule's name: after the (Cluster)Replica, within a name's 253 characters.
fn rule_name_of(replica: &Replica) -> String {
    let tool = Tool::ResourceReplicator.name();
    match replica.namespace {
        Some(ns) => name_within(&[tool, ns, replica.name], 253),
        None => name_within(&[tool, replica.name], 253),
    }
}

pub fn translate(inventory: &Inventory, migration: &mut Migration) {
    let tool = Tool::ResourceReplicator;
    for why in &inventory.replicas.not_read {
        migration.note(
            tool,
            "copies",
            format!("could not be read: {why}; none of them is planned for adoption, and mimeo reports Conflict on each until it is annotated mimeo.dev/adopt-by (or removed)"),
        );
    }
    let mut shared = Shared::default();
    let mut translated = Vec::new();
    let mut follows_clusters = false;
    for replica in all(&inventory.replicas) {
        let what = replica.what();
        let rule = rule_name_of(&replica);
        // The inventories a replica would add count only if it is translated.
        let mut trial = shared.clone();
        let outcome = source_and_copy(&replica).and_then(|(source, copy)| {
            let parts = targets(inventory, &mut trial, &replica, &rule, &source, &copy)?;
            Ok((source, copy, parts))
        });
        let (source, copy, parts) = match outcome {
            Ok(outcome) => outcome,
            Err(why) => {
                migration.note(
                    tool,
                    &what,
                    format!("{why}. Not translated: leave it to the replicator (do not annotate it {OPERATION_ANNOTATION}: ignore) until you replace it"),
                );
                continue;
            }
        };
        shared = trial;
        follows_clusters |= parts.follows_clusters;
        let onto = parts.targets.iter().any(|t| t.get("clusterSelector").is_some());
        if replica.value["metadata"]["annotations"][OPERATION_ANNOTATION] == "ignore" {
            migration.note(
                tool,
                &what,
                format!("annotated {OPERATION_ANNOTATION}: ignore already: the replicator does not act on it now; translated as it reads"),
            );
        }
        add(inventory, migration, &replica, &rule, &source, &copy, parts);
        let resource = match source.api_version.split_once('/') {
            Some((group, _)) => format!("{}.{group}", source.kind.to_lowercase()),
            None => source.kind.to_lowercase(),
        };
        translated.push((replica, resource, onto));
    }
    for (name, parts) in shared.inventories {
        let spec = InventorySpec {
            selector: &parts.selector,
            namespaces: &parts.namespaces,
            rule_namespaces: None,
            create_namespaces: parts.create_namespaces,
        };
        migration
            .inventories
            .push(super::openmcp::cluster_inventory(tool, &name, spec));
    }
    if translated.is_empty() {
        return;
    }
    if follows_clusters {
        migration.note(
            tool,
            "nextTo and forEach",
            "the rules follow openMCP Clusters: the controller needs --next-to-kinds Cluster.clusters.openmcp.cloud (Helm value nextTo.kinds), and mimeo diff the same flag; without it they report NextToKindNotAllowed",
        );
    }
    cut_over(migration, &translated);
}

/// The cut-over, in order, with each (Cluster)Replica's own commands.
/// `translated` holds each (Cluster)Replica with the resource of its copies, as kubectl names it,
/// and whether it copies onto other Clusters.
fn cut_over(migration: &mut Migration, translated: &[(Replica, String, bool)]) {
    let tool = Tool::ResourceReplicator;
    migration.note(
        tool,
        "cut-over",
        format!(
            "in this order: 1. annotate every (Cluster)Replica translated here {OPERATION_ANNOTATION}=ignore first (the replicator rewrites its labels on its copies at every interval and would fight mimeo over them); 2. mimeo migrate --apply the plan; 3. kubectl get clustersyncrules -l mimeo.dev/migrated-from={}: each Ready, Synced; 4. an ignored (Cluster)Replica never lets go of its finalizer {FINALIZER}: remove it and delete the (Cluster)Replica; the copies stay, now mimeo's. The copies keep the replicator's labels (mimeo leaves labels others wrote alone): drop them then if you like. The commands for each follow",
            tool.name()
        ),
    );
    for (replica, resource, onto) in translated {
        let target = replica.kubectl();
        let mut selector = vec![
            format!("{KIND_LABEL}={}", replica.kind.to_lowercase()),
            format!("{NAME_LABEL}={}", replica.name),
        ];
        selector.extend(replica.namespace.map(|ns| format!("{NAMESPACE_LABEL}={ns}")));
        let labels = [
            MANAGED_BY,
            KIND_LABEL,
            NAME_LABEL,
            NAMESPACE_LABEL,
            GENERATION_LABEL,
            DELETION_POLICY_LABEL,
        ]
        .map(|l| format!("{l}-"))
        .join(" ");
        let finalizers = replica.value["metadata"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let release = match finalizers.iter().position(|f| f == FINALIZER) {
            Some(i) => format!(
                "kubectl patch {target} --type=json -p '[{{\"op\":\"test\",\"path\":\"/metadata/finalizers/{i}\",\"value\":\"{FINALIZER}\"}},{{\"op\":\"remove\",\"path\":\"/metadata/finalizers/{i}\"}}]'; "
            ),
            None => String::new(),
        };
        migration.note(
            tool,
            &replica.what(),
            format!(
                "cut-over: before applying, kubectl annotate {target} {OPERATION_ANNOTATION}=ignore; once its rule is Synced, {release}kubectl delete {target}; then, if you like{}, kubectl label {resource} -A -l {} {labels}",
                if *onto { " (here, and with each Cluster's kubeconfig on each Cluster it copied onto)" } else { "" },
                selector.join(",")
            ),
        );
    }
}

/// The rule of one replica, the copies it adopts, and what the user should know.
fn add(
    inventory: &Inventory,
    migration: &mut Migration,
    replica: &Replica,
    rule_name: &str,
    source: &Source,
    copy: &CopyShape,
    parts: Parts,
) {
    let tool = Tool::ResourceReplicator;
    let what = replica.what();
    let mut notes = parts.notes.clone();
    let rule = rule_of(replica, rule_name, source, copy, &parts, &mut notes);
    let reference = format!("ClusterSyncRule/{rule_name}");
    let evidence = |o: &Object| made_by_replicator(o, replica);
    let provenance = Provenance {
        evidence: &evidence,
        asked_by: format!("spec of {what}"),
        written_in: replica.namespace.unwrap_or_default().to_owned(),
    };
    migration.add_copies_in(
        None,
        inventory,
        &rule,
        parts.places.iter().cloned().collect(),
        &provenance,
    );
    let mut by_cluster: BTreeMap<&str, Vec<Place>> = BTreeMap::new();
    for (cluster, place) in &parts.cluster_places {
        by_cluster.entry(cluster).or_default().push(place.clone());
    }
    let mut unread = BTreeSet::new();
    for (cluster, places) in by_cluster {
        match inventory.clusters.get(cluster) {
            Some(read) => migration.add_copies_in(Some(cluster), read, &rule, places, &provenance),
            None => {
                unread.insert(cluster.to_owned());
            }
        }
    }
    if !unread.is_empty() {
        notes.push(format!(
            "its copies onto Clusters {} were not read (give --cluster-kubeconfig NAMESPACE/NAME=PATH for each, and run again): none is planned for adoption there, and mimeo reports Conflict on the replicator's copies there until they are annotated mimeo.dev/adopt-by: {reference} (or removed)",
            unread.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    let by_labels: Vec<&String> = parts.by_labels.iter().collect();
    if !by_labels.is_empty() {
        notes.push(format!(
            "its copies onto Clusters {} are in namespaces chosen by labels, which were not read (give --cluster-kubeconfig NAMESPACE/NAME=PATH for each, and run again): none is planned for adoption there, and mimeo reports Conflict on the replicator's copies there until they are annotated mimeo.dev/adopt-by: {reference} (or removed)",
            by_labels.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    notes.extend(kept(inventory, migration, &reference, &parts));
    notes.extend(status_not_made(replica, source, &parts));
    for note in notes {
        migration.note(tool, &what, note);
    }
    migration.rules.push(rule);
}

/// The rule itself, with notes on what it does otherwise than the replica.
fn rule_of(
    replica: &Replica,
    rule_name: &str,
    source: &Source,
    copy: &CopyShape,
    parts: &Parts,
    notes: &mut Vec<String>,
) -> Value {
    // The strictest: Fail, then Skip, then Adopt.
    let strictest = ["Fail", "Skip", "Adopt"]
        .into_iter()
        .find(|c| parts.conflicts.contains(c))
        .unwrap_or("Fail");
    if parts.conflicts.len() > 1 {
        notes.push(format!(
            "its targets' targetConflictPolicy differ; a rule has one conflict policy: the strictest, {strictest}"
        ));
    }
    if parts.skips_missing {
        notes.push(
            "namespacePolicy: Skip: mimeo does not create the missing namespace either, but reports its copy NamespaceMissing (the rule not Synced) until the namespace exists, where the replicator stays healthy".into(),
        );
    }
    if let Some(interval) = replica.spec()["interval"].as_str() {
        notes.push(format!(
            "interval {interval} dropped: mimeo watches its source and updates the copies when it changes"
        ));
    }
    if let Some(keys) = &copy.keys {
        let keys: Vec<&String> = keys.iter().collect();
        notes.push(format!(
            "its template copies the keys {keys:?} of the source as they are; mimeo copies every key: if the source has others, the copies get them too (keep only these with a transforms step, the filter-keys plugin with include {keys:?})"
        ));
    }
    if !source.core() {
        notes.push(format!(
            "copies {} {}: the controller syncs it only if its --allow-kind lists it ({}.{})",
            source.api_version,
            source.kind,
            source.kind,
            source.api_version.split('/').next().unwrap_or_default()
        ));
    }
    let mut spec =
        json!({"source": source.as_rule_source(), "targets": parts.targets, "conflict": strictest});
    if let Some(secret_type) = &copy.secret_type {
        spec["secretType"] = json!(secret_type);
    }
    if copy.carries_metadata {
        spec["metadata"] = json!({"labels": {"include": ["*"]}, "annotations": {"include": ["*"]}});
    }
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule",
        "metadata": {"name": rule_name, "labels": {"mimeo.dev/migrated-from": Tool::ResourceReplicator.name()}},
        "spec": spec})
}

/// Notes for the copies the user marked to be kept: after adoption, mimeo's own mark should say
/// the same.
fn kept(inventory: &Inventory, migration: &Migration, reference: &str, parts: &Parts) -> Vec<String> {
    let adopted = |cluster: Option<&str>, p: &Place| match cluster {
        None => migration.adoptions.get(p).map(String::as_str) == Some(reference),
        Some(c) => {
            let key = (c.to_owned(), p.clone());
            migration.cluster_adoptions.get(&key).map(String::as_str) == Some(reference)
        }
    };
    parts
        .places
        .iter()
        .map(|p| (None, p))
        .chain(parts.cluster_places.iter().map(|(c, p)| (Some(c.as_str()), p)))
        .filter(|(cluster, p)| {
            let read = match cluster {
                None => Some(inventory),
                Some(c) => inventory.clusters.get(*c),
            };
            read.and_then(|r| r.object(&p.kind, &p.namespace, &p.name))
                .is_some_and(|o| o.labels.get(DELETION_POLICY_LABEL).map(String::as_str) == Some("Keep"))
                && adopted(*cluster, p)
        })
        .map(|(cluster, p)| {
            let context = cluster
                .map(|c| format!(" (on Cluster {c}, with its kubeconfig)"))
                .unwrap_or_default();
            format!(
                "{} {}/{}: labelled {DELETION_POLICY_LABEL}: Keep; once adopted, kubectl annotate {} -n {} {} mimeo.dev/deletion=Orphan{context}, so that mimeo too keeps it when it would delete it",
                p.kind,
                p.namespace,
                p.name,
                p.kind.to_lowercase(),
                p.namespace,
                p.name
            )
        })
        .collect()
}

/// The copies the (Cluster)Replica's status lists that the rule does not make now: they stay,
/// unowned, after the cut-over.
fn status_not_made(replica: &Replica, source: &Source, parts: &Parts) -> Vec<String> {
    let mut notes = Vec::new();
    for group in replica.value["status"]["replicas"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let kind = group["type"]["kind"].as_str().unwrap_or_default();
        for resource in group["resources"].as_array().into_iter().flatten() {
            let namespace = resource["namespace"].as_str().unwrap_or_default();
            let name = resource["name"].as_str().unwrap_or_default();
            let place = Place {
                kind: kind.to_owned(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            };
            let cluster = match (
                resource["cluster"]["namespace"].as_str(),
                resource["cluster"]["name"].as_str(),
            ) {
                (Some(ns), Some(n)) => Some(format!("{ns}/{n}")),
                _ => None,
            };
            let made = match &cluster {
                None => parts.places.contains(&place),
                Some(c) => {
                    parts.cluster_places.contains(&(c.clone(), place.clone())) || parts.by_labels.contains(c)
                }
            };
            // A cluster-scoped copy on a Cluster is made by a target with no namespace.
            let cluster_scoped = namespace.is_empty() && source.namespace.is_none() && cluster.is_some();
            if !made && !cluster_scoped {
                let on = cluster.map(|c| format!(" on Cluster {c}")).unwrap_or_default();
                notes.push(format!(
                    "{kind} {namespace}/{name}{on}: its status lists it as a copy, but the rule does not make it now: after the cut-over it stays as it is, owned by no one (delete it if it is not wanted)"
                ));
            }
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::migrate::model::Namespace;
    use crate::cmd::migrate::{Options, migrate};
    use std::path::{Path, PathBuf};

    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/inventory/openmcp/resource-replicator")
    }

    fn yaml(path: &Path) -> Value {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_yaml_ng::from_str(&text).unwrap()
    }

    /// The YAML files of a folder, by file name.
    fn files(dir: &Path) -> BTreeMap<String, Value> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), yaml(&p)))
            .collect()
    }

    fn map(value: &Value) -> BTreeMap<String, String> {
        serde_json::from_value(value.clone()).unwrap_or_default()
    }

    fn object_of(value: &Value) -> Object {
        let m = &value["metadata"];
        Object {
            kind: value["kind"].as_str().unwrap().into(),
            namespace: m["namespace"].as_str().unwrap_or_default().into(),
            name: m["name"].as_str().unwrap().into(),
            labels: map(&m["labels"]),
            annotations: map(&m["annotations"]),
            label_managers: BTreeMap::new(),
        }
    }

    fn namespace_of(value: &Value) -> Namespace {
        Namespace {
            name: value["metadata"]["name"].as_str().unwrap().into(),
            labels: map(&value["metadata"]["labels"]),
            annotations: BTreeMap::new(),
        }
    }

    fn add_namespace(inventory: &mut Inventory, name: &str) {
        if !name.is_empty() && inventory.namespace(name).is_none() {
            inventory.namespaces.push(replicator_ns(name));
        }
    }

    fn replicator_ns(name: &str) -> Namespace {
        crate::cmd::migrate::replicator::tests::ns(name, &[])
    }

    /// The platform cluster of the upstream environment: its namespaces and `Cluster`s.
    fn environment() -> Inventory {
        let mut inventory = Inventory::default();
        for (_, value) in files(&fixtures().join("examples/environment")) {
            match value["kind"].as_str() {
                Some("Namespace") => inventory.namespaces.push(namespace_of(&value)),
                Some("Cluster") => inventory.openmcp_clusters.push(value),
                other => panic!("{other:?}"),
            }
        }
        inventory.replicas.served = true;
        inventory
    }

    /// An example (`simple/replica`) as the replicator left it: the environment, the sources and
    /// the (Cluster)Replica of `_before` (the four sources that upstream lacks are
    /// `simple_cross_cluster/dynamic_namespace_before/source.yaml`, as its README says) and, with
    /// `after`, the (Cluster)Replica with its status and its copies of `_after` where
    /// `assign.json` puts them: on the platform cluster, or on each `Cluster` in `read` (the
    /// Clusters given with `--cluster-kubeconfig`), with the namespaces the environment has there.
    fn example(name: &str, after: bool, read: &[&str]) -> Inventory {
        let mut inventory = environment();
        let before = files(&fixtures().join(format!("examples/{name}_before")));
        let mut documents: Vec<Value> = before.values().cloned().collect();
        if !before
            .values()
            .any(|v| !v["kind"].as_str().unwrap().ends_with("Replica"))
        {
            documents.push(yaml(
                &fixtures().join("examples/simple_cross_cluster/dynamic_namespace_before/source.yaml"),
            ));
        }
        let mut on_clusters: Vec<(String, Value)> = Vec::new();
        if after {
            let dir = fixtures().join(format!("examples/{name}_after"));
            let assign: BTreeMap<String, Vec<String>> = std::fs::read_to_string(dir.join("assign.json"))
                .map(|t| serde_json::from_str(&t).unwrap())
                .unwrap_or_default();
            for (file, value) in files(&dir) {
                let clusters: Vec<&String> = assign
                    .iter()
                    .filter(|(_, f)| f.contains(&file))
                    .map(|(c, _)| c)
                    .collect();
                if value["kind"].as_str().unwrap().ends_with("Replica") {
                    documents.retain(|d| d["kind"] != value["kind"]);
                    documents.push(value);
                } else if clusters.is_empty() {
                    documents.push(value);
                } else {
                    on_clusters.extend(clusters.into_iter().map(|c| (c.clone(), value.clone())));
                }
            }
        }
        for value in documents {
            match value["kind"].as_str().unwrap() {
                "Replica" => inventory.replicas.replicas.push(value.clone()),
                "ClusterReplica" => inventory.replicas.cluster_replicas.push(value.clone()),
                _ => {
                    let o = object_of(&value);
                    add_namespace(&mut inventory, &o.namespace.clone());
                    inventory.objects.push(o);
                }
            }
            if let Some(ns) = value["metadata"]["namespace"].as_str() {
                add_namespace(&mut inventory, ns);
            }
        }
        for cluster in read {
            let (_, short) = cluster.split_once('/').unwrap();
            let mut there = Inventory::default();
            let dir = fixtures().join(format!("examples/environment/cluster_{short}"));
            if dir.exists() {
                there.namespaces = files(&dir).values().map(namespace_of).collect();
            }
            for (_, value) in on_clusters.iter().filter(|(c, _)| c == cluster) {
                let o = object_of(value);
                add_namespace(&mut there, &o.namespace.clone());
                there.objects.push(o);
            }
            inventory.clusters.insert((*cluster).to_owned(), there);
        }
        inventory
    }

    fn run(inventory: &Inventory) -> Migration {
        migrate(
            inventory,
            &Options {
                named: vec![Tool::ResourceReplicator],
                ..Options::default()
            },
        )
    }

    fn only_rule(m: &Migration) -> &Value {
        assert_eq!(m.rules.len(), 1, "{:#?}\n{:#?}", m.rules, m.notes);
        &m.rules[0]
    }

    fn notes(m: &Migration) -> String {
        m.notes.join("\n")
    }

    fn place(kind: &str, namespace: &str, name: &str) -> Place {
        Place {
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    const P: &str = "openmcp-resource-replicator";

    fn carried() -> Value {
        json!({"labels": {"include": ["*"]}, "annotations": {"include": ["*"]}})
    }

    fn workload() -> Value {
        json!({"matchPurposes": [{"operator": "ContainsAll", "values": ["workload"]}]})
    }

    #[test]
    fn simple_replica_is_a_cluster_sync_rule_that_adopts_its_copy() {
        let m = run(&example("simple/replica", true, &[]));
        let name = format!("{P}-test-01-simple");
        assert_eq!(
            only_rule(&m),
            &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule",
                "metadata": {"name": name, "labels": {"mimeo.dev/migrated-from": P}},
                "spec": {"source": {"kind": "Secret", "namespace": "foo", "name": "cryptic"},
                         "targets": [{"namespace": "bar", "createNamespace": true}],
                         "conflict": "Fail", "metadata": carried()}})
        );
        let reference = format!("ClusterSyncRule/{name}");
        assert_eq!(
            m.adoptions,
            BTreeMap::from([(place("Secret", "bar", "cryptic"), reference.clone())])
        );
        assert_eq!(m.copies, m.adoptions);
        assert!(m.consents.is_empty(), "a ClusterSyncRule needs no consent");
        assert!(m.inventories.is_empty());
        let notes = notes(&m);
        assert!(
            notes.contains(&format!(
                "{P}: Replica test-01/simple: cut-over: before applying, kubectl annotate replicas.core.open-control-plane.io -n test-01 simple openmcp.cloud/operation=ignore; once its rule is Synced, kubectl patch replicas.core.open-control-plane.io -n test-01 simple --type=json -p '[{{\"op\":\"test\",\"path\":\"/metadata/finalizers/0\",\"value\":\"{FINALIZER}\"}},{{\"op\":\"remove\",\"path\":\"/metadata/finalizers/0\"}}]'; kubectl delete replicas.core.open-control-plane.io -n test-01 simple; then, if you like, kubectl label secret -A -l replica.core.open-control-plane.io/kind=replica,replica.core.open-control-plane.io/name=simple,replica.core.open-control-plane.io/namespace=test-01 openmcp.cloud/managed-by- replica.core.open-control-plane.io/kind- replica.core.open-control-plane.io/name- replica.core.open-control-plane.io/namespace- replica.core.open-control-plane.io/generation- replica.core.open-control-plane.io/deletion-policy-"
            )),
            "{notes}"
        );
        assert!(
            notes.contains(&format!("{P}: cut-over: in this order: 1. annotate")),
            "{notes}"
        );
        assert!(!notes.contains("not translated"), "{notes}");

        // Before the replicator ran: the same rule, nothing to adopt (and no copy counted in bar,
        // which does not exist yet: the rule creates it).
        let m = run(&example("simple/replica", false, &[]));
        assert_eq!(
            m.rules,
            [only_rule(&run(&example("simple/replica", true, &[]))).clone()]
        );
        assert!(m.adoptions.is_empty() && m.copies.is_empty());
    }

    #[test]
    fn simple_clusterreplica_is_named_without_a_namespace() {
        let m = run(&example("simple/clusterreplica", true, &[]));
        let rule = only_rule(&m);
        assert_eq!(rule["metadata"]["name"], format!("{P}-simple"));
        assert_eq!(
            rule["spec"],
            json!({"source": {"kind": "Secret", "namespace": "foo", "name": "cryptic"},
                   "targets": [{"namespace": "bar", "createNamespace": true}],
                   "conflict": "Fail", "metadata": carried()})
        );
        assert_eq!(
            m.adoptions.get(&place("Secret", "bar", "cryptic")),
            Some(&format!("ClusterSyncRule/{P}-simple"))
        );
        assert!(
            notes(&m).contains("kubectl annotate clusterreplicas.core.open-control-plane.io simple openmcp.cloud/operation=ignore"),
            "{}",
            notes(&m)
        );
    }

    #[test]
    fn only_copies_marked_for_this_replica_are_adopted() {
        // The ClusterReplica's copy in the Replica's place: the marks name another replica.
        let mut inventory = example("simple/replica", false, &[]);
        let copy = yaml(&fixtures().join("examples/simple/clusterreplica_after/target.yaml"));
        inventory.objects.push(object_of(&copy));
        add_namespace(&mut inventory, "bar");
        let m = run(&inventory);
        assert!(m.adoptions.is_empty());
        assert!(
            notes(&m).contains(&format!(
                "Secret bar/cryptic: exists but carries no mark of the old tool pointing at this rule's source; not adopted and no consent asked: ClusterSyncRule/{P}-test-01-simple reports Conflict there"
            )),
            "{}",
            notes(&m)
        );
        let replica = Replica {
            kind: "Replica",
            namespace: Some("test-01"),
            name: "simple",
            value: &Value::Null,
        };
        let mut theirs = object_of(&yaml(
            &fixtures().join("examples/simple/replica_after/target.yaml"),
        ));
        assert!(made_by_replicator(&theirs, &replica).is_some());
        theirs.labels.remove(MANAGED_BY);
        assert!(made_by_replicator(&theirs, &replica).is_none());
        let cluster_replica = Replica {
            kind: "ClusterReplica",
            namespace: None,
            name: "simple",
            value: &Value::Null,
        };
        let theirs = object_of(&copy);
        assert!(made_by_replicator(&theirs, &cluster_replica).is_some());
        assert!(made_by_replicator(&theirs, &replica).is_none());
    }

    #[test]
    fn dynamic_namespace_goes_onto_the_workload_clusters_by_namespace_labels() {
        let m = run(&example(
            "simple_cross_cluster/dynamic_namespace",
            true,
            &["workloads/wl-01", "workloads/wl-02"],
        ));
        let inventory = format!("{P}-test-01-simple-0");
        assert_eq!(
            only_rule(&m)["spec"],
            json!({"source": {"kind": "Secret", "namespace": "foo", "name": "cryptic"},
                   "targets": [{"clusterSelector": {"matchLabels": {"mimeo.dev/inventory": inventory}},
                                "namespaceSelector": {"matchExpressions": [{"key": "foo.bar.baz/target", "operator": "Exists"}]}}],
                   "conflict": "Fail", "metadata": carried()})
        );
        assert_eq!(
            m.inventories,
            [
                json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterInventory",
                    "metadata": {"name": inventory, "labels": {"mimeo.dev/migrated-from": P}},
                    "spec": {"namespaces": ["workloads"], "selector": workload(), "openMCP": {}}})
            ]
        );
        assert!(m.copies.is_empty(), "none on the platform cluster");
        let adopted: Vec<String> = m
            .cluster_adoptions
            .keys()
            .map(|(c, p)| format!("{c}: {}/{}", p.namespace, p.name))
            .collect();
        assert_eq!(
            adopted,
            [
                "workloads/wl-01: abc/cryptic",
                "workloads/wl-01: xyz/cryptic",
                "workloads/wl-02: test/cryptic"
            ],
            "the namespaces the selector chooses on each Cluster read"
        );
        assert!(!notes(&m).contains("its status lists it"), "{}", notes(&m));

        // A Cluster not read: its copies are a note.
        let m = run(&example(
            "simple_cross_cluster/dynamic_namespace",
            true,
            &["workloads/wl-01"],
        ));
        assert_eq!(m.cluster_adoptions.len(), 2);
        assert!(
            notes(&m).contains("its copies onto Clusters workloads/wl-02 are in namespaces chosen by labels, which were not read (give --cluster-kubeconfig"),
            "{}",
            notes(&m)
        );
        let inventory = example("simple_cross_cluster/dynamic_namespace", false, &[]);
        assert_eq!(
            target_namespace_selectors(&inventory),
            [json!({"matchExpressions": [{"key": "foo.bar.baz/target", "operator": "Exists"}]})]
        );
    }

    #[test]
    fn fixed_namespace_is_adopted_on_each_cluster_read() {
        let name = "simple_cross_cluster/fixed_namespace";
        let m = run(&example(name, true, &["workloads/wl-01", "workloads/wl-02"]));
        let inventory = format!("{P}-test-01-simple-0");
        assert_eq!(
            only_rule(&m)["spec"]["targets"],
            json!([{"clusterSelector": {"matchLabels": {"mimeo.dev/inventory": inventory}},
                    "namespace": "bar", "createNamespace": true}])
        );
        assert_eq!(
            m.inventories[0]["spec"]["openMCP"],
            json!({"createNamespaces": true})
        );
        let adopted: Vec<String> = m
            .cluster_adoptions
            .iter()
            .map(|((c, p), r)| format!("{c}: {}/{} by {r}", p.namespace, p.name))
            .collect();
        let rule = format!("ClusterSyncRule/{P}-test-01-simple");
        assert_eq!(
            adopted,
            [
                format!("workloads/wl-01: bar/cryptic by {rule}"),
                format!("workloads/wl-02: bar/cryptic by {rule}")
            ]
        );
        assert!(
            m.cluster_consents.is_empty(),
            "a ClusterSyncRule needs no consent"
        );
        let text = m.to_yaml();
        assert!(
            text.contains("--cluster-kubeconfig workloads/wl-01=PATH"),
            "{text}"
        );

        // Only one Cluster's kubeconfig given: the other is a note.
        let m = run(&example(name, true, &["workloads/wl-01"]));
        assert_eq!(m.cluster_adoptions.len(), 1);
        assert!(
            notes(&m).contains(
                "its copies onto Clusters workloads/wl-02 were not read (give --cluster-kubeconfig"
            ),
            "{}",
            notes(&m)
        );
        assert_eq!(
            target_namespaces(&example(name, false, &[])),
            BTreeSet::from(["bar".to_owned()])
        );
    }

    #[test]
    fn same_namespace_is_the_sources() {
        let m = run(&example(
            "simple_cross_cluster/same_namespace",
            true,
            &["workloads/wl-01", "workloads/wl-02"],
        ));
        let inventory = format!("{P}-test-01-simple-0");
        assert_eq!(
            only_rule(&m)["spec"]["targets"],
            json!([{"clusterSelector": {"matchLabels": {"mimeo.dev/inventory": inventory}},
                    "namespace": "foo", "createNamespace": true}])
        );
        assert_eq!(m.cluster_adoptions.len(), 2, "{:#?}", m.notes);
        assert!(m.adoptions.is_empty(), "the source itself is not a copy");
    }

    #[test]
    fn conversion_is_a_note() {
        let m = run(&example("templating/conversion", true, &[]));
        assert!(m.rules.is_empty() && m.inventories.is_empty());
        assert!(
            notes(&m).contains("Replica test-01/pod-reader-clusterrole: turns its source Role infra/pod-reader into a ClusterRole through a text template"),
            "{}",
            notes(&m)
        );
        assert!(
            notes(&m)
                .contains("a kind converted is not supported. Not translated: leave it to the replicator")
        );
        assert!(!notes(&m).contains("cut-over"), "nothing to cut over");
    }

    #[test]
    fn multi_source_is_a_note_on_inputs() {
        let m = run(&example("templating/multi_source", true, &[]));
        assert!(m.rules.is_empty());
        let notes = notes(&m);
        assert!(
            notes.contains("Replica test-01/combined-secret: combines 2 sources (Secret infra/db-credentials, Secret infra/tls-cert) through its template: a mimeo rule copies one source; make it by hand with the main source as `source`, each other one as an `inputs` entry, and a `transforms` step with the template plugin"),
            "{notes}"
        );
    }

    #[test]
    fn next_to_with_the_cluster_name_is_one_copy_per_cluster() {
        let m = run(&example("templating/next_to", true, &[]));
        let name = format!("{P}-test-01-imagepull-next-to");
        assert_eq!(
            only_rule(&m)["spec"],
            json!({"source": {"kind": "Secret", "namespace": "registry", "name": "imagepull"},
                   "targets": [{"forEach": {"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster",
                                            "matchPurposes": [{"operator": "ContainsAll", "values": ["controlplane"]}]},
                                "namespace": "{{object.namespace}}", "name": "imagepull-{{object.name}}"}],
                   "conflict": "Fail"})
        );
        let reference = format!("ClusterSyncRule/{name}");
        let expected: BTreeMap<Place, String> = [
            ("user-01", "imagepull-cp-01"),
            ("user-02", "imagepull-cp-01"),
            ("user-02", "imagepull-cp-02"),
        ]
        .into_iter()
        .map(|(ns, n)| (place("Secret", ns, n), reference.clone()))
        .collect();
        assert_eq!(m.adoptions, expected);
        let notes = notes(&m);
        for note in [
            "its template copies the keys [\".dockerconfigjson\"] of the source as they are; mimeo copies every key",
            "the controller needs --next-to-kinds Cluster.clusters.openmcp.cloud",
        ] {
            assert!(notes.contains(note), "{note:?} in {notes}");
        }
        assert!(!notes.contains("its status lists it"), "{notes}");
    }

    #[test]
    fn next_to_with_one_name_is_next_to_the_namespaces_of_the_clusters() {
        let mut inventory = example("templating/next_to", true, &[]);
        let template = &mut inventory.replicas.replicas[0]["spec"]["template"];
        template["metadata"]["name"] = json!("{{ .sources.source.metadata.name }}-pull");
        template["type"] = json!("kubernetes.io/dockerconfigjson");
        let m = run(&inventory);
        assert_eq!(
            only_rule(&m)["spec"]["targets"],
            json!([{"nextTo": {"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster",
                               "matchPurposes": [{"operator": "ContainsAll", "values": ["controlplane"]}],
                               "namespaces": ["user-01", "user-02"]},
                    "name": "{{source.name}}-pull"}])
        );
        assert_eq!(
            only_rule(&m)["spec"]["secretType"],
            "kubernetes.io/dockerconfigjson"
        );
        let copies: Vec<String> = m
            .copies
            .keys()
            .map(|p| format!("{}/{}", p.namespace, p.name))
            .collect();
        assert_eq!(copies, ["user-01/imagepull-pull", "user-02/imagepull-pull"]);
        assert!(m.adoptions.is_empty(), "the names changed");
        assert!(
            notes(&m).contains("Secret user-02/imagepull-cp-02: its status lists it as a copy, but the rule does not make it now"),
            "{}",
            notes(&m)
        );
    }

    #[test]
    fn templates_that_compute_are_notes() {
        let cases = [
            (
                json!({"data": {"password": "{{ index .sources.source.data \"other\" }}"}}),
                "writes data.password as",
            ),
            (
                json!({"data": {"password": "c2VjcmV0"}}),
                "writes data.password as",
            ),
            (
                json!({"metadata": {"name": "{{ .replica.name }}"}}),
                "computes metadata.name with {{ .replica.name }}",
            ),
            (
                json!({"metadata": {"name": "x", "labels": {"a": "b"}}}),
                "sets metadata.labels",
            ),
            (json!({"stringData": {"a": "b"}}), "sets stringData"),
            (json!({"type": "{{ .sources.other.type }}"}), "sets type"),
        ];
        for (change, said) in cases {
            let mut inventory = example("templating/next_to", false, &[]);
            let template = &mut inventory.replicas.replicas[0]["spec"]["template"];
            for (key, value) in change.as_object().unwrap() {
                match (template.get_mut(key), value) {
                    (Some(Value::Object(t)), Value::Object(v)) => t.extend(v.clone()),
                    _ => template[key] = value.clone(),
                }
            }
            let m = run(&inventory);
            assert!(m.rules.is_empty(), "{change}: {:#?}", m.rules);
            assert!(notes(&m).contains(said), "{change}: {said:?} in {}", notes(&m));
        }
        // A rename the placeholders say, and the key in its other form.
        let source = Source {
            id: "s".into(),
            api_version: "v1".into(),
            kind: "Secret".into(),
            namespace: Some("a".into()),
            name: "n".into(),
        };
        assert_eq!(
            copy_name(
                "{{- .sources.s.metadata.name -}}-in-{{ .target.namespace }}",
                &source
            ),
            Ok(("{{source.name}}-in-{{target.namespace}}".into(), false))
        );
        assert!(copy_name("x-{{ .sources.t.metadata.name }}", &source).is_err());
        assert!(is_key_of_source(
            "{{ .sources.s.data.password }}",
            &source,
            "data",
            "password"
        ));
        assert!(is_key_of_source(
            "{{ index .sources.s.data \"tls.crt\" }}",
            &source,
            "data",
            "tls.crt"
        ));
        assert!(!is_key_of_source(
            "{{ index .sources.s.data \"tls.crt\" | b64dec }}",
            &source,
            "data",
            "tls.crt"
        ));
        assert!(!is_key_of_source(
            "x{{ .sources.s.data.a }}",
            &source,
            "data",
            "a"
        ));
    }

    /// The simple Replica with its target changed.
    fn simple_with(target: Value) -> Inventory {
        let mut inventory = example("simple/replica", true, &[]);
        inventory.replicas.replicas[0]["spec"]["targets"] = target;
        inventory
    }

    #[test]
    fn policies_become_conflict_and_create_namespace() {
        let by_name = |names: &[&str]| json!({"selector": {"matchIdentities": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()}});
        let m = run(&simple_with(json!([
            {"namespace": by_name(&["bar"]), "targetConflictPolicy": "Overwrite"}
        ])));
        assert_eq!(only_rule(&m)["spec"]["conflict"], "Adopt");
        let m = run(&simple_with(json!([
            {"namespace": by_name(&["bar"]), "targetConflictPolicy": "Overwrite"},
            {"namespace": by_name(&["baz"]), "targetConflictPolicy": "Skip", "namespacePolicy": "Skip"},
            {"namespace": by_name(&["qux"]), "namespacePolicy": "Fail"},
        ])));
        let rule = only_rule(&m);
        assert_eq!(rule["spec"]["conflict"], "Fail");
        assert_eq!(
            rule["spec"]["targets"],
            json!([{"namespace": "bar", "createNamespace": true}, {"namespace": "baz"}, {"namespace": "qux"}])
        );
        let notes = notes(&m);
        assert!(notes.contains("its targets' targetConflictPolicy differ; a rule has one conflict policy: the strictest, Fail"), "{notes}");
        assert!(notes.contains("namespacePolicy: Skip: mimeo does not create the missing namespace either, but reports its copy NamespaceMissing"), "{notes}");
        let m = run(&simple_with(json!([
            {"namespace": by_name(&["bar"]), "targetConflictPolicy": "Skip"},
            {"namespace": by_name(&["baz"]), "targetConflictPolicy": "Overwrite"},
        ])));
        assert_eq!(only_rule(&m)["spec"]["conflict"], "Skip");
    }

    #[test]
    fn an_untranslated_replica_leaves_no_inventory() {
        let m = run(&simple_with(json!([
            {"cluster": {"selector": workload()}, "namespace": {"selector": {"matchIdentities": [{"name": "bar"}]}}},
            {"namespace": {"selector": {"matchIdentities": [{"name": "bar"}]}}, "namespacePolicy": "Sometimes"},
        ])));
        assert!(
            m.rules.is_empty() && m.inventories.is_empty(),
            "{:#?}",
            m.inventories
        );
        assert!(
            notes(&m).contains("targets[1]: unknown namespacePolicy Sometimes"),
            "{}",
            notes(&m)
        );
    }

    #[test]
    fn namespace_selectors_on_this_cluster() {
        // Every namespace (but the source's own, where the copy would be the source).
        let m = run(&simple_with(json!([{"namespace": {"selector": {}}}])));
        assert_eq!(
            only_rule(&m)["spec"]["targets"],
            json!([{"namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["foo"]}]}}])
        );
        assert!(m.copies.keys().all(|p| p.namespace != "foo"));
        assert!(m.copies.contains_key(&place("Secret", "bar", "cryptic")));
        assert_eq!(m.adoptions.len(), 1);
        let m = run(&simple_with(
            json!([{"namespace": {"selector": {"matchLabels": {"team": "a"}}}}]),
        ));
        assert_eq!(
            only_rule(&m)["spec"]["targets"],
            json!([{"namespaceSelector": {"matchLabels": {"team": "a"}, "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["foo"]}]}}])
        );
        // Without a template and a namespace, the copy would be its own source.
        let m = run(&simple_with(json!([{"namespace": {"selector": null}}])));
        assert!(m.rules.is_empty());
        assert!(
            notes(&m).contains("writes its copy onto its own source"),
            "{}",
            notes(&m)
        );
        // An empty matchIdentities chooses nothing.
        let m = run(&simple_with(
            json!([{"namespace": {"selector": {"matchIdentities": []}}}]),
        ));
        assert!(m.rules.is_empty());
        assert!(notes(&m).contains("matchIdentities is empty"), "{}", notes(&m));
    }

    #[test]
    fn interval_keep_and_ignore_are_said() {
        let mut inventory = example("simple/replica", true, &[]);
        inventory.replicas.replicas[0]["spec"]["interval"] = json!("10m");
        inventory.replicas.replicas[0]["metadata"]["annotations"] = json!({OPERATION_ANNOTATION: "ignore"});
        inventory
            .objects
            .iter_mut()
            .find(|o| o.namespace == "bar")
            .unwrap()
            .labels
            .insert(DELETION_POLICY_LABEL.into(), "Keep".into());
        let m = run(&inventory);
        let notes = notes(&m);
        for note in [
            "interval 10m dropped: mimeo watches its source",
            "Secret bar/cryptic: labelled replica.core.open-control-plane.io/deletion-policy: Keep; once adopted, kubectl annotate secret -n bar cryptic mimeo.dev/deletion=Orphan",
            "annotated openmcp.cloud/operation: ignore already",
        ] {
            assert!(notes.contains(note), "{note:?} in {notes}");
        }
    }

    #[test]
    fn cluster_testdata_reads_with_apiversion_sources() {
        let dir = fixtures().join("cluster-testdata");
        let mut inventory = environment();
        inventory.namespaces.push(replicator_ns("default"));
        for test in ["test-01", "test-02", "test-03"] {
            for (_, value) in files(&dir.join(test)) {
                match value["kind"].as_str().unwrap() {
                    "Replica" => inventory.replicas.replicas.push(value),
                    _ => inventory.replicas.cluster_replicas.push(value),
                }
            }
        }
        let m = run(&inventory);
        let rule = m
            .rules
            .iter()
            .find(|r| r["metadata"]["name"] == format!("{P}-default-rep-selector-match"))
            .unwrap_or_else(|| panic!("{:#?}\n{:#?}", m.rules, m.notes));
        assert_eq!(
            rule["spec"]["source"],
            json!({"kind": "ConfigMap", "namespace": "default", "name": "source-cm"})
        );
        let notes = notes(&m);
        assert!(
            notes.contains(&format!(
                "ClusterReplica crep-ignored: annotated {OPERATION_ANNOTATION}: ignore already"
            )),
            "{notes}"
        );
        // The copy its status names on a Cluster that no selector chooses now.
        assert!(
            notes.contains(
                "ConfigMap default/some-cm on Cluster ns-a/cluster-a: its status lists it as a copy"
            ),
            "{notes}"
        );
        assert_eq!(copy_kinds(&inventory.replicas), BTreeSet::new());
    }

    #[test]
    fn other_kinds_are_read_and_need_the_allow_list() {
        let mut inventory =
            simple_with(json!([{"namespace": {"selector": {"matchIdentities": [{"name": "bar"}]}}}]));
        let source = &mut inventory.replicas.replicas[0]["spec"]["sources"][0];
        source["group"] = json!("rbac.authorization.k8s.io");
        source["kind"] = json!("Role");
        assert_eq!(
            copy_kinds(&inventory.replicas),
            BTreeSet::from([("rbac.authorization.k8s.io/v1".to_owned(), "Role".to_owned())])
        );
        let m = run(&inventory);
        assert_eq!(
            only_rule(&m)["spec"]["source"],
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "namespace": "foo", "name": "cryptic"})
        );
        assert!(
            notes(&m).contains("--allow-kind lists it (Role.rbac.authorization.k8s.io)"),
            "{}",
            notes(&m)
        );
    }

    #[test]
    fn long_names_fit() {
        let mut inventory = example("simple/replica", false, &[]);
        let long = "x".repeat(253);
        inventory.replicas.replicas[0]["metadata"]["name"] = json!(long);
        let m = run(&inventory);
        let name = only_rule(&m)["metadata"]["name"].as_str().unwrap();
        assert!(name.len() <= 253 && name.starts_with(P), "{name}");
    }
}
