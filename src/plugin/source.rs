//! Where a plugin comes from, as a rule's `transforms[].plugin` names it.

use super::oci::OciReference;
use std::path::{Component, Path, PathBuf};

/// A parsed plugin reference.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PluginSource {
    /// `file://<path>`: a file under the controller's plugin directory.
    File(PathBuf),
    /// `configmap://<namespace>/<name>/<key>`: a key of a ConfigMap's `binaryData`.
    ConfigMap {
        namespace: String,
        name: String,
        key: String,
    },
    /// `oci://<registry>/<repository>:<tag>` or `...@sha256:<digest>`: a Wasm artifact in an
    /// OCI registry.
    Oci(OciReference),
}

/// Parses a reference. `rule_namespace` is the namespace of a `SyncRule` (which may read plugins
/// only from ConfigMaps of its own namespace), `None` for a `ClusterSyncRule`.
pub fn parse(reference: &str, rule_namespace: Option<&str>) -> Result<PluginSource, String> {
    if let Some(path) = reference.strip_prefix("file://") {
        let path = Path::new(path);
        let escapes = path.is_absolute()
            || path.components().any(|c| !matches!(c, Component::Normal(_)))
            || path.as_os_str().is_empty();
        if escapes {
            return Err(format!(
                "{reference}: a file plugin is named by a relative path inside the controller's plugin \
                 directory (no leading /, no ..)"
            ));
        }
        return Ok(PluginSource::File(path.to_owned()));
    }
    if let Some(rest) = reference.strip_prefix("configmap://") {
        let parts: Vec<&str> = rest.split('/').collect();
        let [namespace, name, key] = parts.as_slice() else {
            return Err(format!("{reference}: write configmap://<namespace>/<name>/<key>"));
        };
        if namespace.is_empty() || name.is_empty() || key.is_empty() {
            return Err(format!("{reference}: write configmap://<namespace>/<name>/<key>"));
        }
        if let Some(own) = rule_namespace.filter(|own| own != namespace) {
            return Err(format!(
                "{reference}: a SyncRule may load plugins only from ConfigMaps of its own namespace ({own})"
            ));
        }
        return Ok(PluginSource::ConfigMap {
            namespace: namespace.to_string(),
            name: name.to_string(),
            key: key.to_string(),
        });
    }
    if reference.starts_with("oci://") {
        return reference
            .parse::<OciReference>()
            .map(PluginSource::Oci)
            .map_err(|e| e.to_string());
    }
    Err(format!(
        "{reference}: a plugin reference starts with file://, configmap:// or oci://"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references() {
        assert_eq!(
            parse("file://filter-keys.wasm", None),
            Ok(PluginSource::File("filter-keys.wasm".into()))
        );
        assert_eq!(
            parse("file://team/x.wasm", Some("a")),
            Ok(PluginSource::File("team/x.wasm".into()))
        );
        assert_eq!(
            parse("configmap://platform/plugins/filter.wasm", Some("platform")),
            Ok(PluginSource::ConfigMap {
                namespace: "platform".into(),
                name: "plugins".into(),
                key: "filter.wasm".into()
            })
        );
        assert!(
            parse("configmap://other/plugins/f.wasm", None).is_ok(),
            "cluster rules may read any namespace"
        );
        let Ok(PluginSource::Oci(oci)) = parse("oci://registry.example/team/p:1.0", Some("a")) else {
            panic!("an OCI reference")
        };
        assert_eq!(
            (oci.registry.as_str(), oci.repository.as_str(), oci.tag.as_deref()),
            ("registry.example", "team/p", Some("1.0"))
        );
        let refused = [
            ("file:///etc/passwd", "relative path"),
            ("file://../x.wasm", "relative path"),
            ("file://a/../../x.wasm", "relative path"),
            ("file://", "relative path"),
            ("configmap://other/plugins/f.wasm", "own namespace"),
            (
                "configmap://platform/plugins",
                "configmap://<namespace>/<name>/<key>",
            ),
            ("oci://registry.example/p", "invalid OCI reference"),
            ("https://example/p.wasm", "starts with file://"),
        ];
        for (reference, why) in refused {
            let err = parse(reference, Some("platform")).unwrap_err();
            assert!(err.contains(why), "{reference}: {err}");
        }
    }
}
