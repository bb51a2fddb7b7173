//! A hostile tenant, each with a real identity and real RBAC: what a rule, a plugin or a registry
//! it controls can make mimeo do with mimeo's rights.

#[path = "../harness/mod.rs"]
mod harness;

mod attacks;
mod compile;
mod registry;
