//! What a fetched manifest must look like to be a plugin: pure checks on its bytes.

use super::address::shorten;
use super::error::OciError;
use super::reference::is_digest;
use serde::Deserialize;
use std::collections::BTreeMap;

/// The OCI image manifest, which the Wasm artifact layout uses.
pub const MANIFEST_MEDIA_TYPE: &str = oci_wasm::WASM_MANIFEST_MEDIA_TYPE;
/// Docker's schema 2 manifest: older tools push Wasm in it; its layer is checked all the same.
const DOCKER_MANIFEST_MEDIA_TYPE: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// An index: asked for only so that a multi-platform image is refused by name, not as "not found".
const INDEX_MEDIA_TYPES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];
/// The config of the CNCF Wasm artifact layout, which mimeo pushes.
pub const CONFIG_MEDIA_TYPE: &str = oci_wasm::WASM_MANIFEST_CONFIG_MEDIA_TYPE;
/// The layer of the CNCF Wasm artifact layout, which mimeo pushes.
pub const LAYER_MEDIA_TYPE: &str = oci_wasm::WASM_LAYER_MEDIA_TYPE;
/// The layer media types a plugin may come in: the CNCF layout's, and the one Kubewarden (and
/// wasm-to-oci before it) push.
pub const LAYER_MEDIA_TYPES: &[&str] = &[LAYER_MEDIA_TYPE, "application/vnd.wasm.content.layer.v1+wasm"];

/// What the manifest request accepts.
pub(super) fn accepted_manifest_types() -> Vec<&'static str> {
    let mut types = vec![MANIFEST_MEDIA_TYPE, DOCKER_MANIFEST_MEDIA_TYPE];
    types.extend_from_slice(INDEX_MEDIA_TYPES);
    types
}

/// Whether a layer of this media type holds a plugin component.
pub fn accepts_layer_media_type(media_type: &str) -> bool {
    LAYER_MEDIA_TYPES.contains(&media_type)
}

/// The one layer a plugin manifest points at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Layer {
    pub digest: String,
    pub size: u64,
    pub media_type: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    schema_version: u32,
    media_type: Option<String>,
    #[serde(default)]
    layers: Vec<Descriptor>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: String,
    digest: String,
    size: i64,
}

/// Checks a manifest's bytes: an image manifest (not an index) with exactly one layer of a Wasm
/// media type, no larger than `limit`, named by a sha256 digest (it becomes a file name in the
/// cache). The config is not checked: oras, wkg and Kubewarden each write a different one, and
/// only the layer is run.
pub(super) fn check_manifest(
    body: &[u8],
    reference: &str,
    limit: u64,
) -> Result<(Layer, BTreeMap<String, String>), OciError> {
    let invalid = |why: String| OciError::Registry(format!("{reference}: the manifest {why}"));
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| invalid(format!("is not JSON{}", where_wrong(&e))))?;
    let media_type = value
        .get("mediaType")
        .and_then(|m| m.as_str())
        .unwrap_or_default();
    if INDEX_MEDIA_TYPES.contains(&media_type) || value.get("manifests").is_some() {
        return Err(OciError::WrongMediaType {
            reference: reference.to_owned(),
            found: if media_type.is_empty() {
                INDEX_MEDIA_TYPES[0].to_owned()
            } else {
                shorten(media_type)
            },
        });
    }
    let manifest: Manifest = serde_json::from_value(value)
        .map_err(|_| invalid("is not an image manifest: a field is missing or of the wrong type".into()))?;
    if manifest.schema_version != 2 {
        return Err(invalid(format!("has schemaVersion {}", manifest.schema_version)));
    }
    if let Some(found) = manifest
        .media_type
        .filter(|m| m != MANIFEST_MEDIA_TYPE && m != DOCKER_MANIFEST_MEDIA_TYPE)
    {
        return Err(OciError::WrongMediaType {
            reference: reference.to_owned(),
            found: shorten(&found),
        });
    }
    let layer = match manifest.layers.as_slice() {
        [layer] if accepts_layer_media_type(&layer.media_type) => layer,
        layers => {
            let found: Vec<String> = layers.iter().map(|l| shorten(&l.media_type)).collect();
            return Err(OciError::WrongMediaType {
                reference: reference.to_owned(),
                found: if found.is_empty() {
                    "no layers".to_owned()
                } else {
                    found.join(", ")
                },
            });
        }
    };
    if !is_digest(&layer.digest) {
        return Err(invalid(format!(
            "names its layer by {:?}; mimeo accepts sha256 digests only",
            shorten(&layer.digest)
        )));
    }
    let size = u64::try_from(layer.size).map_err(|_| invalid("gives a negative layer size".into()))?;
    if size > limit {
        return Err(OciError::TooLarge { size, limit });
    }
    Ok((
        Layer {
            digest: layer.digest.clone(),
            size,
            media_type: layer.media_type.clone(),
        },
        manifest.annotations,
    ))
}

