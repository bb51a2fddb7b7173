//! The seal on a copy: proof that mimeo made it, for this rule, in this place.
//!
//! A copy's label and annotations name its rule, and anyone who can write an object can write
//! them too. Read as the truth, they let a tenant label its own Secret as another rule's copy and
//! have mimeo delete it as that rule's leftover, report it in that rule's Events, or wake that
//! rule again and again. So every copy also carries [`SEAL_ANNOTATION`]: an HMAC-SHA256, under a
//! key only mimeo holds (a Secret in its own namespace), over the rule and the copy's place
//! (group, kind, namespace, name; not the cluster, so a `RemoteCluster` renamed keeps its
//! copies). Without the key nobody can make one, and one taken
//! from another copy names another place. Only a sealed copy is a copy: mimeo deletes, replaces,
//! reports and wakes rules only for objects whose seal is right.
//!
//! Pure: the key is handed in; reading or creating it is the controller's.

use super::rule_key::RuleKey;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The annotation holding a copy's seal.
pub const SEAL_ANNOTATION: &str = "mimeo.dev/seal";
/// The seal's version, before its digest: a later scheme can live beside this one.
const VERSION: &str = "v1";
/// The least key length accepted: the HMAC's own block of security.
pub const KEY_BYTES: usize = 32;

/// The installation's seal key: the one copies are sealed with, and the retired ones whose seals
/// are still accepted, so that a key can be rotated without every copy looking forged (each is
/// sealed anew under the current key as it is next written).
#[derive(Clone)]
pub struct SealKey {
    current: Vec<u8>,
    retired: Vec<Vec<u8>>,
}

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(..)")
    }
}

/// A key that cannot seal.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a seal key needs at least {KEY_BYTES} bytes; this one has {0}")]
pub struct ShortKey(pub usize);

/// Where a copy is, as its seal names it.
#[derive(Clone, Copy, Debug)]
pub struct Place<'a> {
    /// The API group of its kind (`""` for the core group).
    pub group: &'a str,
    pub kind: &'a str,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
}

impl SealKey {
    pub fn new(bytes: Vec<u8>) -> Result<Self, ShortKey> {
        if bytes.len() < KEY_BYTES {
            return Err(ShortKey(bytes.len()));
        }
        Ok(SealKey {
            current: bytes,
            retired: Vec::new(),
        })
    }

    /// The key with `retired` keys beside it, whose seals are accepted but never made.
    pub fn with_retired(mut self, retired: Vec<Vec<u8>>) -> Result<Self, ShortKey> {
        if let Some(short) = retired.iter().find(|k| k.len() < KEY_BYTES) {
            return Err(ShortKey(short.len()));
        }
        self.retired = retired;
        Ok(self)
    }

    /// A new random key.
    pub fn generate() -> Result<Self, getrandom::Error> {
        let mut bytes = vec![0; KEY_BYTES];
        getrandom::fill(&mut bytes)?;
        Ok(SealKey {
            current: bytes,
            retired: Vec::new(),
        })
    }

    /// The key copies are sealed with.
    pub fn bytes(&self) -> &[u8] {
        &self.current
    }

    /// How many retired keys are accepted beside it.
    pub fn retired(&self) -> usize {
        self.retired.len()
    }

    fn mac(key: &[u8], rule: &RuleKey, place: &Place) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
        // Newline-separated: no Kubernetes name, kind or group holds one, so no two places
        // read alike.
        let text = format!(
            "mimeo.dev/seal/{VERSION}\n{rule}\n{}\n{}\n{}\n{}",
            place.group,
            place.kind,
            place.namespace.unwrap_or_default(),
            place.name
        );
        mac.update(text.as_bytes());
        mac
    }

    /// The seal of `rule`'s copy at `place`.
    pub fn seal(&self, rule: &RuleKey, place: &Place) -> String {
        seal_under(&self.current, rule, place)
    }

    /// The seals the retired keys gave `rule`'s copy at `place`: still the copy's, until it is
    /// next written.
    pub fn retired_seals(&self, rule: &RuleKey, place: &Place) -> Vec<String> {
        self.retired
            .iter()
            .map(|key| seal_under(key, rule, place))
            .collect()
    }

    /// Whether `seal` is `rule`'s at `place` under the current key or a retired one (compared in
    /// constant time).
    pub fn verifies(&self, seal: &str, rule: &RuleKey, place: &Place) -> bool {
        let Some(digest) = seal.strip_prefix(VERSION).and_then(|s| s.strip_prefix('.')) else {
            return false;
        };
        let Ok(bytes) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(digest) else {
            return false;
        };
        std::iter::once(&self.current)
            .chain(&self.retired)
            .any(|key| Self::mac(key, rule, place).verify_slice(&bytes).is_ok())
    }
}

