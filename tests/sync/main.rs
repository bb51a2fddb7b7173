//! The rules at work on a real apiserver: copying, rotation, drift, cleanup, inputs, `nextTo`,
//! ownership and the seal key, remote clusters and their inventories, and the `diff` and `status`
//! commands. One test binary so that wasmtime and the harness are linked once.

#[path = "../harness/mod.rs"]
mod harness;
#[path = "../../benches/support/processes.rs"]
mod processes;

mod api_validation;
mod copy_names;
mod diff;
mod fenced_writes;
mod flap_guard;
mod inputs;
mod inventories;
mod kinds;
mod kstatus;
mod namespace_pattern;
mod next_to;
mod operation;
mod ownership;
mod remote_clusters;
mod remote_rbac;
mod remote_sync;
mod status_cmd;
