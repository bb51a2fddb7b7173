//! mimeo copies Secrets, ConfigMaps and other Kubernetes objects between namespaces and clusters,
//! driven by small custom resources.
//!
//! The crate map, one room per question:
#![deny(unsafe_code)]

/// The custom resources users write; the CRDs are generated from them.
pub mod api;
/// The command line's flags and arguments (clap), parsed by the binary (`src/bin/mimeo/`).
pub mod cli;
/// Clients of the cluster mimeo runs in and of `RemoteCluster`s: requests counted, bounded and
/// fenced by the shards held, and the RBAC a `RemoteCluster`'s identity needs in its cluster.
pub mod clusters;
/// The commands besides `run`, each whole: `diff`, `status`, `migrate`, `reseal`.
pub mod cmd;
/// The configuration object over the flags: what it changes, at once or at the next start.
pub mod config;
/// The running controller: shared watches, the rule pipeline, the only door for writes, status.
pub mod controller;
/// Error text for people, with the chain of causes on one line.
pub mod error_text;
/// Cluster inventories (openMCP, Cluster API, ClusterProfile) translated into `RemoteCluster`s.
pub mod inventory;
/// Locking a mutex whatever happened to its last holder.
pub(crate) mod locks;
/// Prometheus metrics: requests per apiserver, copies, plugins, shards, the process.
pub mod metrics;
/// The WebAssembly plugin host (wasmtime) and the OCI registry client; nothing of wasmtime
/// leaves it.
pub mod plugin;
/// How replicas share the work: alone, a leader's Lease, or shards of the rules.
pub mod replicas;
/// Giving a map's room back after a burst.
pub(crate) mod room;
/// `/metrics`, `/healthz` and `/readyz`.
pub mod server;
/// The pure decisions: desired copies, consent, ownership and seals, what to write. No I/O.
pub mod sync;
/// Logging: JSON lines or a pretty format, filtered by level.
pub mod telemetry;
