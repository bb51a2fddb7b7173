//! The keys each Secret type needs, checked on a copy before it is written: a rule that declares
//! `secretType` gets its data from plugins, and a copy the type cannot hold is better refused
//! with the key it lacks than written half-made or rejected by the apiserver in its own words.

use base64::Engine as _;
use serde_json::Value;

/// Why a Secret copy does not hold what its type needs, if it does not. Other objects, and types
/// without required keys, pass.
pub fn missing_for_type(object: &Value) -> Option<String> {
    if object["kind"] != "Secret" || object["apiVersion"] != "v1" {
        return None;
    }
    let type_ = object["type"].as_str().unwrap_or("Opaque");
    let has = |key: &str| value_of(object, key).is_some();
    let needs = |keys: &[&str]| -> Option<String> {
        let missing: Vec<&str> = keys.iter().copied().filter(|k| !has(k)).collect();
        (!missing.is_empty()).then(|| {
            format!(
                "a Secret of type {type_} needs the key{} {}; the copy has {}",
                if missing.len() > 1 { "s" } else { "" },
                missing.join(" and "),
                keys_of(object)
            )
        })
    };
    match type_ {
        "kubernetes.io/dockerconfigjson" => {
            needs(&[".dockerconfigjson"]).or_else(|| json_object(object, type_, ".dockerconfigjson"))
        }
        "kubernetes.io/dockercfg" => {
            needs(&[".dockercfg"]).or_else(|| json_object(object, type_, ".dockercfg"))
        }
        "kubernetes.io/basic-auth" => (!has("username") && !has("password")).then(|| {
            format!(
                "a Secret of type {type_} needs the key username or password; the copy has {}",
                keys_of(object)
            )
        }),
        "kubernetes.io/ssh-auth" => needs(&["ssh-privatekey"]),
        "kubernetes.io/tls" => needs(&["tls.crt", "tls.key"]),
        _ => None,
    }
}

/// The decoded value of a key, from `data` (base64) or `stringData`.
fn value_of(object: &Value, key: &str) -> Option<Vec<u8>> {
    if let Some(text) = object["stringData"][key].as_str() {
        return Some(text.as_bytes().to_vec());
    }
    let encoded = object["data"][key].as_str()?;
    Some(
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap_or_default(),
    )
}

fn json_object(object: &Value, type_: &str, key: &str) -> Option<String> {
    let bytes = value_of(object, key)?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(_)) => None,
        _ => Some(format!(
            "a Secret of type {type_} needs {key} to hold a JSON object; the copy's does not"
        )),
    }
}

/// The keys a copy holds, for the message (never their values).
fn keys_of(object: &Value) -> String {
    let mut keys: Vec<&str> = ["data", "stringData"]
        .iter()
        .filter_map(|f| object[*f].as_object())
        .flat_map(|m| m.keys().map(String::as_str))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    if keys.is_empty() {
        "no data".to_owned()
    } else {
        keys.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret(type_: &str, data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret", "type": type_, "data": data})
    }

    fn b64(text: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    #[test]
    fn each_type_needs_its_keys() {
        let config = b64(r#"{"auths":{"r.example.com":{"auth":"dTpw"}}}"#);
        assert_eq!(
            missing_for_type(&secret(
                "kubernetes.io/dockerconfigjson",
                json!({".dockerconfigjson": config})
            )),
            None
        );
        let missing = missing_for_type(&secret(
            "kubernetes.io/dockerconfigjson",
            json!({"username": b64("u"), "password": b64("hunter2")}),
        ))
        .unwrap();
        assert_eq!(
            missing,
            "a Secret of type kubernetes.io/dockerconfigjson needs the key .dockerconfigjson; the copy has password, username"
        );
        assert!(!missing.contains("hunter2"));
        let not_json = missing_for_type(&secret(
            "kubernetes.io/dockerconfigjson",
            json!({".dockerconfigjson": b64("[1]")}),
        ));
        assert!(not_json.unwrap().contains("JSON object"));
        assert_eq!(
            missing_for_type(&secret("kubernetes.io/basic-auth", json!({"password": b64("p")}))),
            None
        );
        assert!(missing_for_type(&secret("kubernetes.io/basic-auth", json!({}))).is_some());
        let tls = missing_for_type(&secret("kubernetes.io/tls", json!({"tls.crt": b64("c")}))).unwrap();
        assert!(tls.contains("needs the key tls.key"), "{tls}");
        assert!(
            missing_for_type(&secret(
                "kubernetes.io/ssh-auth",
                json!({"ssh-privatekey": b64("k")})
            ))
            .is_none()
        );
        assert!(missing_for_type(&secret("Opaque", json!({}))).is_none());
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "type": "kubernetes.io/tls"});
        assert!(missing_for_type(&config_map).is_none());
    }

    #[test]
    fn string_data_counts() {
        let object = json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockercfg",
            "stringData": {".dockercfg": "{}"}});
        assert_eq!(missing_for_type(&object), None);
    }
}
