//! Values with `{{placeholder}}`s, as plugin configs write them. Each plugin decides which
//! placeholder names it knows and what they render to; the splitting is shared.

/// A piece of a template value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Literal text.
    Text(&'a str),
    /// A placeholder's name, with the spaces inside its braces trimmed.
    Placeholder(&'a str),
}

/// Splits `value` into text and `{{name}}` placeholders. Fails, with a message that quotes the
/// value, when a `{{` is never closed.
pub fn split(value: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut pieces = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find("{{") {
        if start > 0 {
            pieces.push(Piece::Text(&rest[..start]));
        }
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| format!("{value:?} has '{{{{' without a closing '}}}}'"))?;
        pieces.push(Piece::Placeholder(after[..end].trim()));
        rest = &after[end + 2..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest));
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_text_and_placeholders() {
        assert_eq!(split("").unwrap(), []);
        assert_eq!(split("plain").unwrap(), [Piece::Text("plain")]);
        assert_eq!(
            split("{{a}}-x-{{ b }}").unwrap(),
            [
                Piece::Placeholder("a"),
                Piece::Text("-x-"),
                Piece::Placeholder("b")
            ]
        );
        assert_eq!(
            split("pre{{a}}").unwrap(),
            [Piece::Text("pre"), Piece::Placeholder("a")]
        );
    }

    #[test]
    fn an_unclosed_placeholder_is_refused() {
        assert_eq!(
            split("x-{{a").unwrap_err(),
            "\"x-{{a\" has '{{' without a closing '}}'"
        );
    }
}
