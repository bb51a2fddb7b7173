//! mimeo as it is installed and run: the binary and its flags, the Helm chart, leader election,
//! shards and what it exports to observe it.

#[path = "../../benches/support/fault_rounds.rs"]
mod fault_rounds;
#[path = "../harness/mod.rs"]
mod harness;
#[path = "../../benches/support/late_writes.rs"]
mod late_writes;
#[path = "../../benches/support/processes.rs"]
mod processes;

mod binary;
mod configuration;
mod helm;
mod leader_election;
mod observability;
mod openmcp_operator;
mod partitions;
mod platform;
mod shards;
