//! A rule's identity as its copies record it (`SyncRule/<namespace>/<name>`,
//! `ClusterSyncRule/<name>`): what seals, events and the copies caches name a rule by.

use std::fmt;
use std::str::FromStr;

/// The two rule kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RuleKind {
    SyncRule,
    ClusterSyncRule,
}

/// A rule's identity as copies record it: `SyncRule/<namespace>/<name>` or
/// `ClusterSyncRule/<name>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleKey {
    pub kind: RuleKind,
    pub namespace: Option<String>,
    pub name: String,
}

impl RuleKey {
    pub fn sync_rule(namespace: &str, name: &str) -> Self {
        RuleKey {
            kind: RuleKind::SyncRule,
            namespace: Some(namespace.to_owned()),
            name: name.to_owned(),
        }
    }

    pub fn cluster_sync_rule(name: &str) -> Self {
        RuleKey {
            kind: RuleKind::ClusterSyncRule,
            namespace: None,
            name: name.to_owned(),
        }
    }
}

impl fmt::Display for RuleKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.kind, &self.namespace) {
            (RuleKind::SyncRule, Some(ns)) => write!(f, "SyncRule/{ns}/{}", self.name),
            (RuleKind::SyncRule, None) => write!(f, "SyncRule/{}", self.name),
            (RuleKind::ClusterSyncRule, _) => write!(f, "ClusterSyncRule/{}", self.name),
        }
    }
}

impl FromStr for RuleKey {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        let parts: Vec<&str> = s.split('/').collect();
        match parts.as_slice() {
            ["SyncRule", ns, name] if !ns.is_empty() && !name.is_empty() => Ok(RuleKey::sync_rule(ns, name)),
            ["ClusterSyncRule", name] if !name.is_empty() => Ok(RuleKey::cluster_sync_rule(name)),
            _ => Err(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_keys_round_trip() {
        for key in [
            RuleKey::sync_rule("platform", "creds"),
            RuleKey::cluster_sync_rule("pull-secret"),
        ] {
            assert_eq!(key.to_string().parse::<RuleKey>(), Ok(key.clone()));
        }
        assert!("SyncRule/only-name".parse::<RuleKey>().is_err());
        assert!("Deployment/a/b".parse::<RuleKey>().is_err());
    }
}
