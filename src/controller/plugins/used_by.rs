//! Which rules use which things (the ConfigMaps and files plugins come from), kept both ways:
//! what to wake when a thing changes, and what to stop following when no rule uses it any more.

use crate::sync::ownership::RuleKey;
use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;

pub struct UsedBy<P> {
    rules: HashMap<P, BTreeSet<RuleKey>>,
    by_rule: HashMap<RuleKey, BTreeSet<P>>,
}

impl<P> Default for UsedBy<P> {
    fn default() -> Self {
        UsedBy {
            rules: HashMap::new(),
            by_rule: HashMap::new(),
        }
    }
}

impl<P: Clone + Eq + Hash + Ord> UsedBy<P> {
    /// Records what `rule` uses now (nothing: it is forgotten). Returns the things no rule used
    /// before and the things no rule uses any more.
    pub fn set(&mut self, rule: &RuleKey, things: BTreeSet<P>) -> (Vec<P>, Vec<P>) {
        let before = match things.is_empty() {
            true => self.by_rule.remove(rule),
            false => self.by_rule.insert(rule.clone(), things.clone()),
        }
        .unwrap_or_default();
        let mut gone = Vec::new();
        for thing in before.difference(&things) {
            if let Some(rules) = self.rules.get_mut(thing) {
                rules.remove(rule);
                if rules.is_empty() {
                    self.rules.remove(thing);
                    gone.push(thing.clone());
                }
            }
        }
        let mut new = Vec::new();
        for thing in things.difference(&before) {
            let rules = self.rules.entry(thing.clone()).or_default();
            if rules.is_empty() {
                new.push(thing.clone());
            }
            rules.insert(rule.clone());
        }
        (new, gone)
    }

    /// The rules that use `thing`.
    pub fn rules(&self, thing: &P) -> impl Iterator<Item = &RuleKey> {
        self.rules.get(thing).into_iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn things_come_with_their_first_rule_and_go_with_their_last() {
        let (a, b) = (RuleKey::sync_rule("t", "a"), RuleKey::sync_rule("t", "b"));
        let mut used = UsedBy::default();
        assert_eq!(used.set(&a, BTreeSet::from(["x", "y"])), (vec!["x", "y"], vec![]));
        assert_eq!(
            used.set(&b, BTreeSet::from(["y"])),
            (vec![], vec![]),
            "y is followed already"
        );
        assert_eq!(used.rules(&"y").count(), 2);
        assert_eq!(
            used.set(&a, BTreeSet::from(["z"])),
            (vec!["z"], vec!["x"]),
            "b still uses y"
        );
        assert_eq!(used.set(&b, BTreeSet::new()), (vec![], vec!["y"]));
        assert_eq!(used.rules(&"y").count(), 0);
        assert_eq!(used.set(&a, BTreeSet::from(["z"])), (vec![], vec![]), "unchanged");
    }
}
