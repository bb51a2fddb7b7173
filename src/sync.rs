//! The pure core: from a rule, its sources, the namespaces and the live copies, decide what every
//! copy should look like and what to do about it. No I/O happens here, so all of it is tested
//! with plain values; the controller gathers the inputs and carries out the decisions.
pub mod consent;
pub mod copy_name;
pub mod decide;
pub mod desired;
pub mod filter;
pub mod flap_guard;
pub mod for_each;
pub mod hash;
pub mod inputs;
pub mod kinds;
pub mod kstatus;
pub mod live;
pub mod next_to;
pub mod object_selector;
pub mod operation;
pub mod ownership;
pub mod plan;
pub mod protected;
pub mod registrations;
pub mod rule_key;
pub mod rule_problem;
pub mod scope;
pub mod seal;
pub mod secret_types;
pub mod shards;
pub mod targets;
pub mod validate;
