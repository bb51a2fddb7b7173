//! `openmcp.cloud/operation`: the annotation every openMCP controller honours on what it
//! reconciles, honoured on mimeo's rules too, so that a platform's runbooks (and openMCP's own
//! tools) stop or nudge mimeo the way they stop or nudge the rest of the platform.
//!
//! - `ignore`: mimeo leaves the rule alone: nothing written, nothing removed, not even when the
//!   rule is deleted (its copies are then left where they are);
//! - `reconcile`: one pass now, after which mimeo removes the annotation, as openMCP's
//!   controllers do.
//!
//! Any other value is no operation, as it is for openMCP.

use std::collections::BTreeMap;

pub const OPERATION_ANNOTATION: &str = "openmcp.cloud/operation";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Ignore,
    Reconcile,
}

/// The operation a rule's annotations ask for, if any.
pub fn requested(annotations: Option<&BTreeMap<String, String>>) -> Option<Operation> {
    match annotations?.get(OPERATION_ANNOTATION)?.as_str() {
        "ignore" => Some(Operation::Ignore),
        "reconcile" => Some(Operation::Reconcile),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_two_values_openmcp_knows_are_operations() {
        let with = |value: &str| -> BTreeMap<String, String> {
            [(OPERATION_ANNOTATION.to_owned(), value.to_owned())].into()
        };
        assert_eq!(requested(Some(&with("ignore"))), Some(Operation::Ignore));
        assert_eq!(requested(Some(&with("reconcile"))), Some(Operation::Reconcile));
        for other in ["Ignore", "", "suspend", " ignore"] {
            assert_eq!(requested(Some(&with(other))), None, "{other:?}");
        }
        assert_eq!(requested(Some(&BTreeMap::new())), None);
        assert_eq!(requested(None), None);
    }
}
