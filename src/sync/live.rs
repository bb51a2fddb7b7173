//! The object in a copy's place as the decisions see it: its metadata, and its content summed up
//! (a digest, the shape of its keys, `type` and `immutable`). The copies cache keeps only this, so
//! a cached copy costs its metadata and not its data: at 10,000 copies of a 1 KiB Secret that is
//! the difference between fitting the chart's memory limit and not.

use super::hash::digest_map;
use kube::api::{ApiResource, DynamicObject, ObjectMeta};
use kube::core::Resource;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::sync::Arc;

/// An object in a copy's place, as read from the copies cache or the API.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveCopy {
    pub metadata: ObjectMeta,
    pub content: ContentSummary,
    /// The whole content, kept only where the object was read for one look that shows it
    /// (`mimeo diff`); never in the copies cache.
    pub full: Option<Map<String, Value>>,
}

/// What the decisions need of a live object's content (everything but metadata and status).
#[derive(Clone, Debug, PartialEq)]
pub struct ContentSummary {
    /// [`digest`] of the content: equal exactly when the content is.
    digest: String,
    /// The object keys at every depth, for [`ContentSummary::has_fields_beyond`].
    shape: Shape,
    immutable: bool,
    /// The top-level `type` (a Secret's), as it is.
    type_: Option<Value>,
}

/// The keys of a JSON object at every depth, sorted, without the values; empty for anything that
/// is not an object. Boxed slices: a map per level would cost more than the data it stands for.
#[derive(Clone, Debug, Default, PartialEq)]
struct Shape(Box<[(Box<str>, Shape)]>);

impl Shape {
    fn of(value: &Value) -> Shape {
        match value {
            Value::Object(map) => Shape::of_map(map),
            _ => Shape::default(),
        }
    }

    fn of_map(map: &Map<String, Value>) -> Shape {
        let mut keys: Vec<(Box<str>, Shape)> = map
            .iter()
            .map(|(k, v)| (k.as_str().into(), Shape::of(v)))
            .collect();
        keys.sort_by(|a, b| a.0.cmp(&b.0));
        Shape(keys.into_boxed_slice())
    }

    /// Whether this shape holds object keys, at any depth, that `want` lacks; below a key whose
    /// value in `want` is not an object nothing counts (as a server-side apply sees it).
    fn beyond(&self, want: &Map<String, Value>) -> bool {
        self.0.iter().any(|(key, below)| {
            want.get(&**key)
                .is_none_or(|w| w.as_object().is_some_and(|w| below.beyond(w)))
        })
    }
}

/// The content of `object`'s JSON (everything but metadata and status) as a map, for digests.
fn content_of(data: &Value) -> Cow<'_, Map<String, Value>> {
    match data {
        Value::Object(map) if !map.contains_key("status") => Cow::Borrowed(map),
        Value::Object(map) => Cow::Owned(
            map.iter()
                .filter(|(k, _)| k.as_str() != "status")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        _ => Cow::Owned(Map::new()),
    }
}

impl ContentSummary {
    /// Sums up a content map.
    pub fn of(content: &Map<String, Value>) -> ContentSummary {
        ContentSummary {
            digest: digest_map(content),
            shape: Shape::of_map(content),
            immutable: content.get("immutable") == Some(&Value::Bool(true)),
            type_: content.get("type").cloned(),
        }
    }

    /// Whether `want` is exactly this content.
    pub fn is(&self, want: &Map<String, Value>) -> bool {
        self.digest == digest_map(want)
    }

    /// Whether this content holds fields `want` lacks: fields a server-side apply would leave in
    /// place because someone else owns them.
    pub fn has_fields_beyond(&self, want: &Map<String, Value>) -> bool {
        self.shape.beyond(want)
    }

    pub fn immutable(&self) -> bool {
        self.immutable
    }

    pub fn type_(&self) -> Option<&Value> {
        self.type_.as_ref()
    }
}

impl LiveCopy {
    /// The summary of an object as the copies cache keeps it: metadata and summary, no content.
    pub fn summed_up(object: DynamicObject) -> LiveCopy {
        let content = ContentSummary::of(&content_of(&object.data));
        LiveCopy {
            metadata: object.metadata,
            content,
            full: None,
        }
    }

