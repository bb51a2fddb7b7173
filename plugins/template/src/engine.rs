//! The MiniJinja environment the templates run in, and how their errors read. Templates are
//! compiled from the config each call (the host gives every call a fresh instance, and compiling
//! a few small templates costs far less than the call itself).

use crate::config::Entry;
use crate::filters;
use minijinja::syntax::SyntaxConfig;
use minijinja::value::Value;
use minijinja::{AutoEscape, Environment, Error, UndefinedBehavior};
use std::io;

/// The most one template may render to: a whole Secret or ConfigMap is limited to 1 MiB.
pub const MAX_OUTPUT: usize = 1 << 20;

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    // A typo in a key must fail the copy, not write an empty password.
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    // Which name was undefined is part of the error only in debug mode, which MiniJinja turns on
    // for debug builds alone: the plugin ships as a release build.
    env.set_debug(true);
    // Names like `data[config.json]` would otherwise turn on JSON escaping by extension.
    env.set_auto_escape_callback(|_| AutoEscape::None);
    // Data is written byte for byte, so a file ending in a newline keeps it; a line holding only
    // a block tag (`{% if %}`) leaves no empty line behind, as in Ansible.
    let syntax = SyntaxConfig::builder()
        .keep_trailing_newline(true)
        .trim_blocks(true)
        .build()
        .expect("the default delimiters are valid");
    env.set_syntax(syntax);
    env.add_filter("b64encode", filters::b64encode);
    env.add_filter("b64decode", filters::b64decode);
    env.add_filter("tojson", filters::tojson);
    env.add_filter("fromjson", filters::fromjson);
    env.add_filter("toyaml", filters::toyaml);
    env.add_filter("fromyaml", filters::fromyaml);
    env.add_filter("sha256", filters::sha256);
    env.add_function("dockerconfigjson", filters::dockerconfigjson);
    env
}

/// `<template>, line <n>: <what>`, in MiniJinja's words but without its source excerpt, which
/// could show a secret's value.
fn describe(name: &str, error: &Error) -> String {
    let mut what = error.kind().to_string();
    if let Some(detail) = error.detail() {
        what = format!("{what}: {detail}");
    }
    match error.line() {
        Some(line) if line > 0 => format!("{name}, line {line}: {what}"),
        _ => format!("{name}: {what}"),
    }
}

/// The config's templates, compiled.
pub struct Templates {
    env: Environment<'static>,
}

impl Templates {
    /// Compiles every template; the first syntax error is the error.
    pub fn compile(entries: &[Entry]) -> Result<Self, String> {
        let mut env = environment();
        for entry in entries {
            let name = entry.name();
            env.add_template_owned(name.clone(), entry.source.clone())
                .map_err(|e| describe(&name, &e))?;
        }
        Ok(Templates { env })
    }

    /// Renders the template of `entry` with `variables`, at most [`MAX_OUTPUT`] bytes of it.
    pub fn render(&self, entry: &Entry, variables: &Value) -> Result<String, String> {
        let name = entry.name();
        let template = self.env.get_template(&name).map_err(|e| describe(&name, &e))?;
        let mut out = Bounded {
            bytes: Vec::new(),
            exceeded: false,
        };
        match template.render_captured_to(variables, &mut out) {
            Ok(_) => String::from_utf8(out.bytes).map_err(|e| format!("{name}: {e}")),
            Err(_) if out.exceeded => Err(format!("{name}: the output exceeds {} MiB", MAX_OUTPUT >> 20)),
            Err(e) => Err(describe(&name, &e)),
        }
    }
}

/// A buffer that refuses to grow past [`MAX_OUTPUT`], which stops the render there.
struct Bounded {
    bytes: Vec<u8>,
    exceeded: bool,
}

