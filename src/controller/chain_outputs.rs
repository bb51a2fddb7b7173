//! What each rule's transform chain made of each copy, so that a reconcile whose input is the same
//! (the source's content, the chain's plugins and configs, the copy's place) does not call the
//! plugins again. Most reconciles change nothing (a namespace's labels, a copy's own event, a
//! resync), and a chain of an interpreted plugin costs about a millisecond per copy.
//!
//! A chain is taken to be a function of its input: each call gets a fresh instance, so nothing
//! carries over between calls. A plugin that puts the clock or random numbers into its output
//! has its first output reused until the input changes, where it would otherwise rewrite its
//! copies at every reconcile. Failures are not remembered: they are tried again. The memory is
//! the controller's own: a restart runs every chain once more.

use crate::plugin::TransformContext;
use crate::sync::desired::CopyTarget;
use crate::sync::hash::digest;
use crate::sync::ownership::RuleKey;
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// What the chain decided for one copy.
#[derive(Clone, Debug, PartialEq)]
pub enum Remembered {
    /// Write this object (with its digest, as `DesiredCopy` records it).
    Write { object: Arc<Value>, hash: String },
    /// A plugin skipped the copy.
    Skip { plugin: String, reason: String },
}

/// One rule's remembered outcomes, per copy, each with the digest of the input it came from.
type RuleOutputs = HashMap<CopyTarget, (String, Remembered)>;

/// The remembered outcomes of every rule.
#[derive(Default)]
pub struct ChainOutputs {
    rules: Mutex<HashMap<RuleKey, RuleOutputs>>,
}

/// The digest of everything a chain's outcome for one copy depends on: the copy as it goes into
/// the chain (`template_hash` covers its content and carried metadata, `source_hash` the source,
/// `inputs_hash` the rule's inputs), each plugin's digest and config, in order, and the context
/// the plugins are told.
pub fn chain_input(
    template_hash: &str,
    source_hash: &str,
    inputs_hash: &str,
    chain: &[(&str, &str)],
    context: &TransformContext,
) -> String {
    digest(&json!({
        "template": template_hash,
        "source": source_hash,
        "inputs": inputs_hash,
        "chain": chain,
        "context": [
            &context.rule,
            &context.source_api_version,
            &context.source_kind,
            &context.source_namespace,
            &context.source_name,
            &context.source_cluster,
            &context.target_cluster,
            &context.target_namespace,
            &context.target_name,
        ],
    }))
}

impl ChainOutputs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RuleKey, RuleOutputs>> {
        self.rules.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The outcome remembered for this copy, if it came from the same `input`.
    pub fn get(&self, rule: &RuleKey, target: &CopyTarget, input: &str) -> Option<Remembered> {
        self.lock()
            .get(rule)?
            .get(target)
            .filter(|(remembered, _)| remembered == input)
            .map(|(_, outcome)| outcome.clone())
    }

    pub fn put(&self, rule: &RuleKey, target: CopyTarget, input: String, outcome: Remembered) {
        self.lock()
            .entry(rule.clone())
            .or_default()
            .insert(target, (input, outcome));
    }

    /// Keeps only the copies the rule's last reconcile ran its chain for: a copy no longer
    /// wanted, or a rule without a chain now, holds no memory.
    pub fn keep_only(&self, rule: &RuleKey, targets: &BTreeSet<CopyTarget>) {
        let mut rules = self.lock();
        if targets.is_empty() {
            rules.remove(rule);
        } else if let Some(copies) = rules.get_mut(rule) {
            copies.retain(|target, _| targets.contains(target));
        }
    }

    /// How many copies' outcomes are remembered, over all rules.
    #[cfg(test)]
    fn count(&self) -> usize {
        self.lock().values().map(HashMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(target: &str) -> TransformContext {
        TransformContext {
            rule: "SyncRule/platform/creds".into(),
            source_api_version: "v1".into(),
            source_kind: "Secret".into(),
            source_namespace: Some("platform".into()),
            source_name: "creds".into(),
            source_cluster: String::new(),
            target_cluster: String::new(),
            target_namespace: Some(target.into()),
            target_name: "creds".into(),
            inputs: Default::default(),
        }
    }

    fn target(namespace: &str) -> CopyTarget {
        CopyTarget {
            cluster: None,
            namespace: Some(namespace.into()),
            name: "creds".into(),
        }
    }

    #[test]
    fn the_input_covers_source_chain_and_place() {
        let chain = [("sha256:a", r#"{"include":["k"]}"#)];
        let base = chain_input("t1", "s1", "i1", &chain, &context("tenant-a"));
        assert_eq!(base, chain_input("t1", "s1", "i1", &chain, &context("tenant-a")));
        for other in [
            chain_input("t2", "s1", "i1", &chain, &context("tenant-a")),
            chain_input("t1", "s2", "i1", &chain, &context("tenant-a")),
            chain_input("t1", "s1", "i2", &chain, &context("tenant-a")),
            chain_input(
                "t1",
                "s1",
                "i1",
                &[("sha256:b", r#"{"include":["k"]}"#)],
                &context("tenant-a"),
            ),
            chain_input(
                "t1",
                "s1",
                "i1",
                &[("sha256:a", r#"{"include":["j"]}"#)],
                &context("tenant-a"),
            ),
            chain_input("t1", "s1", "i1", &[chain[0], chain[0]], &context("tenant-a")),
            chain_input("t1", "s1", "i1", &chain, &context("tenant-b")),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn outcomes_are_kept_per_copy_and_input() {
        let outputs = ChainOutputs::default();
        let rule = RuleKey::sync_rule("platform", "creds");
        let written = Remembered::Write {
            object: Arc::new(json!({"data": {"k": "dg=="}})),
            hash: "sha256:o".into(),
        };
        outputs.put(&rule, target("tenant-a"), "in-1".into(), written.clone());
        outputs.put(
            &rule,
            target("tenant-b"),
            "in-2".into(),
            Remembered::Skip {
                plugin: "p".into(),
                reason: "no".into(),
            },
        );
        assert_eq!(outputs.get(&rule, &target("tenant-a"), "in-1"), Some(written));
        assert_eq!(
            outputs.get(&rule, &target("tenant-a"), "in-2"),
            None,
            "another input"
        );
        assert_eq!(outputs.get(&rule, &target("tenant-c"), "in-1"), None);
        assert_eq!(outputs.count(), 2);

        outputs.keep_only(&rule, &BTreeSet::from([target("tenant-b")]));
        assert_eq!(outputs.get(&rule, &target("tenant-a"), "in-1"), None);
        assert_eq!(outputs.count(), 1);
        outputs.keep_only(&rule, &BTreeSet::new());
        assert_eq!(outputs.count(), 0);
    }
}
