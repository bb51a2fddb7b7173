//! openMCP's HelmDeployer platform service: `secretsToCopy` in its `HelmDeployerConfig`'s
//! selector definitions and in each `HelmDeployment` copies Secrets next to every selected
//! `Cluster` on the platform cluster (`toPlatformCluster`) and into the deployment's
//! `spec.namespace` on each selected cluster (`toTargetCluster`).
//!
//! Its semantics, from its source: a config entry's source lives in HelmDeployer's own pod
//! namespace, a deployment entry's in the deployment's namespace; later entries of one list win,
//! a deployment's entry wins over its selector definition's for the same target, and between
//! deployments the first to write a target keeps it unless both copy the same source. Every copy
//! carries `openmcp.cloud/managed-by: <provider>.HelmDeployer` and the source's namespace and name
//! as labels, written by the operator's own client (field manager `openmcp-operator`).

use super::model::{Inventory, Migration, Object, Place, Provenance, Tool};
use super::openmcp::{CLUSTER_API_VERSION, INVENTORY_LABEL, InventorySpec, selected_clusters};
use super::rules::rule_name;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

pub const MANAGED_BY: &str = "openmcp.cloud/managed-by";
pub const SOURCE_NAME: &str = "helm.open-control-plane.io/source-name";
pub const SOURCE_NAMESPACE: &str = "helm.open-control-plane.io/source-namespace";
/// The field manager of HelmDeployer's writes: it names none, so the apiserver takes its
/// client's user agent, the operator binary's name.
pub const FIELD_MANAGER: &str = "openmcp-operator";
/// HelmDeployer's pod namespace where `--helmdeployer-namespace` is not given.
pub const DEFAULT_NAMESPACE: &str = "openmcp-system";
const CONTROLLER: &str = "HelmDeployer";
const SELECTOR_FIELDS: [&str; 4] = [
    "matchLabels",
    "matchExpressions",
    "matchPurposes",
    "matchIdentities",
];

pub use super::model::HelmDeployer;

/// The namespaces HelmDeployer copies into on its target clusters: every deployment's
/// `spec.namespace` (those whose copies are dropped too; reading one more does no harm).
pub fn target_namespaces(helm: &HelmDeployer) -> BTreeSet<String> {
    helm.deployments
        .iter()
        .filter_map(|d| d["spec"]["namespace"].as_str())
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A Secret by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Source {
    namespace: String,
    name: String,
}

/// One copy instruction that survived the override rules: its source and who asked for it.
#[derive(Clone, Debug)]
struct Entry {
    source: Source,
    asked_by: String,
    written_in: String,
}

/// A `HelmDeployment` with its selector resolved and its instructions merged.
struct Deployment {
    what: String,
    selector: Value,
    /// Names the `ClusterInventory` for this selector: the definition's or the deployment's.
    selector_name: String,
    namespace: String,
    /// The `Cluster`s the selector chooses now, `(namespace, name)`.
    clusters: Vec<(String, String)>,
    platform: BTreeMap<String, Entry>,
    target: BTreeMap<String, Entry>,
}

/// Which list an instruction is in.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Direction {
    Platform,
    Target,
}

impl Direction {
    fn list(self) -> &'static str {
        match self {
            Direction::Platform => "toPlatformCluster",
            Direction::Target => "toTargetCluster",
        }
    }
}

/// A rule in the making: one per source and copy name.
#[derive(Default)]
struct RuleParts {
    targets: Vec<Value>,
    places: Vec<(Place, Entry)>,
    /// The copies on the selected `Cluster`s themselves, each with its `namespace/name`.
    cluster_places: Vec<(String, Place, Entry)>,
}

/// A `ClusterInventory` in the making.
#[derive(Default)]
struct InventoryParts {
    selector: Value,
    namespaces: BTreeSet<String>,
    rule_namespaces: BTreeSet<String>,
}

