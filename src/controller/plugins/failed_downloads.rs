//! Artifacts whose download failed for a reason the artifact itself carries (its bytes do not
//! hash to the pinned digest, are not the size its manifest says, or are too large), remembered
//! per rule and generation: downloading it again would bring the same bytes, so a rule that
//! retries does not, until it changes. A hostile registry could otherwise make every retry of
//! every rule a download of its largest artifact.

use crate::plugin::oci::OciError;
use crate::sync::ownership::RuleKey;
use std::collections::HashMap;
use std::sync::Mutex;

/// Past this many failures remembered the map starts afresh (a forgotten one costs one download);
/// each entry is a few strings.
const MAX_REMEMBERED: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    rule: RuleKey,
    generation: Option<i64>,
    /// The pinned reference, `registry/repository@sha256:...`.
    artifact: String,
}

#[derive(Default)]
pub struct FailedDownloads(Mutex<HashMap<Key, OciError>>);

impl FailedDownloads {
    /// How this generation of the rule last failed to download `artifact`, if for good.
    pub fn get(&self, rule: &RuleKey, generation: Option<i64>, artifact: &str) -> Option<OciError> {
        let key = Key {
            rule: rule.clone(),
            generation,
            artifact: artifact.to_owned(),
        };
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned()
    }

    /// Remembers a failure that lasts ([`OciError::is_lasting`]); others are tried again. What
    /// earlier generations of the rule remembered goes.
    pub fn failed(&self, rule: &RuleKey, generation: Option<i64>, artifact: &str, error: &OciError) {
        if !error.is_lasting() {
            return;
        }
        let mut failures = self.0.lock().unwrap_or_else(|p| p.into_inner());
        failures.retain(|key, _| key.rule != *rule || key.generation == generation);
        if failures.len() >= MAX_REMEMBERED {
            failures.clear();
        }
        let key = Key {
            rule: rule.clone(),
            generation,
            artifact: artifact.to_owned(),
        };
        failures.insert(key, error.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lasting_failure_holds_for_its_rule_and_generation_only() {
        let failures = FailedDownloads::default();
        let (a, b) = (RuleKey::sync_rule("t", "a"), RuleKey::sync_rule("t", "b"));
        let artifact = "r.example/p@sha256:aa";
        let mismatch = OciError::DigestMismatch {
            expected: "sha256:aa".into(),
            actual: "sha256:bb".into(),
        };
        failures.failed(&a, Some(1), artifact, &mismatch);
        // (rule, generation, artifact, remembered)
        for (rule, generation, asked, remembered) in [
            (&a, Some(1), artifact, true),
            (&a, Some(2), artifact, false),
            (&b, Some(1), artifact, false),
            (&a, Some(1), "r.example/p@sha256:cc", false),
        ] {
            let found = failures.get(rule, generation, asked);
            assert_eq!(found.is_some(), remembered, "{rule:?} {generation:?} {asked}");
        }
        // The rule changed and failed again: the old generation's failure is gone.
        failures.failed(&a, Some(2), artifact, &mismatch);
        assert!(failures.get(&a, Some(1), artifact).is_none());
        assert!(failures.get(&a, Some(2), artifact).is_some());
        for passing in [
            OciError::Unreachable {
                registry: "r".into(),
                message: "down".into(),
            },
            OciError::NotFound {
                reference: artifact.into(),
            },
            OciError::Unauthorized {
                registry: "r".into(),
                message: "401".into(),
            },
        ] {
            failures.failed(&b, Some(1), artifact, &passing);
            assert!(failures.get(&b, Some(1), artifact).is_none(), "{passing}");
        }
        for lasting in [
            OciError::TooLarge { size: 2, limit: 1 },
            OciError::LayerSizeMismatch {
                declared: 1,
                received: "2".into(),
            },
        ] {
            let rule = RuleKey::sync_rule("t", lasting.reason());
            failures.failed(&rule, None, artifact, &lasting);
            assert!(failures.get(&rule, None, artifact).is_some(), "{lasting}");
        }
    }
}