impl io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.bytes.len() + buf.len() > MAX_OUTPUT {
            self.exceeded = true;
            return Err(io::Error::other("output limit"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Field;
    use minijinja::value::Serde;
    use serde_json::json;

    fn entry(source: &str) -> Entry {
        Entry {
            field: Field::StringData,
            key: "k".into(),
            source: source.into(),
        }
    }

    /// Renders `source` as `stringData[k]` with a small context.
    fn render(source: &str) -> Result<String, String> {
        let variables = Value::from(Serde(json!({
            "object": {"data": {"user": "YWRtaW4=", "bad": "!!", "binary": "/w=="}, "n": 3},
            "inputs": {"registry": {"data": {"host": "ghcr.io"}}},
            "list": ["a", "b"],
            "rule": "SyncRule/a/r",
        })));
        let entry = entry(source);
        Templates::compile(std::slice::from_ref(&entry))?.render(&entry, &variables)
    }

    #[track_caller]
    fn renders(source: &str, want: &str) {
        assert_eq!(render(source).as_deref(), Ok(want), "{source}");
    }

    #[track_caller]
    fn fails(source: &str, want: &str) {
        let got = render(source).unwrap_err();
        assert!(got.contains(want), "{source}: {got}");
    }

    #[test]
    fn strict_undefined_with_default_and_is_defined() {
        fails(
            "{{ nope }}",
            "stringData[k], line 1: undefined value: `nope` is undefined",
        );
        fails("{{ object.data.nope }}", "`object.data.nope` is undefined");
        fails("{{ object.nope.deeper }}", "`object.nope` is undefined");
        fails("{% if nope %}x{% endif %}", "`nope` is undefined");
        fails("{{ nope ~ 'x' }}", "undefined");
        renders("{{ nope | default('d') }}", "d");
        renders("{{ object.data.nope | default('d') }}", "d");
        renders("{{ object.data.user | default('d') }}", "YWRtaW4=");
        renders("{{ '' | default('d', true) }}", "d");
        renders("{% if nope is defined %}y{% else %}n{% endif %}", "n");
        renders("{% if object.data.user is defined %}y{% else %}n{% endif %}", "y");
        renders("{{ 'y' if object.data.nope is undefined else 'n' }}", "y");
    }

    #[test]
    fn errors_name_the_template_and_the_line() {
        fails("a\nb {% if %}", "stringData[k], line 2: syntax error: ");
        fails(
            "{{ 1 +",
            "stringData[k], line 1: syntax error: unexpected end of input",
        );
        fails(
            "a\n\n{{ object.data.bad | b64decode }}",
            "stringData[k], line 3: invalid operation: b64decode",
        );
        let entry = Entry {
            field: Field::Label,
            key: "team".into(),
            source: "{% for %}".into(),
        };
        let error = Templates::compile(&[entry]).err().unwrap();
        assert!(error.starts_with("labels[team], line 1: syntax error"), "{error}");
    }

    /// The statements the README says are refused: they need MiniJinja features the plugin is
    /// built without (`macros`, `multi_template`, `loop_controls`).
    #[test]
    fn refused_statements() {
        for (statement, source) in [
            ("macro", "{% macro m() %}x{% endmacro %}"),
            ("call", "{% call m() %}x{% endcall %}"),
            ("include", "{% include 'x' %}"),
            ("import", "{% import 'x' as y %}"),
            ("from", "{% from 'x' import y %}"),
            ("extends", "{% extends 'x' %}"),
            ("block", "{% block b %}x{% endblock %}"),
            ("break", "{% for i in [1] %}{% break %}{% endfor %}"),
            ("continue", "{% for i in [1] %}{% continue %}{% endfor %}"),
        ] {
            fails(source, &format!("syntax error: unknown statement {statement}"));
        }
        for allowed in [
            "{% set x = 1 %}{{ x }}",
            "{% with x = 1 %}{{ x }}{% endwith %}",
            "{% filter upper %}x{% endfilter %}",
            "{% raw %}x{% endraw %}",
        ] {
            assert!(render(allowed).is_ok(), "{allowed}");
        }
    }

    #[test]
    fn output_is_bounded() {
        let limit = format!("{} MiB", MAX_OUTPUT >> 20);
        fails(
            &format!("{{{{ 'x' * {} }}}}", MAX_OUTPUT + 1),
            &format!("stringData[k]: the output exceeds {limit}"),
        );
        fails(
            "{% for i in range(1100) %}{{ 'x' * 1000 }}{% endfor %}",
            "the output exceeds",
        );
        assert_eq!(
            render(&format!("{{{{ 'x' * {MAX_OUTPUT} }}}}")).unwrap().len(),
            MAX_OUTPUT
        );
    }

    #[test]
    fn text_is_kept_as_written() {
        renders("line\n", "line\n");
        renders("{% if true %}\na\n{% endif %}\nb\n", "a\nb\n");
        // No HTML or JSON escaping, whatever the key's extension.
        for key in ["config.json", "index.html"] {
            let entry = Entry {
                field: Field::Data,
                key: key.into(),
                source: "{{ '<\"&\\'>' }}".into(),
            };
            let templates = Templates::compile(std::slice::from_ref(&entry)).unwrap();
            assert_eq!(
                templates.render(&entry, &Value::from(())).unwrap(),
                "<\"&'>",
                "{key}"
            );
        }
    }

    #[test]
    fn base64() {
        renders("{{ 'admin' | b64encode }}", "YWRtaW4=");
        renders("{{ '' | b64encode }}", "");
        renders("{{ object.data.user | b64decode }}", "admin");
        renders("{{ 'héllo' | b64encode | b64decode }}", "héllo");
        fails(
            "{{ object.data.bad | b64decode }}",
            "b64decode: the value is not valid base64",
        );
        fails(
            "{{ 'YWRtaW4' | b64decode }}",
            "b64decode: the value is not valid base64 (invalid padding)",
        );
        fails(
            "{{ 'YW!' | b64decode }}",
            "b64decode: the value is not valid base64 (an invalid character at offset 2)",
        );
        fails(
            "{{ object.data.binary | b64decode }}",
            "b64decode: the decoded value is not UTF-8 text",
        );
        fails(
            "{{ nope | b64decode }}",
            "undefined value: b64decode: the value is undefined",
        );
        fails(
            "{{ 3 | b64encode }}",
            "b64encode: the value is a number, not a string",
        );
        fails("{{ nope | b64encode }}", "b64encode: the value is undefined");
    }

    #[test]
    fn json() {
        renders(
            "{{ object | tojson }}",
            r#"{"data":{"bad":"!!","binary":"/w==","user":"YWRtaW4="},"n":3}"#,
        );
        renders("{{ list | tojson(2) }}", "[\n  \"a\",\n  \"b\"\n]");
        renders("{{ list | tojson(indent=1) }}", "[\n \"a\",\n \"b\"\n]");
        renders("{{ '<&>' | tojson }}", r#""<&>""#);
        fails("{{ list | tojson(2, indent=2) }}", "tojson: indent given twice");
        fails("{{ nope | tojson }}", "tojson: the value is undefined");
        renders(r#"{{ ('{"a": [1, {"b": "c"}]}' | fromjson).a[1].b }}"#, "c");
        renders(
            r#"{{ '{"b": 1, "a": 2}' | fromjson | tojson }}"#,
            r#"{"a":2,"b":1}"#,
        );
        fails("{{ '{a' | fromjson }}", "fromjson: the value is not valid JSON");
        fails("{{ nope | fromjson }}", "fromjson: the value is undefined");
    }

    #[test]
    fn yaml() {
        renders("{{ inputs.registry | toyaml }}", "data:\n  host: ghcr.io");
        renders("{{ list | toyaml }}", "- a\n- b");
        renders("{{ 'a: 1' | toyaml }}", "'a: 1'");
        fails("{{ nope | toyaml }}", "toyaml: the value is undefined");
        renders("{{ ('a:\n  b: [1, 2]' | fromyaml).a.b[1] }}", "2");
        renders("{{ 'k: v' | fromyaml | tojson }}", r#"{"k":"v"}"#);
        fails(
            "{{ 'a: [1' | fromyaml }}",
            "fromyaml: the value is not valid YAML",
        );
        fails("{{ nope | fromyaml }}", "fromyaml: the value is undefined");
    }

    #[test]
    fn sha256() {
        renders(
            "{{ '' | sha256 }}",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        );
        renders(
            "{{ 'x' | sha256 }}",
            "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881",
        );
        fails("{{ nope | sha256 }}", "sha256: the value is undefined");
        fails(
            "{{ list | sha256 }}",
            "sha256: the value is a sequence, not a string",
        );
    }

    #[test]
    fn builtins() {
        renders("{{ list | join(',') }}", "a,b");
        renders("{{ list | join }}", "ab");
        renders("{{ 'a\nb\n\nc' | indent(2) }}", "a\n  b\n\n  c");
        renders("{{ 'a\nb' | indent(4, true) }}", "    a\n    b");
        renders("{{ '  a b \n' | trim }}", "a b");
        renders("{{ 'xxaxx' | trim('x') }}", "a");
        renders("{{ 'ÄbC' | lower }}", "äbc");
        renders("{{ 'äbc' | upper }}", "ÄBC");
        fails("{{ nope | upper }}", "undefined");
    }

    #[test]
    fn dockerconfigjson() {
        renders(
            "{{ dockerconfigjson(inputs.registry.data.host, 'admin', 'pa\"ss') }}",
            r#"{"auths":{"ghcr.io":{"username":"admin","password":"pa\"ss","auth":"YWRtaW46cGEic3M="}}}"#,
        );
        renders(
            "{{ dockerconfigjson(registry='r', username='u', password='p', email='e@x') }}",
            r#"{"auths":{"r":{"username":"u","password":"p","email":"e@x","auth":"dTpw"}}}"#,
        );
        renders(
            "{{ dockerconfigjson('r', 'u', 'p', 'e@x') }}",
            r#"{"auths":{"r":{"username":"u","password":"p","email":"e@x","auth":"dTpw"}}}"#,
        );
        renders(
            "{{ dockerconfigjson('r', 'u', 'p', '') | fromjson | tojson }}",
            r#"{"auths":{"r":{"auth":"dTpw","password":"p","username":"u"}}}"#,
        );
        fails(
            "{{ dockerconfigjson('r', 'u') }}",
            "missing argument: dockerconfigjson: password is missing",
        );
        fails(
            "{{ dockerconfigjson('r', 'u', 'p', username='v') }}",
            "dockerconfigjson: username given twice",
        );
        fails("{{ dockerconfigjson('r', 'u', 'p', mail='e') }}", "mail");
        fails(
            "{{ dockerconfigjson('', 'u', 'p') }}",
            "dockerconfigjson: the registry is empty",
        );
        fails(
            "{{ dockerconfigjson('r', 'a:b', 'p') }}",
            "dockerconfigjson: the username contains ':'",
        );
        fails(
            "{{ dockerconfigjson('r', nope, 'p') }}",
            "dockerconfigjson: username: the value is undefined",
        );
        fails(
            "{{ dockerconfigjson('r', 'u', 1) }}",
            "dockerconfigjson: password: the value is a number, not a string",
        );
        fails(
            "{{ dockerconfigjson('r', 'u', 'p', 'e', 'x') }}",
            "too many arguments: dockerconfigjson takes",
        );
    }
}
