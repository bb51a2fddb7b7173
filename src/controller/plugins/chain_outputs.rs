//! What each rule's transform chain made of each copy, so that a reconcile whose input is the same
//! (the source's content, the chain's plugins and configs, the copy's place) does not call the
//! plugins again. Most reconciles change nothing (a namespace's labels, a copy's own event, a
//! resync), and a chain of an interpreted plugin costs about a millisecond per copy.
//!
//! A rule looked at while this replica does not hold its shard is let go, but what its chain
//! made is kept for [`KEPT_LET_GO`]: a hold that lapsed under load comes back with the next
//! renewal, which looks at every rule again (`shards`), and a lone replica that forgot the
//! outcomes of the rules it let go in such a moment ran their chains again for every copy
//! (issue 43: 8,200 calls of a 20 ms chain for 4,598 copies in `benches/replicas.rs`). An
//! outcome is reused only for the same input, so keeping one longer is never wrong; a deleted
//! rule's go at once.
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
use std::time::{Duration, Instant};

/// How long the outcomes of a rule let go are kept. A lapsed hold is renewed within seconds, and
/// a shard dropped after a failed renewal is taken again in the next round (2 s for a 6 s Lease)
/// plus a second's grace; a shard handed to another replica does not come back soon, and its
/// rules' outcomes go after this.
const KEPT_LET_GO: Duration = Duration::from_secs(300);

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
    rules: Mutex<Outputs>,
}

#[derive(Default)]
struct Outputs {
    by_rule: HashMap<RuleKey, RuleOutputs>,
    /// The rules let go (their shard not held here when they were looked at) whose outcomes are
    /// kept, and since when.
    let_go: HashMap<RuleKey, Instant>,
}

impl Outputs {
    /// Drops the outcomes of the rules let go [`KEPT_LET_GO`] ago or longer.
    fn sweep(&mut self, now: Instant) {
        let expired: Vec<RuleKey> = self
            .let_go
            .iter()
            .filter(|(_, since)| now.saturating_duration_since(**since) >= KEPT_LET_GO)
            .map(|(rule, _)| rule.clone())
            .collect();
        for rule in expired {
            self.let_go.remove(&rule);
            self.by_rule.remove(&rule);
        }
    }
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
    fn lock(&self) -> std::sync::MutexGuard<'_, Outputs> {
        self.rules.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The outcome remembered for this copy, if it came from the same `input`.
    pub fn get(&self, rule: &RuleKey, target: &CopyTarget, input: &str) -> Option<Remembered> {
        self.lock()
            .by_rule
            .get(rule)?
            .get(target)
            .filter(|(remembered, _)| remembered == input)
            .map(|(_, outcome)| outcome.clone())
    }

    pub fn put(&self, rule: &RuleKey, target: CopyTarget, input: String, outcome: Remembered) {
        self.lock()
            .by_rule
            .entry(rule.clone())
            .or_default()
            .insert(target, (input, outcome));
    }

    /// Keeps only the copies the rule's last reconcile ran its chain for: a copy no longer
    /// wanted, or a rule without a chain now, holds no memory. The rule is held here again if it
    /// was let go.
    pub fn keep_only(&self, rule: &RuleKey, targets: &BTreeSet<CopyTarget>) {
        let mut outputs = self.lock();
        outputs.let_go.remove(rule);
        if targets.is_empty() {
            outputs.by_rule.remove(rule);
        } else if let Some(copies) = outputs.by_rule.get_mut(rule) {
            copies.retain(|target, _| targets.contains(target));
        }
        outputs.sweep(Instant::now());
    }

    /// A rule let go at `now` (looked at while this replica does not hold its shard): its
    /// outcomes are kept for [`KEPT_LET_GO`] from the first time, for the pass that follows when
    /// the shard is held again.
    pub fn let_go(&self, rule: &RuleKey, now: Instant) {
        let mut outputs = self.lock();
        if outputs.by_rule.contains_key(rule) {
            outputs.let_go.entry(rule.clone()).or_insert(now);
        }
        outputs.sweep(now);
    }

    /// Forgets a rule that is gone, with every outcome of it.
    pub fn forget(&self, rule: &RuleKey) {
        let mut outputs = self.lock();
        outputs.let_go.remove(rule);
        outputs.by_rule.remove(rule);
    }

    /// How many copies' outcomes are remembered, over all rules.
    #[cfg(test)]
    fn count(&self) -> usize {
        self.lock().by_rule.values().map(HashMap::len).sum()
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

    /// issue 43, 5: a lone replica whose shard's hold lapsed under load let go of every rule it
    /// looked at meanwhile, and when the renewal looked at them again their chains ran for every
    /// copy once more. Let go, a rule keeps its outcomes until it is looked at while held; only
    /// one that stays let go loses them, and a deleted one at once.
    #[test]
    fn a_rule_let_go_keeps_its_outcomes_for_the_look_after_the_renewal() {
        let outputs = ChainOutputs::default();
        let (a, b) = (
            RuleKey::sync_rule("platform", "a"),
            RuleKey::sync_rule("platform", "b"),
        );
        let written = Remembered::Write {
            object: Arc::new(json!({"data": {"k": "dg=="}})),
            hash: "sha256:o".into(),
        };
        let held_again = BTreeSet::from([target("tenant-a")]);
        outputs.put(&a, target("tenant-a"), "in".into(), written.clone());
        outputs.put(&b, target("tenant-a"), "in".into(), written.clone());
        let lapsed = Instant::now();
        outputs.let_go(&a, lapsed);
        outputs.let_go(&a, lapsed + Duration::from_secs(1));
        assert_eq!(
            outputs.get(&a, &target("tenant-a"), "in"),
            Some(written.clone()),
            "the look after the renewal reuses what the chain made"
        );
        outputs.keep_only(&a, &held_again);
        outputs.lock().sweep(lapsed + KEPT_LET_GO);
        assert_eq!(
            outputs.get(&a, &target("tenant-a"), "in"),
            Some(written.clone()),
            "held again: no longer let go"
        );

        outputs.let_go(&b, lapsed);
        outputs
            .lock()
            .sweep(lapsed + KEPT_LET_GO - Duration::from_secs(1));
        assert!(outputs.get(&b, &target("tenant-a"), "in").is_some());
        outputs.lock().sweep(lapsed + KEPT_LET_GO);
        assert_eq!(
            outputs.get(&b, &target("tenant-a"), "in"),
            None,
            "its shard did not come back"
        );
        assert_eq!(outputs.count(), 1);

        let never_ran = RuleKey::sync_rule("platform", "c");
        outputs.let_go(&never_ran, lapsed);
        assert!(
            !outputs.lock().let_go.contains_key(&never_ran),
            "nothing kept, nothing marked"
        );

        outputs.forget(&a);
        assert_eq!(outputs.count(), 0, "a deleted rule's outcomes go at once");
    }
}
