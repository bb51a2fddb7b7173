//! `MimeoConfig`: the installation's settings as a cluster-scoped object, the way openMCP's
//! providers take theirs (named after `--provider-name`) instead of command-line flags.

// kube-derive's repeated `printcolumn(...)` arguments look like duplicated attributes to clippy.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The settings of a mimeo installation. mimeo reads the one named after its `--provider-name`;
/// each field set here wins over the flag of the same meaning, and each field left out keeps the
/// flag's value. `allowedKinds` and `nextToKinds` take effect at once; a change of any other field
/// takes effect at the next start, and `status` says so (`RestartRequired`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "mimeo.dev",
    version = "v1alpha1",
    kind = "MimeoConfig",
    doc = "The settings of a running mimeo over its flags, as the openmcp-operator hands a platform service its configuration: the kinds it copies and follows at once, the rest at its next start.",
    status = "MimeoConfigStatus",
    shortname = "mcfg",
    category = "mimeo",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Restart",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"RestartRequired\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct MimeoConfigSpec {
    /// The kinds rules may sync, each `Kind` for the core group or `Kind.group` (`Secret`,
    /// `Policy.kyverno.io`); as `--allow-kind`. Rules for other kinds get `KindNotAllowed`.
    /// Takes effect at once: every rule is looked at again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("items" = {"type": "string", "pattern": "^[A-Z][A-Za-z0-9]*(\\.[a-z0-9]([a-z0-9.-]*[a-z0-9])?)?$"}))]
    pub allowed_kinds: Option<Vec<String>>,
    /// The namespaced kinds `targets[].nextTo` may follow, each `Kind.group`
    /// (`Cluster.clusters.openmcp.cloud`); as `--next-to-kinds`. Takes effect at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("items" = {"type": "string", "pattern": "^[A-Z][A-Za-z0-9]*\\.[a-z0-9]([a-z0-9.-]*[a-z0-9])?$"}))]
    pub next_to_kinds: Option<Vec<String>>,
    /// The limits of transform plugins; each as its `--plugin-...` flag. Takes effect at the next
    /// start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugins: Option<PluginSettings>,
    /// Where `oci://` plugins may come from; as the `--plugin-...` registry flags. Takes effect
    /// at the next start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registries: Option<RegistrySettings>,
}

/// The limits of transform plugins. A field left out keeps its flag's value.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginSettings {
    /// How long one plugin call may run, in milliseconds (`--plugin-deadline-ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub deadline_ms: Option<u64>,
    /// How much memory one call may use, in MiB (`--plugin-memory-mib`).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "memoryMiB")]
    #[schemars(range(min = 1))]
    pub memory_mib: Option<u64>,
    /// How large a plugin's output may be, in KiB (`--plugin-output-kib`).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "outputKiB")]
    #[schemars(range(min = 1))]
    pub output_kib: Option<u64>,
    /// How many plugin calls may run at once (`--plugin-concurrency`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub concurrency: Option<u32>,
    /// How long compiling one plugin may take, in seconds (`--plugin-compile-timeout-secs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub compile_timeout_secs: Option<u64>,
    /// How much memory compiling one plugin may use, in MiB (`--plugin-compile-memory-mib`).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "compileMemoryMiB")]
    #[schemars(range(min = 64))]
    pub compile_memory_mib: Option<u64>,
}

/// Where `oci://` plugins may come from. A field left out keeps its flag's value.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistrySettings {
    /// The registries (`host[:port]`) plugins may come from (`--plugin-allowed-registry`); an
    /// empty list allows any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed: Option<Vec<String>>,
    /// Refuse `oci://` plugins named by tag: each must be pinned by digest
    /// (`--plugin-require-digest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_digest: Option<bool>,
}

/// What mimeo made of its configuration object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MimeoConfigStatus {
    /// The generation of the spec this status was written for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: whether the settings are in effect (`False` with why when they are not, and then
    /// mimeo runs on the last good ones). `RestartRequired`: whether a setting changed that takes
    /// effect only at the next start, and which.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The kinds rules may sync now, as mimeo applies them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_kinds: Vec<String>,
    /// The kinds `nextTo` may follow now, as mimeo applies them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub next_to_kinds: Vec<String>,
}
