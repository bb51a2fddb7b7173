//! The seal key's Secret: read at start-up, or created with a new random key the first time.
//!
//! All replicas and every restart must seal alike, so the key lives in the cluster, in a Secret
//! of mimeo's own namespace that no tenant can read. Losing it makes every copy mimeo cannot
//! find in its rules' inventories look forged: it is never replaced once it exists, and a Secret
//! of that name that does not hold a key stops mimeo rather than being overwritten.
//!
//! An operator rotates it by hand (docs/operator.md): beside `data.key`, each `data.retired*`
//! holds an older key whose seals are still accepted; copies are sealed anew under `key` as they
//! are next written, and a retired key is dropped once none is left carrying its seals.

use super::error::Error;
use crate::sync::seal::{KEY_BYTES, SealKey};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::{Client, core::ObjectMeta};

/// The Secret's name unless `--seal-key-secret` says otherwise.
pub const DEFAULT_NAME: &str = "mimeo-seal-key";
/// The key in the Secret's data.
pub const DATA_KEY: &str = "key";
/// The start of each data key holding a retired key (`retired`, `retired-2026-12`, ...).
pub const RETIRED_PREFIX: &str = "retired";

/// The key in `namespace/name`, created there when there is no such Secret.
pub async fn load_or_create(client: &Client, namespace: &str, name: &str) -> Result<SealKey, Error> {
    let api = Api::<Secret>::namespaced(client.clone(), namespace);
    let problem = |what: String| Error::SealKey(format!("Secret {namespace}/{name}: {what}"));
    if let Some(secret) = api
        .get_opt(name)
        .await
        .map_err(|e| problem(format!("reading it: {e}")))?
    {
        let key = key_of(&secret).map_err(problem)?;
        if key.retired() > 0 {
            tracing::info!(secret = %format!("{namespace}/{name}"), retired = key.retired(), "the seal key has retired keys beside it, whose seals are accepted until each copy is written again");
        }
        return Ok(key);
    }
    let key = SealKey::generate().map_err(|e| problem(format!("making a key: {e}")))?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            annotations: Some(
                [(
                    "mimeo.dev/purpose".to_owned(),
                    "the key mimeo seals its copies with: keep it, and keep it secret".to_owned(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some([(DATA_KEY.to_owned(), ByteString(key.bytes().to_vec()))].into()),
        ..Default::default()
    };
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => {
            tracing::info!(secret = %format!("{namespace}/{name}"), "created the seal key");
            Ok(key)
        }
        // Another replica made it first: use that one.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let secret = api
                .get(name)
                .await
                .map_err(|e| problem(format!("reading it: {e}")))?;
            key_of(&secret).map_err(problem)
        }
        Err(e) => Err(problem(format!(
            "creating it: {e} (mimeo needs get and create on Secrets in its own namespace, or a \
             Secret made beforehand holding {KEY_BYTES} random bytes under data.{DATA_KEY})"
        ))),
    }
}

/// The key in `namespace/name`, read and never created: what a command that seals needs, which
/// must seal with the key the controller uses.
pub async fn load(client: &Client, namespace: &str, name: &str) -> Result<SealKey, Error> {
    let problem = |what: String| Error::SealKey(format!("Secret {namespace}/{name}: {what}"));
    match Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
    {
        Ok(Some(secret)) => key_of(&secret).map_err(problem),
        Ok(None) => Err(problem(
            "no such Secret: mimeo makes it when it first starts (is --seal-key-secret the controller's?)"
                .into(),
        )),
        Err(e) => Err(problem(format!(
            "reading it: {e} (it is readable only to whoever administers mimeo)"
        ))),
    }
}

fn key_of(secret: &Secret) -> Result<SealKey, String> {
    let data = secret.data.as_ref();
    let bytes = data
        .and_then(|d| d.get(DATA_KEY))
        .ok_or_else(|| format!("it holds no data.{DATA_KEY}; mimeo leaves a Secret it did not make alone"))?;
    let retired: Vec<(&String, &ByteString)> = data
        .into_iter()
        .flatten()
        .filter(|(name, _)| name.starts_with(RETIRED_PREFIX))
        .collect();
    let key = SealKey::new(bytes.0.clone()).map_err(|e| e.to_string())?;
    if let Some((name, _)) = retired.iter().find(|(_, k)| k.0.len() < KEY_BYTES) {
        return Err(format!(
            "data.{name} is no key: a retired key, like data.{DATA_KEY}, has at least {KEY_BYTES} bytes"
        ));
    }
    key.with_retired(retired.into_iter().map(|(_, k)| k.0.clone()).collect())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn holding(data: Option<BTreeMap<String, ByteString>>) -> Secret {
        Secret {
            data,
            ..Default::default()
        }
    }

    #[test]
    fn a_secret_mimeo_did_not_make_is_never_taken_for_a_key() {
        let key = |bytes: Vec<u8>| Some([(DATA_KEY.to_owned(), ByteString(bytes))].into());
        assert_eq!(key_of(&holding(key(vec![9; 32]))).unwrap().bytes(), &[9; 32]);
        assert_eq!(
            key_of(&holding(key(vec![9; 8]))).unwrap_err(),
            "a seal key needs at least 32 bytes; this one has 8"
        );
        let other = Some([("password".to_owned(), ByteString(vec![1; 40]))].into());
        for secret in [holding(None), holding(other)] {
            assert!(key_of(&secret).unwrap_err().starts_with("it holds no data.key"));
        }
    }

    #[test]
    fn retired_keys_are_read_beside_the_key() {
        let data = |entries: &[(&str, usize)]| {
            Some(
                entries
                    .iter()
                    .map(|(name, len)| (name.to_string(), ByteString(vec![*len as u8; *len])))
                    .collect(),
            )
        };
        let key = key_of(&holding(data(&[
            ("key", 32),
            ("retired", 33),
            ("retired-2026-12", 40),
            ("note", 3),
        ])))
        .unwrap();
        assert_eq!((key.bytes(), key.retired()), (&[32u8; 32][..], 2));
        assert_eq!(
            key_of(&holding(data(&[("key", 32), ("retired-x", 8)]))).unwrap_err(),
            "data.retired-x is no key: a retired key, like data.key, has at least 32 bytes"
        );
    }
}
