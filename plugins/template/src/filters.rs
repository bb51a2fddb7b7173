//! The filters and functions the plugin adds to MiniJinja's built-ins: encodings and digests a
//! Secret or ConfigMap needs, and `dockerconfigjson`. Errors never quote the value: it may be a
//! secret.

use base64::engine::general_purpose::STANDARD;
use base64::{DecodeError, Engine as _};
use minijinja::value::{Kwargs, Rest, Value};
use minijinja::{Error, ErrorKind};
use sha2::{Digest, Sha256};

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, message)
}

/// Strict undefined stops printing and string arguments, not a `&Value` argument: refuse it here,
/// or `missing|tojson` would quietly give `null`.
fn defined<'a>(filter: &str, value: &'a Value) -> Result<&'a Value, Error> {
    if value.is_undefined() {
        Err(Error::new(
            ErrorKind::UndefinedError,
            format!("{filter}: the value is undefined"),
        ))
    } else {
        Ok(value)
    }
}

/// The text of a string argument; MiniJinja's own coercion would say only "value is not a
/// string", even when it is undefined.
fn text<'a>(filter: &str, value: &'a Value) -> Result<&'a str, Error> {
    defined(filter, value)?
        .as_str()
        .ok_or_else(|| invalid(format!("{filter}: the value is a {}, not a string", value.kind())))
}

/// What is wrong with base64 text, by position only: base64's own message shows the offending
/// byte, which may be part of a secret.
pub fn base64_error(error: &DecodeError) -> String {
    match error {
        DecodeError::InvalidByte(at, _) => format!("an invalid character at offset {at}"),
        DecodeError::InvalidLength(length) => format!("an invalid length, {length} symbols"),
        DecodeError::InvalidLastSymbol { offset, .. } => format!("an invalid last symbol at offset {offset}"),
        DecodeError::InvalidPadding => "invalid padding".into(),
    }
}

pub fn b64encode(value: &Value) -> Result<String, Error> {
    Ok(STANDARD.encode(text("b64encode", value)?))
}

pub fn b64decode(value: &Value) -> Result<String, Error> {
    let value = text("b64decode", value)?;
    let bytes = STANDARD.decode(value).map_err(|e| {
        invalid(format!(
            "b64decode: the value is not valid base64 ({})",
            base64_error(&e)
        ))
    })?;
    String::from_utf8(bytes).map_err(|e| {
        invalid(format!(
            "b64decode: the decoded value is not UTF-8 text (invalid byte at {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// JSON without MiniJinja's HTML escapes (`<` as `\u003c`): the text goes into Kubernetes
/// objects, not web pages. Compact, or pretty with `indent` spaces.
pub fn tojson(value: &Value, indent: Option<usize>, kwargs: Kwargs) -> Result<String, Error> {
    let value = defined("tojson", value)?;
    let keyword: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let indent = match (indent, keyword) {
        (Some(_), Some(_)) => return Err(invalid("tojson: indent given twice".into())),
        (a, b) => a.or(b),
    };
    let text = match indent {
        None => serde_json::to_vec(value),
        Some(width) => {
            let spaces = " ".repeat(width);
            let formatter = serde_json::ser::PrettyFormatter::with_indent(spaces.as_bytes());
            let mut out = Vec::new();
            let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
            serde::Serialize::serialize(value, &mut serializer).map(|()| out)
        }
    }
    .map_err(|e| invalid(format!("tojson: {e}")))?;
    String::from_utf8(text).map_err(|e| invalid(format!("tojson: {e}")))
}

pub fn fromjson(value: &Value) -> Result<Value, Error> {
    serde_json::from_str(text("fromjson", value)?)
        .map_err(|e| invalid(format!("fromjson: the value is not valid JSON ({e})")))
}

/// YAML without the trailing newline, like Helm's `toYaml`, so it can be placed and indented.
pub fn toyaml(value: &Value) -> Result<String, Error> {
    let value = defined("toyaml", value)?;
    let text = serde_yaml_ng::to_string(value).map_err(|e| invalid(format!("toyaml: {e}")))?;
    Ok(text.strip_suffix('\n').unwrap_or(&text).to_owned())
}

pub fn fromyaml(value: &Value) -> Result<Value, Error> {
    serde_yaml_ng::from_str(text("fromyaml", value)?)
        .map_err(|e| invalid(format!("fromyaml: the value is not valid YAML ({e})")))
}

/// The SHA-256 of the text's UTF-8 bytes, in lowercase hex.
pub fn sha256(value: &Value) -> Result<String, Error> {
    let digest = Sha256::digest(text("sha256", value)?.as_bytes());
    Ok(digest.iter().map(|b| format!("{b:02x}")).collect())
}

/// The `.dockerconfigjson` of a `kubernetes.io/dockerconfigjson` Secret for one registry, as
/// `kubectl create secret docker-registry` writes it (keys in its order, `email` only when given).
/// Each argument may be given by position or by keyword.
pub fn dockerconfigjson(args: Rest<Value>, kwargs: Kwargs) -> Result<String, Error> {
    const NAMES: [&str; 4] = ["registry", "username", "password", "email"];
    if args.len() > NAMES.len() {
        return Err(Error::new(
            ErrorKind::TooManyArguments,
            "dockerconfigjson takes registry, username, password and email",
        ));
    }
    let argument = |i: usize, required: bool| -> Result<Option<String>, Error> {
        let name = NAMES[i];
        let keyword: Option<Value> = kwargs.get(name)?;
        let value = match (args.get(i), keyword) {
            (Some(_), Some(_)) => return Err(invalid(format!("dockerconfigjson: {name} given twice"))),
            (None, None) if required => {
                return Err(Error::new(
                    ErrorKind::MissingArgument,
                    format!("dockerconfigjson: {name} is missing"),
                ));
            }
            (positional, keyword) => positional.cloned().or(keyword),
        };
        value
            .map(|v| text(&format!("dockerconfigjson: {name}"), &v).map(str::to_owned))
            .transpose()
    };
    let registry = argument(0, true)?.unwrap_or_default();
    let username = argument(1, true)?.unwrap_or_default();
    let password = argument(2, true)?.unwrap_or_default();
    let email = argument(3, false)?;
    kwargs.assert_all_used()?;
    if registry.is_empty() {
        return Err(invalid("dockerconfigjson: the registry is empty".into()));
    }
    // The registry splits `auth` at the first ':', so one in the username would move the split.
    if username.contains(':') {
        return Err(invalid("dockerconfigjson: the username contains ':'".into()));
    }
    let string = |s: &str| serde_json::Value::from(s).to_string();
    let auth = STANDARD.encode(format!("{username}:{password}"));
    let email = match email.as_deref() {
        Some(email) if !email.is_empty() => format!(",\"email\":{}", string(email)),
        _ => String::new(),
    };
    Ok(format!(
        "{{\"auths\":{{{}:{{\"username\":{},\"password\":{}{email},\"auth\":{}}}}}}}",
        string(&registry),
        string(&username),
        string(&password),
        string(&auth),
    ))
}
