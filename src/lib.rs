//! mimeo copies Secrets, ConfigMaps and other Kubernetes objects between namespaces and clusters,
//! driven by small custom resources.
//!
//! The crate is laid out as a pipeline: `api` holds the custom resource types users write, `sync`
//! the pure decisions (desired copies, consent, conflicts, digests), `controller` the watches,
//! reconcile loop, writes and status, and `cli`, `telemetry`, `metrics` and `server` the edges.
#![deny(unsafe_code)]

pub mod api;
pub mod cli;
pub mod clusters;
pub mod cmd;
pub mod controller;
pub mod error_text;
pub mod inventory;
pub mod leader;
pub(crate) mod locks;
pub mod metrics;
pub mod plugin;
pub mod remote_rbac;
pub mod server;
pub mod shards;
pub mod sync;
pub mod telemetry;
