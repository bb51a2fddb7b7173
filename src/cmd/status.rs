//! `mimeo status`: a rule, its clusters, namespaces and copies as a tree, each copy's state,
//! since when and why, read with the reader's own kubeconfig.

pub mod read;
pub mod render;
pub mod tree;
