//! `mimeo migrate`: rules written from the peers' annotations, resources and HelmDeployers, and the
//! cut-over that leaves no copy lost.

#[path = "../harness/mod.rs"]
mod harness;

mod cutover;
mod helmdeployer;
mod resource_replicator;
mod rules;
