//! Cluster inventories: what a `ClusterInventory` makes of a platform's own list of clusters.
//! Pure translation lives here (which entries are chosen, the `RemoteCluster` each becomes,
//! the `AccessRequest` mimeo asks openMCP for, when a Cluster API cluster is up, what a
//! `ClusterProfile` says about reaching its cluster); `provider_file` also runs the exec
//! plugins of the installation's KEP-5339 provider file. The controller that watches the
//! inventories and writes is `controller::inventory`.

pub mod cluster_api;
pub mod cluster_profile;
pub mod entry;
pub mod openmcp;
pub mod provider_file;

use std::path::PathBuf;
use std::time::Duration;

/// What the installation configures for inventories.
#[derive(Clone, Debug)]
pub struct InventorySettings {
    /// The KEP-5339 provider file (`--cluster-profile-providers`).
    pub providers_file: Option<PathBuf>,
    /// How long a provider's exec plugin may run.
    pub exec_timeout: Duration,
    /// mimeo's own namespace, where the credentials of `ClusterProfile`s are kept.
    pub namespace: String,
}

impl Default for InventorySettings {
    fn default() -> Self {
        InventorySettings {
            providers_file: None,
            exec_timeout: Duration::from_secs(30),
            namespace: "default".into(),
        }
    }
}
