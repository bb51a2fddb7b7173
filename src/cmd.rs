//! Commands besides `run`, each whole in its own module.

pub mod diff;
pub mod init;
pub mod migrate;
pub mod plugin_fixtures;
pub mod plugin_new;
pub mod reseal;
pub mod rule_actions;
pub mod status;