fn seal_under(key: &[u8], rule: &RuleKey, place: &Place) -> String {
    let digest = SealKey::mac(key, rule, place).finalize().into_bytes();
    format!(
        "{VERSION}.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
    )
}

/// The group of an `apiVersion` (`kyverno.io/v1` → `kyverno.io`, `v1` → `""`).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// Whether two seals are the same, in constant time.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> SealKey {
        SealKey::new(vec![byte; KEY_BYTES]).unwrap()
    }

    fn place<'a>(namespace: &'a str, name: &'a str) -> Place<'a> {
        Place {
            group: "",
            kind: "Secret",
            namespace: Some(namespace),
            name,
        }
    }

    #[test]
    fn a_seal_names_one_rule_one_place_and_one_key() {
        let a = RuleKey::sync_rule("tenant-a", "creds");
        let here = place("tenant-c", "creds");
        let seal = key(1).seal(&a, &here);
        assert!(seal.starts_with("v1."), "{seal}");
        assert!(key(1).verifies(&seal, &a, &here));
        // Anything else named differently, and the seal no longer holds.
        let c = RuleKey::sync_rule("tenant-c", "creds");
        let elsewhere = [
            place("tenant-c", "other"),
            place("tenant-d", "creds"),
            Place {
                kind: "ConfigMap",
                ..here
            },
            Place {
                group: "kyverno.io",
                kind: "Policy",
                ..here
            },
        ];
        for other in &elsewhere {
            assert!(!key(1).verifies(&seal, &a, other), "{other:?}");
        }
        assert!(!key(1).verifies(&seal, &c, &here), "another rule");
        assert!(!key(2).verifies(&seal, &a, &here), "another key");
        for forged in ["", "v1.", "v1.AAAA", "v2.x", &seal[..seal.len() - 1], "v1.!!"] {
            assert!(!key(1).verifies(forged, &a, &here), "{forged}");
        }
        assert_eq!(key(1).seal(&a, &here), seal, "the same every time");
        assert!(same(&seal, &key(1).seal(&a, &here)));
        assert!(!same(&seal, &key(2).seal(&a, &here)));
    }

    /// A rotated key: the new one seals, the retired one's seals are still accepted (and can be
    /// told apart, so that a copy carrying one is sealed anew), a key never given is not.
    #[test]
    fn a_retired_key_verifies_and_never_seals() {
        let a = RuleKey::sync_rule("tenant-a", "creds");
        let here = place("tenant-c", "creds");
        let old_seal = key(1).seal(&a, &here);
        let rotated = key(2).with_retired(vec![vec![1; KEY_BYTES]]).unwrap();
        assert_eq!(rotated.retired(), 1);
        assert_eq!(rotated.seal(&a, &here), key(2).seal(&a, &here));
        assert!(rotated.verifies(&old_seal, &a, &here));
        assert!(rotated.verifies(&rotated.seal(&a, &here), &a, &here));
        assert_eq!(rotated.retired_seals(&a, &here), std::slice::from_ref(&old_seal));
        assert!(!rotated.verifies(&old_seal, &a, &place("tenant-c", "other")));
        assert!(!rotated.verifies(&key(3).seal(&a, &here), &a, &here));
        assert!(
            !key(2).verifies(&old_seal, &a, &here),
            "dropped, it is not accepted"
        );
        assert_eq!(key(2).with_retired(vec![vec![1; 8]]).unwrap_err(), ShortKey(8));
    }

    #[test]
    fn keys_are_long_and_random() {
        assert_eq!(SealKey::new(vec![0; 31]).unwrap_err(), ShortKey(31));
        let (a, b) = (SealKey::generate().unwrap(), SealKey::generate().unwrap());
        assert_eq!(a.bytes().len(), KEY_BYTES);
        assert_ne!(a.bytes(), b.bytes());
        assert_eq!(format!("{a:?}"), "SealKey(..)", "never printed");
    }

    #[test]
    fn groups() {
        assert_eq!(group_of("v1"), "");
        assert_eq!(group_of("kyverno.io/v1"), "kyverno.io");
    }
}
