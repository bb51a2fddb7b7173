//! mimeo copies Secrets, ConfigMaps and other Kubernetes objects between namespaces and clusters,
//! driven by small custom resources.
//!
//! The crate is laid out as a pipeline: `api` holds the custom resource types users write, `cli`
//! the command line. The controller, the sync logic and the plugin host arrive in their own
//! modules.
#![deny(unsafe_code)]

pub mod api;
pub mod cli;
