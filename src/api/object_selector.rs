//! `ObjectSelector`: chooses objects the way openMCP's cluster selectors do, by identity, by
//! labels and by purposes, so that selectors copied from openMCP's own configuration mean here
//! what they mean there.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// openMCP's `IdentityLabelPurposeSelector`: a set `matchIdentities` alone decides; otherwise the
/// label part and the purpose part must both match. Empty, it selects every object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectSelector {
    /// Labels the object must carry, as in a `LabelSelector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
    /// Label requirements, as in a `LabelSelector` (`In`, `NotIn`, `Exists`, `DoesNotExist`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_expressions: Option<Vec<LabelSelectorRequirement>>,
    /// Requirements on the object's `spec.purposes` (openMCP `Cluster`s list them there), all
    /// of which must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub match_purposes: Vec<PurposeRequirement>,
    /// Exactly these objects. Unset: any object; an empty list: none. When set, the labels and
    /// purposes are not looked at (openMCP's rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1000))]
    pub match_identities: Option<Vec<ObjectIdentity>>,
}

/// One requirement on a list of purposes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct PurposeRequirement {
    pub operator: PurposeOperator,
    /// The purposes compared, such as `workload` or `mcp`.
    #[serde(default)]
    #[schemars(length(max = 64))]
    pub values: Vec<String>,
}

/// How a [`PurposeRequirement`]'s values are compared with an object's purposes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PurposeOperator {
    /// The object has every one of the values.
    ContainsAll,
    /// The object has at least one of the values.
    ContainsAny,
    /// The object has none of the values.
    ContainsNone,
    /// The object's purposes are the values, in any order, duplicates ignored.
    Equals,
}

/// An object by namespace and name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
pub struct ObjectIdentity {
    /// The object's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The object's namespace.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
}
