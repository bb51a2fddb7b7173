//! Why a rule cannot be acted on: what every check of a rule returns, and its status shows.

/// Why a rule cannot be acted on, as a condition reason and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleProblem {
    pub reason: &'static str,
    pub message: String,
}
