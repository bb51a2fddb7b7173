//! Transform plugins: the Wasm host's limits, rules that run chains, OCI artifacts (the CLI and
//! rules pulling them from a real registry) and the compiled-module cache.

#[path = "../harness/mod.rs"]
mod harness;

mod cache;
mod host;
mod oci_cli;
mod oci_rules;
mod rules;
