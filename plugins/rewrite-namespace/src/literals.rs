//! String literals inside expressions, found by parsing the expression (CEL with the `cel`
//! crate's parser, JMESPath with the `jmespath` crate's), never by searching the text: a literal
//! that merely contains a namespace name, an identifier of the same spelling and a comment are not
//! literals equal to it. A literal is replaced token for token, in its own quote style, and the
//! result is parsed again before it is used.

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use jmespath::Variable;
use jmespath::ast::Ast;

/// The expression languages Kyverno policies embed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Language {
    /// Common Expression Language: the `expression` fields of `policies.kyverno.io` kinds and of
    /// `kyverno.io` rules' `validate.cel` and `celPreconditions`.
    Cel,
    /// JMESPath: inside Kyverno's `{{ }}` variables, and `context[].variable.jmesPath`.
    JmesPath,
}

impl Language {
    pub fn name(self) -> &'static str {
        match self {
            Self::Cel => "CEL",
            Self::JmesPath => "JMESPath",
        }
    }
}

/// A string literal: its token's byte range in the expression, and the string it denotes.
#[derive(Debug, Clone, PartialEq)]
pub struct Literal {
    pub start: usize,
    pub end: usize,
    pub value: String,
}

/// The string literals of `source`, in source order; the parser's message when it does not parse.
pub fn find(language: Language, source: &str) -> Result<Vec<Literal>, String> {
    let mut found = match language {
        Language::Cel => cel_literals(source)?,
        Language::JmesPath => jmespath_literals(source)?,
    };
    found.sort_by_key(|l| l.start);
    // A macro's expansion may repeat a node; one token is one literal.
    found.dedup_by_key(|l| l.start);
    Ok(found)
}

/// `source` with each literal that `rename` gives a new name for replaced by a literal of that
/// name, quoted as the old one was. The result is parsed again; the error says so if it does not
/// parse or no longer holds the new literals.
pub fn replace(
    language: Language,
    source: &str,
    mut rename: impl FnMut(&Literal) -> Result<Option<String>, String>,
) -> Result<Option<String>, String> {
    let literals = find(language, source)?;
    let mut out = String::with_capacity(source.len());
    let mut copied = 0;
    let mut wanted = Vec::new();
    for literal in &literals {
        let Some(name) = rename(literal)? else {
            continue;
        };
        if name == literal.value {
            continue;
        }
        let token = &source[literal.start..literal.end];
        out.push_str(&source[copied..literal.start]);
        wanted.push(name.clone());
        out.push_str(&requote(language, token, &name));
        copied = literal.end;
    }
    if wanted.is_empty() {
        return Ok(None);
    }
    out.push_str(&source[copied..]);
    let again = find(language, &out)
        .map_err(|e| format!("the rewritten {} expression does not parse: {e}", language.name()))?;
    for name in &wanted {
        if !again.iter().any(|l| &l.value == name) {
            return Err(format!(
                "the rewritten {} expression does not hold the literal {name:?}",
                language.name()
            ));
        }
    }
    Ok(Some(out))
}

/// A literal of `name` (a namespace name: no quote or backslash in it) quoted as `token` is.
fn requote(language: Language, token: &str, name: &str) -> String {
    match language {
        Language::JmesPath if token.starts_with('`') => format!("`\"{name}\"`"),
        Language::JmesPath => format!("'{name}'"),
        Language::Cel => {
            // A raw string's prefix is dropped: a namespace name has nothing to escape.
            let body = token.trim_start_matches(['r', 'R']);
            let quote = ["'''", "\"\"\"", "'", "\""]
                .into_iter()
                .find(|q| body.starts_with(q))
                .unwrap_or("'");
            format!("{quote}{name}{quote}")
        }
    }
}

