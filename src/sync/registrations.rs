//! Several `RemoteCluster`s naming one physical cluster, as one rule sees them.
//!
//! Registrations of one cluster (the same uid of `kube-system`) may stand side by side: each
//! rule writes through the one it names. Only within one rule do they meet: a rule that reaches
//! a cluster through two of them writes through one, and its copies there are that one's,
//! whichever registration recorded them, so that a copy is never taken for an unwanted one
//! through another registration of its own cluster and deleted.
//!
//! Pure: the fleet says what each registration is.

use std::collections::BTreeMap;

/// One registration a rule targets or holds copies through, as the fleet knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    pub name: String,
    /// The uid of the cluster's `kube-system` namespace; `None` while not known, empty when its
    /// identity may not read it (the registration then stands alone).
    pub identity: Option<String>,
    /// When it was created (RFC 3339, whole seconds), to choose stably.
    pub created: Option<String>,
    /// The rule has targets through it.
    pub targeted: bool,
    /// It exists and can be used now.
    pub usable: bool,
}

/// What a rule does with one of its registrations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Written (and cleaned up) through.
    Used,
    /// The rule's targets through it reach a cluster it also reaches through `of`, which it
    /// uses: they get no copies.
    Duplicate { of: String },
    /// No targets through it, and its cluster is reached through `into`: its copies are
    /// `into`'s.
    Folded { into: String },
    /// No targets through it, and the cluster of `until`, which the rule targets, is not known
    /// yet: it may be this one's, so nothing is removed through this one until it is.
    Held { until: String },
}

/// The role of each registration. Among those naming one cluster the rule uses the one it
/// targets, then one that can be used, then the oldest, then the first by name.
pub fn roles(registrations: &[Registration]) -> BTreeMap<String, Role> {
    let mut roles: BTreeMap<String, Role> = registrations
        .iter()
        .map(|r| (r.name.clone(), Role::Used))
        .collect();
    let mut by_identity: BTreeMap<&str, Vec<&Registration>> = BTreeMap::new();
    for registration in registrations {
        if let Some(identity) = registration.identity.as_deref().filter(|i| !i.is_empty()) {
            by_identity.entry(identity).or_default().push(registration);
        }
    }
    for group in by_identity.values().filter(|g| g.len() > 1) {
        let Some(chosen) = group.iter().min_by_key(|r| {
            (
                !r.targeted,
                !r.usable,
                r.created.is_none(),
                r.created.clone(),
                r.name.clone(),
            )
        }) else {
            continue;
        };
        for other in group.iter().filter(|r| r.name != chosen.name) {
            let role = if other.targeted && chosen.targeted {
                Role::Duplicate {
                    of: chosen.name.clone(),
                }
            } else {
                Role::Folded {
                    into: chosen.name.clone(),
                }
            };
            roles.insert(other.name.clone(), role);
        }
    }
    let unknown = registrations
        .iter()
        .find(|r| r.targeted && r.usable && r.identity.is_none());
    if let Some(unknown) = unknown {
        for held in registrations.iter().filter(|r| !r.targeted && r.usable) {
            if roles.get(&held.name) == Some(&Role::Used) {
                let until = unknown.name.clone();
                roles.insert(held.name.clone(), Role::Held { until });
            }
        }
    }
    roles
}

/// What the copies through a registration say while it is held.
pub fn held_message(name: &str, until: &str) -> String {
    format!(
        "kept as they are: mimeo does not know yet which cluster RemoteCluster {until} is, and if it \
         is the one RemoteCluster {name} names, these copies are wanted through it"
    )
}

/// What the copies a rule reaches through `name` say when `first` is used for that cluster.
pub fn duplicate_message(name: &str, first: &str) -> String {
    format!(
        "RemoteCluster {name} names the same cluster as RemoteCluster {first} (the uid of their \
         kube-system namespaces is the same), and this rule targets both: it writes and reads that \
         cluster through {first} alone, so that its copies through one are not taken for unwanted \
         ones through the other; give the rule one of the two"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration(name: &str, identity: Option<&str>, created: &str, targeted: bool) -> Registration {
        Registration {
            name: name.into(),
            identity: identity.map(Into::into),
            created: Some(created.into()),
            targeted,
            usable: true,
        }
    }

    const OLD: &str = "2026-01-01T00:00:00Z";
    const NEW: &str = "2026-01-01T00:00:01Z";

    #[test]
    fn registrations_of_different_clusters_or_unknown_ones_are_all_used() {
        let found = roles(&[
            registration("a", Some("uid-1"), OLD, true),
            registration("b", Some("uid-2"), NEW, true),
            registration("c", None, NEW, true),
            registration("d", Some(""), NEW, true),
        ]);
        assert!(found.values().all(|r| *r == Role::Used), "{found:?}");
    }

    #[test]
    fn two_targeted_registrations_of_one_cluster_use_the_oldest() {
        let found = roles(&[
            registration("z-old", Some("uid"), OLD, true),
            registration("a-new", Some("uid"), NEW, true),
        ]);
        assert_eq!(found["z-old"], Role::Used);
        assert_eq!(found["a-new"], Role::Duplicate { of: "z-old".into() });
        // Created in the same second: the first by name.
        let same = roles(&[
            registration("b", Some("uid"), OLD, true),
            registration("a", Some("uid"), OLD, true),
        ]);
        assert_eq!(same["a"], Role::Used);
        assert_eq!(same["b"], Role::Duplicate { of: "a".into() });
    }

    #[test]
    fn copies_through_a_registration_no_longer_targeted_are_the_targeted_ones() {
        // The rule moved from the older `a` to `b`, or `a` was deleted.
        let mut gone = registration("a", Some("uid"), OLD, false);
        let roles_now = roles(&[gone.clone(), registration("b", Some("uid"), NEW, true)]);
        assert_eq!(roles_now["b"], Role::Used);
        assert_eq!(roles_now["a"], Role::Folded { into: "b".into() });
        gone.usable = false;
        gone.created = None;
        let roles_now = roles(&[gone, registration("b", Some("uid"), NEW, true)]);
        assert_eq!(roles_now["a"], Role::Folded { into: "b".into() });
    }

    #[test]
    fn nothing_is_removed_through_a_registration_while_a_targeted_one_is_not_known() {
        let found = roles(&[
            registration("a", Some("uid"), OLD, false),
            registration("b", None, NEW, true),
        ]);
        assert_eq!(found["a"], Role::Held { until: "b".into() });
        assert_eq!(found["b"], Role::Used);
        // One that may not read kube-system is known to stand alone.
        let found = roles(&[
            registration("a", Some("uid"), OLD, false),
            registration("b", Some(""), NEW, true),
        ]);
        assert_eq!(found["a"], Role::Used);
    }

    #[test]
    fn with_no_targets_left_copies_are_cleaned_up_through_one_usable_registration() {
        let mut deleted = registration("a", Some("uid"), OLD, false);
        deleted.usable = false;
        let found = roles(&[deleted, registration("b", Some("uid"), NEW, false)]);
        assert_eq!(found["b"], Role::Used);
        assert_eq!(found["a"], Role::Folded { into: "b".into() });
    }
}
