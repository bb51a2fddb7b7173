//! What each rule watches in one cluster, as it declared at its last reconcile, and which rules
//! an event concerns: an event wakes exactly the rules it may concern.

use super::triggers::Triggers;
use crate::locks::lock;
use crate::sync::ownership::RuleKey;
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::core::{ApiResource, Selector, SelectorExt};
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

/// Identifies one shared source watch: a kind in a namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceWatchKey {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub namespace: String,
}

impl SourceWatchKey {
    pub fn new(resource: &ApiResource, namespace: &str) -> Self {
        SourceWatchKey {
            group: resource.group.clone(),
            version: resource.version.clone(),
            plural: resource.plural.clone(),
            namespace: namespace.to_owned(),
        }
    }
}

/// Which source objects a rule reads.
#[derive(Clone, Debug)]
pub struct SourceInterest {
    pub watch: SourceWatchKey,
    pub resource: ApiResource,
    pub name: Option<String>,
    pub selector: Option<Selector>,
    /// Names that matched at the last reconcile: a source that stops matching must wake the rule.
    pub matched: BTreeSet<String>,
}

impl SourceInterest {
    fn concerns(&self, object: &DynamicObject) -> bool {
        let name = object.name_any();
        match (&self.name, &self.selector) {
            (Some(wanted), _) => *wanted == name,
            (None, Some(selector)) => selector.matches(object.labels()) || self.matched.contains(&name),
            (None, None) => false,
        }
    }
}

/// Which namespaces' comings, goings and label or annotation changes matter to a rule.
#[derive(Clone, Debug, Default)]
pub struct NamespaceInterest {
    pub names: BTreeSet<String>,
    /// The rule selects namespaces by labels or name pattern, so any namespace may matter.
    pub any: bool,
}

/// All a rule watches in one cluster, as declared at its last reconcile.
#[derive(Clone, Debug, Default)]
pub struct Interest {
    pub source: Option<SourceInterest>,
    /// The rule's inputs: objects by name, watched like sources.
    pub inputs: Vec<SourceInterest>,
    /// The kind of the copies the rule holds in this cluster.
    pub copies: Option<ApiResource>,
    pub namespaces: NamespaceInterest,
}

/// Identifies one copies watch: a kind, over all namespaces.
pub(super) type CopiesKey = (String, String, String);

pub(super) fn copies_key(resource: &ApiResource) -> CopiesKey {
    (
        resource.group.clone(),
        resource.version.clone(),
        resource.plural.clone(),
    )
}

impl Interest {
    /// Whether the rule reads from the source watch `key` (its source or an input).
    fn reads_from(&self, key: &SourceWatchKey) -> bool {
        self.source.iter().chain(&self.inputs).any(|s| &s.watch == key)
    }

    /// Whether an event of the source watch `key` about `object` may change what the rule does.
    fn concerned_by(&self, key: &SourceWatchKey, object: &DynamicObject) -> bool {
        self.source
            .iter()
            .chain(&self.inputs)
            .any(|s| &s.watch == key && s.concerns(object))
    }

    /// Whether the rule holds copies of the kind watched under `key`.
    fn holds_copies(&self, key: &CopiesKey) -> bool {
        self.copies.as_ref().is_some_and(|c| copies_key(c) == *key)
    }

    /// Whether the rule minds the namespace `name`.
    fn minds_namespace(&self, name: &str) -> bool {
        self.namespaces.any || self.namespaces.names.contains(name)
    }
}

/// Every rule's interest in one cluster.
#[derive(Default)]
pub(super) struct Interests {
    rules: Mutex<HashMap<RuleKey, Interest>>,
}

impl Interests {
    pub fn declare(&self, rule: &RuleKey, interest: Interest) {
        lock(&self.rules).insert(rule.clone(), interest);
    }

    /// Updates the names a selector-based rule matched.
    pub fn set_matched(&self, rule: &RuleKey, matched: BTreeSet<String>) {
        if let Some(source) = lock(&self.rules).get_mut(rule).and_then(|i| i.source.as_mut()) {
            source.matched = matched;
        }
    }

    pub fn forget(&self, rule: &RuleKey) {
        lock(&self.rules).remove(rule);
    }

    /// The source watches and the copies watches some rule still reads.
    pub fn in_use(&self) -> (BTreeSet<SourceWatchKey>, BTreeSet<CopiesKey>) {
        let rules = lock(&self.rules);
        (
            rules
                .values()
                .flat_map(|i| i.source.iter().chain(&i.inputs).map(|s| s.watch.clone()))
                .collect(),
            rules
                .values()
                .filter_map(|i| i.copies.as_ref().map(copies_key))
                .collect(),
        )
    }

    /// Wakes every rule here.
    pub fn wake_all(&self, triggers: &Triggers) {
        for rule in lock(&self.rules).keys() {
            triggers.fire(rule);
        }
    }

    /// Wakes the rules an event of the source watch `key` about `object` concerns.
    pub fn wake_for_source(&self, triggers: &Triggers, key: &SourceWatchKey, object: &DynamicObject) {
        self.wake_where(triggers, |i| i.concerned_by(key, object));
    }

    /// Wakes the rules that read from the source watch `key` (it listed again).
    pub fn wake_readers(&self, triggers: &Triggers, key: &SourceWatchKey) {
        self.wake_where(triggers, |i| i.reads_from(key));
    }

    /// Wakes the rules that hold copies of the kind of `resource` here.
    pub fn wake_holders(&self, triggers: &Triggers, resource: &ApiResource) {
        let key = copies_key(resource);
        self.wake_where(triggers, |i| i.holds_copies(&key));
    }

    /// Wakes the rules that mind the namespace `name`.
    pub fn wake_for_namespace(&self, triggers: &Triggers, name: &str) {
        self.wake_where(triggers, |i| i.minds_namespace(name));
    }

    fn wake_where(&self, triggers: &Triggers, concerned: impl Fn(&Interest) -> bool) {
        for (rule, interest) in lock(&self.rules).iter() {
            if concerned(interest) {
                triggers.fire(rule);
            }
        }
    }
}