fn cel_literals(source: &str) -> Result<Vec<Literal>, String> {
    let (expr, info) = cel::parser::Parser::new()
        .enable_optional_syntax(true)
        .parse_with_source_info(source)
        .map_err(|e| one_line(&e.to_string()))?;
    let mut strings = Vec::new();
    cel_strings(&expr, &mut strings);
    let mut found = Vec::new();
    for (id, value) in strings {
        let Some((start, stop)) = info.offset_for(id) else {
            continue;
        };
        let (start, end) = (start as usize, stop as usize + 1);
        // Only a string token: a node a macro made up has the offsets of the call it expands.
        let token = source.get(start..end).unwrap_or_default();
        let body = token.trim_start_matches(['r', 'R']);
        if body.starts_with(['\'', '"']) {
            found.push(Literal { start, end, value });
        }
    }
    Ok(found)
}

fn cel_strings(expr: &IdedExpr, out: &mut Vec<(u64, String)>) {
    match &expr.expr {
        Expr::Literal(LiteralValue::String(s)) => out.push((expr.id, s.to_string())),
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                cel_strings(target, out);
            }
            call.args.iter().for_each(|a| cel_strings(a, out));
        }
        Expr::List(list) => list.elements.iter().for_each(|e| cel_strings(e, out)),
        Expr::Select(select) => cel_strings(&select.operand, out),
        Expr::Comprehension(c) => {
            for e in [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                cel_strings(e, out);
            }
        }
        Expr::Map(map) => map.entries.iter().for_each(|e| cel_entry(e, out)),
        Expr::Struct(s) => s.entries.iter().for_each(|e| cel_entry(e, out)),
        Expr::Literal(_) | Expr::Ident(_) | Expr::Unspecified => {}
    }
}

fn cel_entry(entry: &cel::common::ast::IdedEntryExpr, out: &mut Vec<(u64, String)>) {
    match &entry.expr {
        EntryExpr::MapEntry(e) => {
            cel_strings(&e.key, out);
            cel_strings(&e.value, out);
        }
        EntryExpr::StructField(f) => cel_strings(&f.value, out),
    }
}

fn jmespath_literals(source: &str) -> Result<Vec<Literal>, String> {
    let ast = jmespath::parse(source).map_err(|e| one_line(&e.to_string()))?;
    let mut found = Vec::new();
    jmespath_strings(source, &ast, &mut found);
    Ok(found)
}

fn jmespath_strings(source: &str, ast: &Ast, out: &mut Vec<Literal>) {
    match ast {
        Ast::Literal { offset, value } => {
            if let Variable::String(value) = &**value
                && let Some(end) = jmespath_token_end(source, *offset)
            {
                out.push(Literal {
                    start: *offset,
                    end,
                    value: value.clone(),
                });
            }
        }
        Ast::Comparison { lhs, rhs, .. }
        | Ast::Projection { lhs, rhs, .. }
        | Ast::And { lhs, rhs, .. }
        | Ast::Or { lhs, rhs, .. }
        | Ast::Subexpr { lhs, rhs, .. } => {
            jmespath_strings(source, lhs, out);
            jmespath_strings(source, rhs, out);
        }
        Ast::Condition { predicate, then, .. } => {
            jmespath_strings(source, predicate, out);
            jmespath_strings(source, then, out);
        }
        Ast::Expref { ast: node, .. }
        | Ast::Flatten { node, .. }
        | Ast::Not { node, .. }
        | Ast::ObjectValues { node, .. } => jmespath_strings(source, node, out),
        Ast::Function { args, .. } => args.iter().for_each(|a| jmespath_strings(source, a, out)),
        Ast::MultiList { elements, .. } => elements.iter().for_each(|a| jmespath_strings(source, a, out)),
        Ast::MultiHash { elements, .. } => elements
            .iter()
            .for_each(|kv| jmespath_strings(source, &kv.value, out)),
        Ast::Identity { .. } | Ast::Field { .. } | Ast::Index { .. } | Ast::Slice { .. } => {}
    }
}

/// The end of the raw string (`'...'`) or JSON literal (`` `...` ``) that starts at `start`:
/// after its closing quote, a backslash escaping the character after it.
fn jmespath_token_end(source: &str, start: usize) -> Option<usize> {
    let quote = *source.as_bytes().get(start)?;
    if quote != b'\'' && quote != b'`' {
        return None;
    }
    let mut bytes = source.as_bytes()[start + 1..].iter().enumerate();
    while let Some((i, &b)) = bytes.next() {
        if b == b'\\' {
            bytes.next();
        } else if b == quote {
            return Some(start + 1 + i + 1);
        }
    }
    None
}