    /// The summary of an object read to be shown as well: its content is kept too.
    pub fn with_content(object: DynamicObject) -> LiveCopy {
        let full = content_of(&object.data).into_owned();
        LiveCopy {
            metadata: object.metadata,
            content: ContentSummary::of(&full),
            full: Some(full),
        }
    }
}

/// Lets the copies cache (a reflector store) hold summaries, and `ResourceExt` read their
/// metadata. The kind comes from the watch's `ApiResource`, as for `DynamicObject`, shared: the
/// cache's key of each copy holds one.
impl Resource for LiveCopy {
    type DynamicType = Arc<ApiResource>;
    type Scope = kube::core::DynamicResourceScope;

    fn kind(dt: &Arc<ApiResource>) -> Cow<'_, str> {
        Cow::Borrowed(&dt.kind)
    }

    fn group(dt: &Arc<ApiResource>) -> Cow<'_, str> {
        Cow::Borrowed(&dt.group)
    }

    fn version(dt: &Arc<ApiResource>) -> Cow<'_, str> {
        Cow::Borrowed(&dt.version)
    }

    fn api_version(dt: &Arc<ApiResource>) -> Cow<'_, str> {
        Cow::Borrowed(&dt.api_version)
    }

    fn plural(dt: &Arc<ApiResource>) -> Cow<'_, str> {
        Cow::Borrowed(&dt.plural)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    fn object(data: Value) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
                                      "metadata": {"name": "s", "namespace": "a"}}))
        .map(|o: DynamicObject| DynamicObject { data, ..o })
        .unwrap()
    }

    #[test]
    fn the_summary_is_the_content_whatever_the_order_and_without_status() {
        let live = LiveCopy::summed_up(object(
            json!({"data": {"b": "Mg==", "a": "MQ=="}, "type": "Opaque",
                                                    "status": {"x": 1}}),
        ));
        assert!(live.content.is(&map(
            json!({"type": "Opaque", "data": {"a": "MQ==", "b": "Mg=="}})
        )));
        assert!(
            !live
                .content
                .is(&map(json!({"type": "Opaque", "data": {"a": "MQ=="}})))
        );
        assert!(!live.content.is(&map(
            json!({"type": "Opaque", "data": {"a": "MQ==", "b": "Mw=="}})
        )));
        assert_eq!(live.content.type_(), Some(&json!("Opaque")));
        assert!(!live.content.immutable());
        assert!(live.full.is_none());
        assert_eq!(live.metadata.name.as_deref(), Some("s"));
    }

    #[test]
    fn fields_beyond_are_keys_the_wanted_content_lacks_at_any_depth() {
        let live = LiveCopy::summed_up(object(json!({"data": {"a": "MQ==", "extra": "eA=="},
                                                    "spec": {"rules": [{"x": 1}], "deep": {"k": "v"}}})));
        let want = |v: Value| map(v);
        assert!(live.content.has_fields_beyond(&want(json!({"data": {"a": "MQ=="},
                                                         "spec": {"rules": [], "deep": {"k": "v"}}}))));
        assert!(
            !live
                .content
                .has_fields_beyond(&want(json!({"data": {"a": "", "extra": ""},
                                                          "spec": {"rules": [], "deep": {"k": 1}}})))
        );
        // Below a value that is not an object in the wanted content, nothing counts.
        assert!(
            !live
                .content
                .has_fields_beyond(&want(json!({"data": {"a": "", "extra": ""},
                                                          "spec": {"rules": [], "deep": "flat"}})))
        );
        assert!(
            live.content
                .has_fields_beyond(&want(json!({"data": {"a": "", "extra": ""}})))
        );
    }

    #[test]
    fn immutable_and_kept_content() {
        let live = LiveCopy::with_content(object(json!({"data": {"a": "MQ=="}, "immutable": true})));
        assert!(live.content.immutable());
        assert_eq!(
            live.full,
            Some(map(json!({"data": {"a": "MQ=="}, "immutable": true})))
        );
    }
}
