//! Glob filters over label and annotation keys.

use crate::api::KeyFilter;

/// Whether `pattern` matches `text`, where `*` matches any run of characters (also none).
pub fn glob_matches(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first)
        || !text[first.len()..].ends_with(last)
        || text.len() < first.len() + last.len()
    {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

/// Whether a key passes the filter: it matches some `include` pattern and no `exclude` pattern.
pub fn keeps(filter: &KeyFilter, key: &str) -> bool {
    filter.include.iter().any(|p| glob_matches(p, key))
        && !filter.exclude.iter().any(|p| glob_matches(p, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let cases = [
            ("app.kubernetes.io/*", "app.kubernetes.io/name", true),
            ("app.kubernetes.io/*", "app.kubernetes.io/", true),
            ("app.kubernetes.io/*", "helm.sh/chart", false),
            ("*", "anything", true),
            ("team", "team", true),
            ("team", "teams", false),
            ("*/version", "app.kubernetes.io/version", true),
            ("a*b*c", "abc", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "acb", false),
            ("ab*ba", "aba", false),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(glob_matches(pattern, text), expected, "{pattern} vs {text}");
        }
    }

    #[test]
    fn include_then_exclude() {
        let filter = KeyFilter {
            include: vec!["app.kubernetes.io/*".into()],
            exclude: vec!["*/managed-by".into()],
        };
        assert!(keeps(&filter, "app.kubernetes.io/name"));
        assert!(!keeps(&filter, "app.kubernetes.io/managed-by"));
        assert!(!keeps(&filter, "team"));
        assert!(
            !keeps(&KeyFilter::default(), "team"),
            "nothing travels by default"
        );
    }
}