/// `entries` (a `secretsToCopy` list) added to `into`, target name to source: a later entry
/// wins over an earlier one, and over what `into` held (a config's definition); each loser said.
fn merge(
    into: &mut BTreeMap<String, Entry>,
    entries: &Value,
    entry: &Entry,
    list: &str,
    dropped: &mut Vec<String>,
) {
    for item in entries.as_array().into_iter().flatten() {
        let Some(name) = item["source"]["name"].as_str().filter(|n| !n.is_empty()) else {
            dropped.push(format!(
                "{list}: an entry without source.name; HelmDeployer rejects it"
            ));
            continue;
        };
        let target = item["target"]["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .unwrap_or(name);
        let new = Entry {
            source: Source {
                namespace: entry.source.namespace.clone(),
                name: name.to_owned(),
            },
            ..entry.clone()
        };
        if let Some(old) = into.insert(target.to_owned(), new.clone())
            && old.source != new.source
        {
            dropped.push(format!(
                "{list}: {}/{} as {target} ({}) is overridden by {}/{name} ({}); dropped",
                old.source.namespace, old.source.name, old.asked_by, new.source.namespace, new.asked_by
            ));
        }
    }
}

/// A selector definition of the config: its name and its JSON.
type Definition<'a> = (&'a str, &'a Value);

/// The selector a deployment uses and the definition it came from: its own when it sets any
/// selector field (a `ref` beside them is ignored), else the definition `ref` names.
fn resolve<'a>(
    deployment: &Value,
    config: Option<&'a Value>,
) -> Result<(Value, Option<Definition<'a>>), String> {
    let selector = &deployment["spec"]["selector"];
    let own: serde_json::Map<String, Value> = SELECTOR_FIELDS
        .iter()
        .filter_map(|f| selector.get(*f).map(|v| ((*f).to_owned(), v.clone())))
        .collect();
    let Some(reference) = selector["ref"].as_str().filter(|_| own.is_empty()) else {
        return Ok((Value::Object(own), None));
    };
    let Some(config) = config else {
        return Err(format!(
            "its selector refers to {reference:?}, but there is no HelmDeployerConfig"
        ));
    };
    let Some((name, definition)) = config["spec"]["selectorDefinitions"]
        .as_object()
        .and_then(|d| d.get_key_value(reference))
    else {
        return Err(format!(
            "its selector refers to {reference:?}, which the HelmDeployerConfig does not define"
        ));
    };
    let selector: serde_json::Map<String, Value> = SELECTOR_FIELDS
        .iter()
        .filter_map(|f| definition.get(*f).map(|v| ((*f).to_owned(), v.clone())))
        .collect();
    Ok((Value::Object(selector), Some((name.as_str(), definition))))
}

