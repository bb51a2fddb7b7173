//! Error text for people: an error with the chain of its causes on one line.

/// An error with the chain of its causes, which name what failed (a refused connection, an
/// untrusted certificate) where the error itself says only "client error".
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        let more = next.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = next.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("client error")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn causes_follow_the_error() {
        let error = Outer(std::io::Error::other("invalid peer certificate: UnknownIssuer"));
        assert_eq!(
            with_causes(&error),
            "client error: invalid peer certificate: UnknownIssuer"
        );
    }
}