/// Where a manifest stopped being JSON, never what it held there: serde's own messages quote the
/// offending text, which is the registry's to choose.
fn where_wrong(error: &serde_json::Error) -> String {
    match error.line() {
        0 => String::new(),
        line => format!(" (line {line}, column {})", error.column()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn manifest(media_type: Option<&str>, layers: &[(&str, i64)]) -> Vec<u8> {
        let mut m = json!({
            "schemaVersion": 2,
            "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": D, "size": 2},
            "layers": layers.iter().map(|(t, size)| json!({"mediaType": t, "digest": D, "size": size})).collect::<Vec<_>>(),
            "annotations": {"dev.mimeo.interface": "mimeo:transform@0.1.0"},
        });
        if let Some(t) = media_type {
            m["mediaType"] = t.into();
        }
        serde_json::to_vec(&m).unwrap()
    }

    #[test]
    fn accepts_both_wasm_layer_media_types() {
        for layer in ["application/wasm", "application/vnd.wasm.content.layer.v1+wasm"] {
            for media_type in [Some(MANIFEST_MEDIA_TYPE), None] {
                let (got, annotations) =
                    check_manifest(&manifest(media_type, &[(layer, 10)]), "r", 100).unwrap();
                assert_eq!(got.media_type, layer);
                assert_eq!(got.size, 10);
                assert_eq!(got.digest, D);
                assert_eq!(annotations["dev.mimeo.interface"], "mimeo:transform@0.1.0");
            }
        }
    }

    #[test]
    fn refuses_what_is_not_a_plugin() {
        let image = manifest(
            Some(MANIFEST_MEDIA_TYPE),
            &[("application/vnd.oci.image.layer.v1.tar+gzip", 10)],
        );
        let err = check_manifest(&image, "oci://r/p:1", 100).unwrap_err();
        assert_eq!(err.reason(), "WrongMediaType");
        assert!(err.to_string().contains("tar+gzip"), "{err}");

        let two = manifest(None, &[("application/wasm", 1), ("application/wasm", 1)]);
        assert_eq!(
            check_manifest(&two, "r", 100).unwrap_err().reason(),
            "WrongMediaType"
        );
        let none = manifest(None, &[]);
        assert!(
            check_manifest(&none, "r", 100)
                .unwrap_err()
                .to_string()
                .contains("no layers")
        );

        let index = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": []
        }))
        .unwrap();
        let err = check_manifest(&index, "r", 100).unwrap_err();
        assert_eq!(err.reason(), "WrongMediaType");
        assert!(err.to_string().contains("index"), "{err}");

        let large = manifest(None, &[("application/wasm", 101)]);
        assert!(matches!(
            check_manifest(&large, "r", 100),
            Err(OciError::TooLarge {
                size: 101,
                limit: 100
            })
        ));

        let traversal = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "layers": [{"mediaType": "application/wasm", "digest": "sha256:../../etc", "size": 1}],
        }))
        .unwrap();
        assert!(
            check_manifest(&traversal, "r", 100)
                .unwrap_err()
                .to_string()
                .contains("sha256 digests only")
        );
        assert_eq!(
            check_manifest(b"{", "r", 100).unwrap_err().reason(),
            "RegistryError"
        );
    }

    #[test]
    fn errors_do_not_quote_the_manifest() {
        for body in [
            r#"{"schemaVersion": "MARKER", "layers": []}"#,
            r#"{"schemaVersion": 2, "layers": [{"mediaType": 7, "digest": "MARKER", "size": 1}]}"#,
            r#"{"schemaVersion": 2, MARKER}"#,
            "MARKER",
        ] {
            let err = check_manifest(body.as_bytes(), "r", 100).unwrap_err();
            assert_eq!(err.reason(), "RegistryError", "{body}");
            assert!(!err.to_string().contains("MARKER"), "{err}");
        }
        let long = format!("application/{}", "x".repeat(1000));
        let err = check_manifest(&manifest(None, &[(&long, 1)]), "r", 100).unwrap_err();
        assert!(err.to_string().len() < 300, "{err}");
    }
}