/// One deployment as HelmDeployer reads it: its selector and its merged instructions (the
/// config's definition first, its own after, each list in order).
fn deployment(
    value: &Value,
    config: Option<&Value>,
    provider_namespace: &str,
    clusters: &[Value],
    notes: &mut Vec<String>,
) -> Option<Deployment> {
    let namespace = value["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = value["metadata"]["name"].as_str().unwrap_or_default();
    let what = format!("HelmDeployment {namespace}/{name}");
    let (selector, definition) = match resolve(value, config) {
        Ok(resolved) => resolved,
        Err(why) => {
            notes.push(format!(
                "{what}: {why}; HelmDeployer copies nothing for it, and neither will mimeo"
            ));
            return None;
        }
    };
    let clusters = match selected_clusters(clusters, &selector) {
        Ok(clusters) => clusters,
        Err(why) => {
            let whose = match (definition, config.and_then(|c| c["metadata"]["name"].as_str())) {
                (Some((reference, _)), Some(config)) => format!(
                    "the selector it refers to, selectorDefinitions.{reference} of HelmDeployerConfig \
                     {config},"
                ),
                _ => "its selector".to_owned(),
            };
            notes.push(format!(
                "{what}: {whose} does not read as openMCP's ({why}); not translated"
            ));
            return None;
        }
    };
    let mut platform = BTreeMap::new();
    let mut target = BTreeMap::new();
    let mut dropped = Vec::new();
    let mut add = |lists: &Value, entry: Entry| {
        merge(
            &mut platform,
            &lists["toPlatformCluster"],
            &entry,
            "toPlatformCluster",
            &mut dropped,
        );
        merge(
            &mut target,
            &lists["toTargetCluster"],
            &entry,
            "toTargetCluster",
            &mut dropped,
        );
    };
    if let Some((reference, definition)) = definition {
        let config_name = config
            .and_then(|c| c["metadata"]["name"].as_str())
            .unwrap_or_default();
        let source = Source {
            namespace: provider_namespace.to_owned(),
            name: String::new(),
        };
        add(
            &definition["secretsToCopy"],
            Entry {
                source,
                asked_by: format!(
                    "selectorDefinitions.{reference}.secretsToCopy of HelmDeployerConfig {config_name}"
                ),
                written_in: String::new(),
            },
        );
    }
    add(
        &value["spec"]["secretsToCopy"],
        Entry {
            source: Source {
                namespace: namespace.to_owned(),
                name: String::new(),
            },
            asked_by: format!("spec.secretsToCopy of {what}"),
            written_in: namespace.to_owned(),
        },
    );
    notes.extend(dropped.into_iter().map(|d| format!("{what}: {d}")));
    Some(Deployment {
        selector_name: match definition {
            Some((reference, _)) => rule_name(&[Tool::HelmDeployer.name(), reference]),
            None => rule_name(&[Tool::HelmDeployer.name(), namespace, name]),
        },
        what,
        selector,
        namespace: value["spec"]["namespace"].as_str().unwrap_or_default().to_owned(),
        clusters,
        platform,
        target,
    })
}

/// Drops each instruction whose copy an earlier deployment makes from another source on a
/// `Cluster` both select now: HelmDeployer refuses it there. (It would still copy it onto the
/// clusters only this one selects; that part is dropped too, and said.)
fn first_wins(deployments: &mut [Deployment], notes: &mut Vec<String>) {
    let mut claimed: BTreeMap<(Direction, String, String, String), (Source, String)> = BTreeMap::new();
    for d in deployments.iter_mut() {
        for direction in [Direction::Platform, Direction::Target] {
            let list = match direction {
                Direction::Platform => &mut d.platform,
                Direction::Target => &mut d.target,
            };
            let mut lost = Vec::new();
            for (target, entry) in list.iter() {
                // Where the copy lands: next to the Cluster, or in the deployment's namespace of it.
                let spots: Vec<(String, String)> = d
                    .clusters
                    .iter()
                    .map(|(ns, name)| match direction {
                        Direction::Platform => (ns.clone(), String::new()),
                        Direction::Target => (format!("{ns}/{name}"), d.namespace.clone()),
                    })
                    .collect();
                let conflict = spots.iter().find_map(|(cluster, ns)| {
                    claimed
                        .get(&(direction, cluster.clone(), ns.clone(), target.clone()))
                        .filter(|(source, _)| *source != entry.source)
                        .map(|(source, by)| (cluster.clone(), source.clone(), by.clone()))
                });
                if let Some((cluster, source, by)) = conflict {
                    notes.push(format!(
                        "{}: {} {}/{} as {target}: {by} copies {}/{} there first (on {cluster}); HelmDeployer reports an error for this one, so it is dropped{}",
                        d.what,
                        direction.list(),
                        entry.source.namespace,
                        entry.source.name,
                        source.namespace,
                        source.name,
                        if spots.len() > 1 {
                            " on every Cluster it selects (make a rule by hand for those where it does copy)"
                        } else {
                            ""
                        }
                    ));
                    lost.push(target.clone());
                    continue;
                }
                for (cluster, ns) in spots {
                    claimed
                        .entry((direction, cluster, ns, target.clone()))
                        .or_insert_with(|| (entry.source.clone(), d.what.clone()));
                }
            }
            for target in lost {
                list.remove(&target);
            }
        }
    }
}

/// Whether `copy` is HelmDeployer's copy of `source`: its three labels name HelmDeployer and that
/// source, and HelmDeployer's own client wrote them. A Secret copied by hand with `kubectl`
/// keeps the labels but not their manager.
fn made_by_helmdeployer(copy: &Object, source: &Source, provider: Option<&str>) -> Option<String> {
    let label = |key: &str| copy.labels.get(key).map(String::as_str);
    if label(SOURCE_NAME) != Some(source.name.as_str())
        || label(SOURCE_NAMESPACE) != Some(source.namespace.as_str())
    {
        return None;
    }
    let managed_by = label(MANAGED_BY)?;
    let expected = provider.map(|p| format!("{p}.{CONTROLLER}"));
    let ok = match &expected {
        // openMCP shortens a longer value with a hash, which only its own code computes.
        Some(expected) if expected.len() <= 63 => managed_by == expected,
        _ => managed_by.ends_with(&format!(".{CONTROLLER}")) || managed_by.len() == 63,
    };
    let by_helmdeployer = [MANAGED_BY, SOURCE_NAME, SOURCE_NAMESPACE].iter().all(|key| {
        copy.label_managers
            .get(*key)
            .is_some_and(|managers| managers.iter().any(|m| m == FIELD_MANAGER))
    });
    (ok && by_helmdeployer).then(|| {
        format!(
            "{MANAGED_BY}={managed_by}, {SOURCE_NAMESPACE}={}, {SOURCE_NAME}={}, written by field manager {FIELD_MANAGER}",
            source.namespace, source.name
        )
    })
}

/// The `ClusterInventory` a selector's clusters become `RemoteCluster`s through, if it selects
/// any now; its name.
fn inventory_for(
    inventories: &mut BTreeMap<String, InventoryParts>,
    d: &Deployment,
    rule_namespace: &str,
) -> Option<String> {
    if d.clusters.is_empty() {
        return None;
    }
    let name = inventories
        .iter()
        .find(|(_, parts)| parts.selector == d.selector)
        .map(|(name, _)| name.clone())
        .unwrap_or_else(|| d.selector_name.clone());
    let parts = inventories.entry(name.clone()).or_insert_with(|| InventoryParts {
        selector: d.selector.clone(),
        ..InventoryParts::default()
    });
    parts
        .namespaces
        .extend(d.clusters.iter().map(|(ns, _)| ns.clone()));
    parts.rule_namespaces.insert(rule_namespace.to_owned());
    Some(name)
}

/// Each surviving instruction as a target of the rule for its source and copy name, with the
/// copies it makes in this cluster.
fn collect(
    deployments: &[Deployment],
    migration: &mut Migration,
) -> (
    BTreeMap<(Source, String), RuleParts>,
    BTreeMap<String, InventoryParts>,
) {
    let mut rules: BTreeMap<(Source, String), RuleParts> = BTreeMap::new();
    let mut inventories = BTreeMap::new();
    for d in deployments {
        for (target, entry) in &d.platform {
            let parts = rules.entry((entry.source.clone(), target.clone())).or_default();
            let mut next_to = json!({"apiVersion": CLUSTER_API_VERSION, "kind": "Cluster"});
            for (key, value) in d.selector.as_object().into_iter().flatten() {
                next_to[key] = value.clone();
            }
            // Only the namespaces its Clusters are in now, as the inventory reads: a ClusterSyncRule
            // needs no consent, so a Cluster a tenant creates elsewhere must not draw the copy.
            let namespaces: BTreeSet<&String> = d.clusters.iter().map(|(ns, _)| ns).collect();
            if !namespaces.is_empty() {
                next_to["namespaces"] = json!(namespaces);
            }
            let mut spec = json!({"nextTo": next_to});
            if *target != entry.source.name {
                spec["name"] = json!(target);
            }
            if !parts.targets.contains(&spec) {
                parts.targets.push(spec);
            }
            for (namespace, _) in &d.clusters {
                // HelmDeployer skips a copy onto its own source.
                if *namespace == entry.source.namespace && *target == entry.source.name {
                    continue;
                }
                let place = Place {
                    kind: "Secret".into(),
                    namespace: namespace.clone(),
                    name: target.clone(),
                };
                parts.places.push((place, entry.clone()));
            }
        }
        for (target, entry) in &d.target {
            let Some(inventory) = inventory_for(&mut inventories, d, &entry.source.namespace) else {
                migration.note(
                    Tool::HelmDeployer,
                    &d.what,
                    format!("toTargetCluster {target}: its selector chooses no Cluster now; no ClusterInventory and no target for it (add one once it does)"),
                );
                continue;
            };
            let parts = rules.entry((entry.source.clone(), target.clone())).or_default();
            let mut spec = json!({"clusterSelector": {"matchLabels": {INVENTORY_LABEL: inventory}},
                                  "namespace": d.namespace});
            if *target != entry.source.name {
                spec["name"] = json!(target);
            }
            if !parts.targets.contains(&spec) {
                parts.targets.push(spec);
            }
            for (namespace, name) in &d.clusters {
                let place = Place {
                    kind: "Secret".into(),
                    namespace: d.namespace.clone(),
                    name: target.clone(),
                };
                parts
                    .cluster_places
                    .push((format!("{namespace}/{name}"), place, entry.clone()));
            }
        }
    }
    (rules, inventories)
}

pub fn translate(inventory: &Inventory, migration: &mut Migration, provider_namespace: &str) {
    let helm = &inventory.helm;
    let mut configs: Vec<&Value> = helm.configs.iter().collect();
    configs.sort_by_key(|c| c["metadata"]["name"].as_str().unwrap_or_default().to_owned());
    let config = configs.first().copied();
    let provider = config.and_then(|c| c["metadata"]["name"].as_str());
    if configs.len() > 1 {
        migration.note(
            Tool::HelmDeployer,
            "HelmDeployerConfig",
            format!(
                "several exist; HelmDeployer reads the one named as its PlatformService; read here: {}",
                provider.unwrap_or_default()
            ),
        );
    }
    let mut ordered: Vec<&Value> = helm.deployments.iter().collect();
    // HelmDeployer's first is the one that wrote first: the oldest, as far as can be told.
    ordered.sort_by_key(|d| {
        let m = &d["metadata"];
        (
            m["creationTimestamp"].as_str().map(str::to_owned),
            m["namespace"].as_str().map(str::to_owned),
            m["name"].as_str().map(str::to_owned),
        )
    });
    let mut notes = Vec::new();
    let mut deployments: Vec<Deployment> = ordered
        .into_iter()
        .filter_map(|d| {
            deployment(
                d,
                config,
                provider_namespace,
                &inventory.openmcp_clusters,
                &mut notes,
            )
        })
        .collect();
    first_wins(&mut deployments, &mut notes);
    migration.notes.extend(
        notes
            .into_iter()
            .map(|n| format!("{}: {n}", Tool::HelmDeployer.name())),
    );
    let (rules, inventories) = collect(&deployments, migration);
    let chosen: BTreeSet<String> = deployments
        .iter()
        .filter(|d| !d.target.is_empty())
        .flat_map(|d| d.clusters.iter().map(|(ns, name)| format!("{ns}/{name}")))
        .collect();
    for cluster in inventory.clusters.keys().filter(|c| !chosen.contains(*c)) {
        migration.note(
            Tool::HelmDeployer,
            &format!("--cluster-kubeconfig {cluster}"),
            "HelmDeployer copies nothing onto this Cluster now; not used",
        );
    }
    for ((source, target), parts) in rules {
        if parts.targets.is_empty() {
            continue;
        }
        add(inventory, migration, &source, &target, parts, provider);
    }
    for (name, parts) in inventories {
        migration.inventories.push(cluster_inventory(&name, parts));
    }
}

/// The rule for one source and copy name, and the copies it adopts.
fn add(
    inventory: &Inventory,
    migration: &mut Migration,
    source: &Source,
    target: &str,
    parts: RuleParts,
    provider: Option<&str>,
) {
    let name = if target == source.name {
        rule_name(&[Tool::HelmDeployer.name(), &source.name])
    } else {
        rule_name(&[Tool::HelmDeployer.name(), &source.name, "as", target])
    };
    let rule = json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
        "metadata": {"name": name, "namespace": source.namespace,
                     "labels": {"mimeo.dev/migrated-from": Tool::HelmDeployer.name()}},
        "spec": {"source": {"kind": "Secret", "name": source.name}, "targets": parts.targets}});
    let evidence = |copy: &Object| made_by_helmdeployer(copy, source, provider);
    let mut by_asker: BTreeMap<(Option<String>, String, String), Vec<Place>> = BTreeMap::new();
    let mut unread = BTreeSet::new();
    let platform = parts
        .places
        .into_iter()
        .map(|(place, entry)| (None, place, entry));
    let clusters = parts
        .cluster_places
        .into_iter()
        .map(|(cluster, place, entry)| (Some(cluster), place, entry));
    for (cluster, place, entry) in platform.chain(clusters) {
        if let Some(cluster) = cluster.as_ref().filter(|c| !inventory.clusters.contains_key(*c)) {
            unread.insert(format!("{cluster} (namespace {})", place.namespace));
            continue;
        }
        by_asker
            .entry((cluster, entry.asked_by, entry.written_in))
            .or_default()
            .push(place);
    }
    for ((cluster, asked_by, written_in), places) in by_asker {
        let provenance = Provenance {
            evidence: &evidence,
            asked_by,
            written_in,
        };
        let read = cluster.as_ref().map_or(inventory, |c| &inventory.clusters[c]);
        migration.add_copies_in(cluster.as_deref(), read, &rule, places, &provenance);
    }
    if !unread.is_empty() {
        migration.note(
            Tool::HelmDeployer,
            &format!("SyncRule {}/{name}", source.namespace),
            format!(
                "the copies onto Clusters {} were not read (give --cluster-kubeconfig NAMESPACE/NAME=PATH for each, and run again): no consent and no adoption is planned there; without it, in each such cluster the namespace must accept {}/{name} (mimeo.dev/accept-from), and HelmDeployer's copies there are reported as Conflict (nothing marks them for adoption) until their owner removes them",
                unread.into_iter().collect::<Vec<_>>().join(", "),
                source.namespace
            ),
        );
    }
    migration.rules.push(rule);
}

