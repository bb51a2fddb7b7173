//! Commands besides `run`, each whole in its own module.

pub mod reseal;