/// A parser's message on one line (CEL's carries the source and a caret under it).
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('|'))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(language: Language, source: &str) -> Vec<String> {
        find(language, source)
            .unwrap()
            .into_iter()
            .map(|l| l.value)
            .collect()
    }

    /// Renames the literals equal to `default` to `tenant-a`.
    fn rename(language: Language, source: &str) -> Result<Option<String>, String> {
        replace(language, source, |l| {
            Ok((l.value == "default").then(|| "tenant-a".to_owned()))
        })
    }

    #[test]
    fn cel_cases() {
        let cel = |s: &str| rename(Language::Cel, s);
        assert_eq!(
            cel("request.namespace == 'default'").unwrap().as_deref(),
            Some("request.namespace == 'tenant-a'")
        );
        // A literal that only contains the name, the name as an identifier, and a comment.
        assert_eq!(
            cel("'default-x' == object.metadata.name && default == 1 // 'default'").unwrap(),
            None
        );
        assert_eq!(
            values(Language::Cel, "default == 'default-x' // 'default'"),
            ["default-x"]
        );
        // Escaped quotes in another literal, raw and triple-quoted strings, lists.
        assert_eq!(
            cel(r#"'it\'s' != "default" && r'default' in ["a", """default""", '''default''']"#)
                .unwrap()
                .as_deref(),
            Some(r#"'it\'s' != "tenant-a" && 'tenant-a' in ["a", """tenant-a""", '''tenant-a''']"#)
        );
        // A literal spelled with an escape is the same string.
        assert_eq!(
            cel(r"request.namespace == '\x64efault'").unwrap().as_deref(),
            Some("request.namespace == 'tenant-a'")
        );
        // Bytes are not strings; map keys and macros are reached; non-ASCII before a literal.
        assert_eq!(cel("b'default' == x").unwrap(), None);
        assert_eq!(
            cel(r#""é" == x && {"default": 1}["default"] == 1 && xs.exists(n, n == "default")"#)
                .unwrap()
                .as_deref(),
            Some(r#""é" == x && {"tenant-a": 1}["tenant-a"] == 1 && xs.exists(n, n == "tenant-a")"#)
        );
        assert_eq!(
            cel(r#"generator.apply("default", [variables.cm])"#)
                .unwrap()
                .as_deref(),
            Some(r#"generator.apply("tenant-a", [variables.cm])"#)
        );
        // Optional syntax, as Kubernetes CEL allows it.
        assert_eq!(
            cel("object.?metadata.namespace.orValue('') == 'default'")
                .unwrap()
                .as_deref(),
            Some("object.?metadata.namespace.orValue('') == 'tenant-a'")
        );
        let err = cel("request.namespace == ").unwrap_err();
        assert!(err.contains("Syntax error"), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }

    #[test]
    fn jmespath_cases() {
        let jp = |s: &str| rename(Language::JmesPath, s);
        assert_eq!(
            jp("request.namespace == 'default'").unwrap().as_deref(),
            Some("request.namespace == 'tenant-a'")
        );
        assert_eq!(
            jp(r#"contains(['default', `"default"`, 'x'], request.namespace)"#)
                .unwrap()
                .as_deref(),
            Some(r#"contains(['tenant-a', `"tenant-a"`, 'x'], request.namespace)"#)
        );
        // An identifier, a quoted identifier, a substring, an escaped quote, a JSON list.
        assert_eq!(
            jp(r#"default.x == "default" || 'default-x' == 'it\'s' || `["default"]` == a"#).unwrap(),
            None
        );
        assert_eq!(
            jp(r"{a: 'default', b: [?n == 'default'].n}").unwrap().as_deref(),
            Some(r"{a: 'tenant-a', b: [?n == 'tenant-a'].n}")
        );
        assert!(jp("request.namespace = 'default'").is_err());
    }
}