/// A `ClusterInventory` of the Clusters a selector chooses, in the namespaces they are in now,
/// whose `RemoteCluster`s the rules' namespaces may use.
fn cluster_inventory(name: &str, parts: InventoryParts) -> Value {
    let spec = InventorySpec {
        selector: &parts.selector,
        namespaces: &parts.namespaces,
        rule_namespaces: Some(&parts.rule_namespaces),
        create_namespaces: false,
    };
    super::openmcp::cluster_inventory(Tool::HelmDeployer, name, spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::migrate::replicator::tests::{ns, object};
    use crate::cmd::migrate::{Options, migrate};

    /// A file of HelmDeployer's own test fixture, as JSON.
    fn fixture(file: &str) -> Value {
        let path = format!(
            "{}/../shared/fixtures/inventory/openmcp/helmdeployer-test-05/{file}",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    /// A copy as HelmDeployer writes it: its labels, owned by its field manager (or `manager`).
    fn copy(namespace: &str, name: &str, source: (&str, &str), manager: &str) -> Object {
        let mut o = object("Secret", namespace, name, &[]);
        for (k, v) in [
            (MANAGED_BY, "helmdeploy.HelmDeployer"),
            (SOURCE_NAMESPACE, source.0),
            (SOURCE_NAME, source.1),
        ] {
            o.labels.insert(k.into(), v.into());
            o.label_managers.insert(k.into(), vec![manager.into()]);
        }
        o
    }

    fn test_05() -> Inventory {
        let mut objects: Vec<Object> = [
            "secret-1",
            "secret-2",
            "secret-3",
            "secret-4",
            "secret-overwrite-1",
            "secret-cfg-1",
            "secret-cfg-2",
            "secret-cfg-3",
            "secret-cfg-4",
            "secret-overwrite-2",
        ]
        .iter()
        .map(|f| {
            let s = fixture(&format!("{f}.yaml"));
            let m = &s["metadata"];
            object(
                "Secret",
                m["namespace"].as_str().unwrap(),
                m["name"].as_str().unwrap(),
                &[],
            )
        })
        .collect();
        objects.push(copy("test-0", "secret-1", ("default", "secret-1"), FIELD_MANAGER));
        // Copied by hand with kubectl: the labels came along, their manager did not.
        objects.push(copy(
            "test-0",
            "copied-secret-2",
            ("default", "secret-2"),
            "kubectl-client-side-apply",
        ));
        // HelmDeployer's copy of the config's secret-overwrite, from before the deployment named its own.
        objects.push(copy(
            "test-0",
            "secret-overwrite",
            ("openmcp-system", "secret-overwrite"),
            FIELD_MANAGER,
        ));
        Inventory {
            namespaces: ["default", "openmcp-system", "test-0", "test-1"]
                .map(|n| ns(n, &[]))
                .to_vec(),
            objects,
            helm: HelmDeployer {
                served: true,
                configs: vec![fixture("providerconfig.yaml")],
                deployments: vec![fixture("hd-0.yaml")],
            },
            openmcp_clusters: vec![fixture("cluster-0.yaml"), fixture("cluster-1.yaml")],
            ..Inventory::default()
        }
    }

    fn run(inventory: &Inventory) -> Migration {
        migrate(
            inventory,
            &Options {
                named: vec![Tool::HelmDeployer],
                ..Options::default()
            },
        )
    }

    fn rule<'a>(m: &'a Migration, namespace: &str, name: &str) -> &'a Value {
        m.rules
            .iter()
            .find(|r| r["metadata"]["namespace"] == namespace && r["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no rule {namespace}/{name} in {:#?}", m.rules))
    }

    #[test]
    fn test_05_becomes_one_rule_per_source_and_copy_name() {
        let m = run(&test_05());
        let names: BTreeSet<String> = m
            .rules
            .iter()
            .map(|r| {
                format!(
                    "{}/{}",
                    r["metadata"]["namespace"].as_str().unwrap(),
                    r["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect();
        let p = "openmcp-helmdeployer";
        let expected: BTreeSet<String> = [
            format!("default/{p}-secret-1"),
            format!("default/{p}-secret-2-as-copied-secret-2"),
            format!("default/{p}-secret-3"),
            format!("default/{p}-secret-4-as-copied-secret-4"),
            format!("default/{p}-secret-overwrite"),
            format!("openmcp-system/{p}-secret-cfg-1"),
            format!("openmcp-system/{p}-secret-cfg-2-as-copied-secret-cfg-2"),
            format!("openmcp-system/{p}-secret-cfg-3"),
            format!("openmcp-system/{p}-secret-cfg-4-as-copied-secret-cfg-4"),
        ]
        .into();
        assert_eq!(names, expected);
        // Narrowed to the namespace its Cluster is in, as the inventory is.
        let next_to = json!({"apiVersion": CLUSTER_API_VERSION, "kind": "Cluster",
                             "matchPurposes": [{"operator": "ContainsAll", "values": ["single"]}],
                             "namespaces": ["test-0"]});
        let remote = json!({"matchLabels": {INVENTORY_LABEL: "openmcp-helmdeployer-single"}});
        assert_eq!(
            rule(&m, "default", &format!("{p}-secret-2-as-copied-secret-2"))["spec"],
            json!({"source": {"kind": "Secret", "name": "secret-2"},
                   "targets": [{"nextTo": next_to, "name": "copied-secret-2"}]})
        );
        // The deployment's secret-overwrite wins over the config's in both lists: one rule, two targets.
        assert_eq!(
            rule(&m, "default", &format!("{p}-secret-overwrite"))["spec"]["targets"],
            json!([{"nextTo": next_to}, {"clusterSelector": remote, "namespace": "helm"}])
        );
        assert_eq!(
            rule(
                &m,
                "openmcp-system",
                &format!("{p}-secret-cfg-4-as-copied-secret-cfg-4")
            )["spec"]["targets"],
            json!([{"clusterSelector": remote, "namespace": "helm", "name": "copied-secret-cfg-4"}])
        );
        let notes = m.notes.join("\n");
        for list in ["toPlatformCluster", "toTargetCluster"] {
            assert!(
                notes.contains(&format!("{list}: openmcp-system/secret-overwrite as secret-overwrite (selectorDefinitions.single.secretsToCopy of HelmDeployerConfig helmdeploy) is overridden by default/secret-overwrite")),
                "{notes}"
            );
        }
        assert_eq!(
            m.inventories,
            [
                json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterInventory",
                    "metadata": {"name": "openmcp-helmdeployer-single", "labels": {"mimeo.dev/migrated-from": p}},
                    "spec": {"namespaces": ["test-0"], "openMCP": {},
                             "selector": {"matchPurposes": [{"operator": "ContainsAll", "values": ["single"]}]},
                             "remoteClusters": {"allowedNamespaces": {"matchExpressions": [
                                 {"key": "kubernetes.io/metadata.name", "operator": "In",
                                  "values": ["default", "openmcp-system"]}]}}}})
            ]
        );
    }

    #[test]
    fn only_helmdeployers_own_copies_of_the_same_source_are_adopted() {
        let m = run(&test_05());
        let adopted: Vec<String> = m
            .adoptions
            .iter()
            .map(|(p, r)| format!("{}/{} by {r}", p.namespace, p.name))
            .collect();
        assert_eq!(
            adopted,
            ["test-0/secret-1 by SyncRule/default/openmcp-helmdeployer-secret-1"]
        );
        assert_eq!(
            m.consents["test-0"].keys().collect::<Vec<_>>(),
            ["default/openmcp-helmdeployer-secret-1"]
        );
        let grant = &m.consents["test-0"]["default/openmcp-helmdeployer-secret-1"];
        assert_eq!(
            grant.asked_by,
            "spec.secretsToCopy of HelmDeployment default/hd-0"
        );
        assert_eq!(grant.written_in, "default");
        let notes = m.notes.join("\n");
        // The hand-made look-alike, and HelmDeployer's copy of the source that no longer wins.
        for copy in ["copied-secret-2", "secret-overwrite"] {
            assert!(
                notes.contains(&format!("Secret test-0/{copy}: exists but carries no mark")),
                "{notes}"
            );
        }
        assert!(!m.consents.contains_key("test-1"), "cluster-1 is not selected");
    }

    /// test-05 with cluster-0 read: HelmDeployer's copies in `namespace` there, and a look-alike
    /// copied by hand; cluster-1 read too, though nothing selects it.
    fn test_05_with_clusters(namespace: &str) -> Inventory {
        let mut inventory = test_05();
        inventory.helm.deployments[0]["spec"]["namespace"] = json!(namespace);
        let cluster_0 = Inventory {
            namespaces: vec![ns(namespace, &[]), ns("kube-system", &[])],
            objects: vec![
                copy(namespace, "secret-3", ("default", "secret-3"), FIELD_MANAGER),
                copy(
                    namespace,
                    "secret-overwrite",
                    ("default", "secret-overwrite"),
                    FIELD_MANAGER,
                ),
                copy(
                    namespace,
                    "copied-secret-4",
                    ("default", "secret-4"),
                    "kubectl-client-side-apply",
                ),
            ],
            ..Inventory::default()
        };
        inventory.clusters.insert("test-0/cluster-0".into(), cluster_0);
        inventory
            .clusters
            .insert("test-1/cluster-1".into(), Inventory::default());
        inventory
    }

    #[test]
    fn helmdeployers_copies_on_a_cluster_read_are_adopted_there() {
        let m = run(&test_05_with_clusters("helm"));
        let p = "openmcp-helmdeployer";
        let adopted: Vec<String> = m
            .cluster_adoptions
            .iter()
            .map(|((c, place), r)| format!("{c}: {}/{} by {r}", place.namespace, place.name))
            .collect();
        assert_eq!(
            adopted,
            [
                format!("test-0/cluster-0: helm/secret-3 by SyncRule/default/{p}-secret-3"),
                format!("test-0/cluster-0: helm/secret-overwrite by SyncRule/default/{p}-secret-overwrite"),
            ]
        );
        let consent = &m.cluster_consents[&("test-0/cluster-0".to_owned(), "helm".to_owned())];
        assert_eq!(
            consent.keys().collect::<Vec<_>>(),
            [
                &format!("default/{p}-secret-3"),
                &format!("default/{p}-secret-overwrite")
            ]
        );
        assert!(
            consent[&format!("default/{p}-secret-3")]
                .evidence
                .starts_with("Secret helm/secret-3 on Cluster test-0/cluster-0 (openmcp.cloud/managed-by"),
            "{consent:?}"
        );
        assert_eq!(m.cluster_consents.len(), 1, "{:?}", m.cluster_consents);
        assert!(
            !m.adoptions.keys().any(|p| p.namespace == "helm"),
            "nothing of cluster-0 is taken as the platform's"
        );
        let notes = m.notes.join("\n");
        assert!(
            notes.contains(
                "Secret helm/copied-secret-4 on Cluster test-0/cluster-0: exists but carries no mark"
            ),
            "{notes}"
        );
        assert!(
            notes.contains(
                "--cluster-kubeconfig test-1/cluster-1: HelmDeployer copies nothing onto this Cluster now"
            ),
            "{notes}"
        );
        assert!(!notes.contains("were not read"), "{notes}");

        // The plan says which cluster each entry is on, and reads back so.
        let text = m.to_yaml();
        assert!(
            text.contains("to diff and apply them, add --cluster-kubeconfig test-0/cluster-0=PATH.\n"),
            "{text}"
        );
        let document: Value = serde_yaml_ng::from_str(&text).unwrap();
        let plan = crate::cmd::migrate::Plan::from_document(&document)
            .unwrap()
            .unwrap();
        let on: Vec<(Option<&str>, &str)> = plan
            .consent
            .iter()
            .map(|c| (c.cluster.as_deref(), c.namespace.as_str()))
            .collect();
        assert_eq!(on, [(None, "test-0"), (Some("test-0/cluster-0"), "helm")]);
        assert_eq!(
            plan.adopt
                .iter()
                .filter(|a| a.cluster.as_deref() == Some("test-0/cluster-0"))
                .count(),
            2
        );
    }

    #[test]
    fn on_another_cluster_a_namespace_named_like_the_rules_is_asked_too() {
        let m = run(&test_05_with_clusters("default"));
        let consent = &m.cluster_consents[&("test-0/cluster-0".to_owned(), "default".to_owned())];
        assert!(
            consent.contains_key("default/openmcp-helmdeployer-secret-3"),
            "{consent:?}"
        );
    }

    #[test]
    fn copies_on_a_cluster_not_read_are_a_note() {
        assert_eq!(
            target_namespaces(&test_05().helm).into_iter().collect::<Vec<_>>(),
            ["helm"],
            "all that is read of a target cluster"
        );
        let m = run(&test_05());
        assert!(m.cluster_adoptions.is_empty() && m.cluster_consents.is_empty());
        assert!(
            m.notes.iter().any(|n| n.contains(
                "SyncRule default/openmcp-helmdeployer-secret-3: the copies onto Clusters test-0/cluster-0 (namespace helm) were not read (give --cluster-kubeconfig NAMESPACE/NAME=PATH"
            ) && n.contains("must accept default/openmcp-helmdeployer-secret-3 (mimeo.dev/accept-from)")),
            "{:#?}",
            m.notes
        );
    }

    #[test]
    fn between_deployments_the_first_keeps_a_target_unless_the_source_is_the_same() {
        let mut inventory = test_05();
        let later = |name: &str, namespace: &str, source: &str| {
            let mut d = fixture("hd-0.yaml");
            d["metadata"] =
                json!({"name": name, "namespace": namespace, "creationTimestamp": "2030-01-01T00:00:00Z"});
            d["spec"]["secretsToCopy"] =
                json!({"toPlatformCluster": [{"source": {"name": source}, "target": {"name": "secret-1"}}]});
            d
        };
        inventory.helm.deployments[0]["metadata"]["creationTimestamp"] = json!("2029-01-01T00:00:00Z");
        inventory
            .helm
            .deployments
            .push(later("hd-same", "default", "secret-1"));
        inventory.helm.deployments.push(later("hd-other", "team", "mine"));
        let m = run(&inventory);
        assert!(
            m.notes.iter().any(|n| n.contains(
                "HelmDeployment team/hd-other: toPlatformCluster team/mine as secret-1: HelmDeployment default/hd-0 copies default/secret-1 there first"
            )),
            "{:#?}",
            m.notes
        );
        assert!(!m.rules.iter().any(|r| r["metadata"]["namespace"] == "team"));
        // Same source: no conflict. (Its definition's secret-overwrite, which hd-0 replaced with its
        // own, does conflict, as in HelmDeployer.)
        assert!(
            !m.notes
                .iter()
                .any(|n| n.contains("hd-same: toPlatformCluster default/secret-1")),
            "{:#?}",
            m.notes
        );
        assert!(
            m.notes.iter().any(|n| n.contains(
                "hd-same: toPlatformCluster openmcp-system/secret-overwrite as secret-overwrite: HelmDeployment default/hd-0 copies default/secret-overwrite there first"
            )),
            "{:#?}",
            m.notes
        );
        // Only the inline selector of a deployment that sets one counts, and its ref is ignored.
        let mut inline = test_05();
        inline.helm.deployments[0]["spec"]["selector"] =
            json!({"ref": "single", "matchLabels": {"nope": "x"}});
        let m = run(&inline);
        assert!(m.inventories.is_empty(), "it selects no Cluster");
        assert!(
            m.rules.iter().all(|r| r["metadata"]["namespace"] == "default"),
            "no config entries"
        );
        assert!(m.adoptions.is_empty());
    }

    #[test]
    fn the_evidence_is_helmdeployers_labels_for_this_source_written_by_it() {
        let source = Source {
            namespace: "default".into(),
            name: "secret-1".into(),
        };
        let made = copy("test-0", "secret-1", ("default", "secret-1"), FIELD_MANAGER);
        assert!(made_by_helmdeployer(&made, &source, Some("helmdeploy")).is_some());
        assert!(
            made_by_helmdeployer(&made, &source, None).is_some(),
            "no config: any *.HelmDeployer"
        );
        assert!(
            made_by_helmdeployer(&made, &source, Some("other")).is_none(),
            "another provider's"
        );
        let other_source = copy("test-0", "secret-1", ("team", "secret-1"), FIELD_MANAGER);
        assert!(made_by_helmdeployer(&other_source, &source, Some("helmdeploy")).is_none());
        let mut relabelled = made.clone();
        relabelled
            .label_managers
            .insert(SOURCE_NAME.into(), vec!["kubectl-label".into()]);
        assert!(made_by_helmdeployer(&relabelled, &source, Some("helmdeploy")).is_none());
        let mut unlabelled = made;
        unlabelled.labels.remove(MANAGED_BY);
        assert!(made_by_helmdeployer(&unlabelled, &source, Some("helmdeploy")).is_none());
    }

    #[test]
    fn a_broken_selector_is_named_where_it_is_written() {
        let broken = json!({"matchPurposes": [{"operator": "Sometimes", "values": ["x"]}]});
        let config = json!({"metadata": {"name": "default"},
                            "spec": {"selectorDefinitions": {"workload": broken.clone()}}});
        let by_ref = json!({"metadata": {"namespace": "p", "name": "d"},
                            "spec": {"selector": {"ref": "workload"}}});
        let own = json!({"metadata": {"namespace": "p", "name": "e"}, "spec": {"selector": broken}});
        let mut notes = Vec::new();
        assert!(deployment(&by_ref, Some(&config), "p", &[], &mut notes).is_none());
        assert!(deployment(&own, Some(&config), "p", &[], &mut notes).is_none());
        assert!(
            notes[0].starts_with(
                "HelmDeployment p/d: the selector it refers to, selectorDefinitions.workload of \
                 HelmDeployerConfig default, does not read as openMCP's ("
            ),
            "{notes:?}"
        );
        assert!(
            notes[1].starts_with("HelmDeployment p/e: its selector does not read as openMCP's ("),
            "{notes:?}"
        );
    }

    #[test]
    fn later_entries_of_one_list_win() {
        let mut into = BTreeMap::new();
        let entry = Entry {
            source: Source {
                namespace: "a".into(),
                name: String::new(),
            },
            asked_by: "x".into(),
            written_in: "a".into(),
        };
        let mut dropped = Vec::new();
        let list = json!([{"source": {"name": "one"}, "target": {"name": "t"}}, {"source": {"name": "two"}, "target": {"name": "t"}},
                          {"source": {"name": "t"}}]);
        merge(&mut into, &list, &entry, "toTargetCluster", &mut dropped);
        assert_eq!(into["t"].source.name, "t");
        assert_eq!(dropped.len(), 2, "{dropped:?}");
    }
}
