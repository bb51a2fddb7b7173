//! Content digests: the same content always yields the same digest, whatever the key order.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// `sha256:<hex>` over a canonical JSON encoding of `value` (object keys sorted at every level).
pub fn digest(value: &Value) -> String {
    let mut hasher = Sha256::new();
    write_canonical(value, &mut hasher);
    hex_digest(hasher)
}

/// [`digest`] of an object given as its map, without building the object.
pub fn digest_map(map: &serde_json::Map<String, Value>) -> String {
    hex(&map_sha256(map))
}

/// The bytes of [`digest_map`], for those who keep many (the copies cache): as a string each is
/// an allocation of 71 bytes more.
pub fn map_sha256(map: &serde_json::Map<String, Value>) -> [u8; 32] {
    let mut hasher = Sha256::new();
    write_object(map, &mut hasher);
    hasher.finalize().into()
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn hex_digest(hasher: Sha256) -> String {
    hex(&hasher.finalize())
}

/// `sha256:<hex>` of raw bytes, such as a plugin's component.
pub fn digest_bytes(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn write_object(map: &serde_json::Map<String, Value>, hasher: &mut Sha256) {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    hasher.update(b"{");
    for key in keys {
        hasher.update(serde_json::to_string(key).unwrap_or_default().as_bytes());
        hasher.update(b":");
        write_canonical(&map[key], hasher);
        hasher.update(b",");
    }
    hasher.update(b"}");
}

fn write_canonical(value: &Value, hasher: &mut Sha256) {
    match value {
        Value::Object(map) => write_object(map, hasher),
        Value::Array(items) => {
            hasher.update(b"[");
            for item in items {
                write_canonical(item, hasher);
                hasher.update(b",");
            }
            hasher.update(b"]");
        }
        other => hasher.update(other.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_matter() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": [1, 2], "x": "s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a": {"x": "s", "y": [1, 2]}, "b": 1}"#).unwrap();
        assert_eq!(digest(&a), digest(&b));
        assert_eq!(digest_map(a.as_object().unwrap()), digest(&b));
    }

    #[test]
    fn content_matters() {
        assert_ne!(digest(&json!({"a": [1, 2]})), digest(&json!({"a": [2, 1]})));
        assert_ne!(digest(&json!({"a": "1"})), digest(&json!({"a": 1})));
        assert!(digest(&json!({})).starts_with("sha256:"));
        assert_eq!(digest(&json!({})).len(), 7 + 64);
    }
}
