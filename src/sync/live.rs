//! The object in a copy's place as the decisions see it: its metadata, and its content summed up
//! (a digest, the shape of its keys, `type` and `immutable`). The copies cache keeps only this, so
//! a cached copy costs its metadata and not its data: at 10,000 copies of a 1 KiB Secret that is
//! the difference between fitting the chart's memory limit and not. Its labels and annotations
//! are kept as [`Marks`], not as `ObjectMeta`'s maps.

use super::hash::map_sha256;
use super::ownership::Marked;
use kube::api::{ApiResource, DynamicObject, ObjectMeta};
use kube::core::Resource;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// An object in a copy's place, as read from the copies cache or the API.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveCopy {
    /// Its metadata without labels, annotations and `managedFields` (read through
    /// [`Marked`], [`LiveCopy::labels`], [`LiveCopy::annotations`]; [`LiveCopy::object_meta`]
    /// puts them back).
    metadata: ObjectMeta,
    labels: Marks,
    annotations: Marks,
    pub content: ContentSummary,
    /// The whole content, kept only where the object was read for one look that shows it
    /// (`mimeo diff`); never in the copies cache.
    pub full: Option<Map<String, Value>>,
}

/// Labels or annotations as a cached copy keeps them: the keys and values one after another in
/// one string, in the map's order, with where each ends. A `BTreeMap` allocates a node of eleven
/// entries for even one pair, about 0.5 KiB, and a copy has two; a string each is ten
/// allocations more for a copy's five annotations. At 10,000 copies the maps were 14 MB of the
/// controller's 38 MB.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Marks {
    text: Box<str>,
    /// For each pair, where its key ends and where its value ends, in `text`.
    ends: Box<[(u32, u32)]>,
}

impl Marks {
    fn of(map: Option<BTreeMap<String, String>>) -> Marks {
        let map = map.unwrap_or_default();
        let mut text = String::with_capacity(map.iter().map(|(k, v)| k.len() + v.len()).sum());
        let mut ends = Vec::with_capacity(map.len());
        for (k, v) in &map {
            text.push_str(k);
            let key_end = text.len();
            text.push_str(v);
            // Metadata is bounded by the apiserver (256 KiB for all annotations).
            ends.push((key_end as u32, text.len() as u32));
        }
        Marks {
            text: text.into_boxed_str(),
            ends: ends.into_boxed_slice(),
        }
    }

    fn pair(&self, i: usize) -> (&str, &str) {
        let start = match i {
            0 => 0,
            _ => self.ends[i - 1].1 as usize,
        };
        let (key_end, end) = self.ends[i];
        (
            &self.text[start..key_end as usize],
            &self.text[key_end as usize..end as usize],
        )
    }

    /// A copy has a handful: a scan is as quick as a search.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        (0..self.ends.len()).map(|i| self.pair(i))
    }

    /// As `ObjectMeta` holds them: `None` when there are none, as the apiserver sends them.
    pub fn to_map(&self) -> Option<BTreeMap<String, String>> {
        (!self.ends.is_empty()).then(|| self.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect())
    }
}

/// What the decisions need of a live object's content (everything but metadata and status).
#[derive(Clone, Debug, PartialEq)]
pub struct ContentSummary {
    /// SHA-256 of the content ([`super::hash::digest_map`]'s bytes): equal exactly when the
    /// content is.
    digest: [u8; 32],
    /// The object keys at every depth, for [`ContentSummary::has_fields_beyond`].
    shape: Shape,
    immutable: bool,
    /// The top-level `type` (a Secret's), as it is.
    type_: Option<Value>,
}

/// The keys of a JSON object at every depth, sorted, without the values. Kept as one byte string
/// (each key in pre-order: its depth, its length as LEB128, its bytes): as a tree of boxed slices
/// a Secret's `{data: {value}, type}` took five allocations, 10 MB at 100,000 copies.
#[derive(Clone, Debug, Default, PartialEq)]
struct Shape(Box<[u8]>);

impl Shape {
    fn of_map(map: &Map<String, Value>) -> Shape {
        let mut out = Vec::new();
        push_keys(map, 0, &mut out);
        Shape(out.into_boxed_slice())
    }

    /// Each key with its depth, in pre-order.
    fn keys(&self) -> Vec<(u8, &str)> {
        let mut keys = Vec::new();
        let mut rest = &self.0[..];
        while let [depth, tail @ ..] = rest {
            let (len, tail) = read_len(tail);
            let (key, tail) = tail.split_at(len.min(tail.len()));
            keys.push((*depth, std::str::from_utf8(key).unwrap_or_default()));
            rest = tail;
        }
        keys
    }

    /// Whether this shape holds object keys, at any depth, that `want` lacks; below a key whose
    /// value in `want` is not an object nothing counts (as a server-side apply sees it).
    fn beyond(&self, want: &Map<String, Value>) -> bool {
        keys_beyond(&self.keys(), want)
    }
}

/// [`Shape::beyond`] for the keys of one level and all below them.
fn keys_beyond(keys: &[(u8, &str)], want: &Map<String, Value>) -> bool {
    let Some(&(depth, _)) = keys.first() else {
        return false;
    };
    let mut at = 0;
    while at < keys.len() {
        let below_end = keys[at + 1..]
            .iter()
            .position(|(d, _)| *d <= depth)
            .map_or(keys.len(), |p| at + 1 + p);
        let beyond = match want.get(keys[at].1) {
            None => true,
            Some(Value::Object(want)) => keys_beyond(&keys[at + 1..below_end], want),
            Some(_) => false,
        };
        if beyond {
            return true;
        }
        at = below_end;
    }
    false
}

/// Appends the keys of `map` and below, sorted, at `depth` (parsed JSON nests at most 128 deep;
/// deeper, the depth stays at 255).
fn push_keys(map: &Map<String, Value>, depth: u8, out: &mut Vec<u8>) {
    let mut keys: Vec<(&String, &Value)> = map.iter().collect();
    keys.sort_by(|a, b| a.0.cmp(b.0));
    for (key, value) in keys {
        out.push(depth);
        let mut len = key.len();
        while len >= 0x80 {
            out.push((len as u8 & 0x7f) | 0x80);
            len >>= 7;
        }
        out.push(len as u8);
        out.extend_from_slice(key.as_bytes());
        if let Value::Object(below) = value {
            push_keys(below, depth.saturating_add(1), out);
        }
    }
}

/// A LEB128 length and what follows it.
fn read_len(bytes: &[u8]) -> (usize, &[u8]) {
    let mut len = 0usize;
    for (i, byte) in bytes.iter().enumerate() {
        len |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return (len, &bytes[i + 1..]);
        }
    }
    (len, &[])
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
            digest: map_sha256(content),
            shape: Shape::of_map(content),
            immutable: content.get("immutable") == Some(&Value::Bool(true)),
            type_: content.get("type").cloned(),
        }
    }

    /// Whether `want` is exactly this content.
    pub fn is(&self, want: &Map<String, Value>) -> bool {
        self.digest == map_sha256(want)
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
        LiveCopy::of(object.metadata, content, None)
    }

    /// The summary of an object read to be shown as well: its content is kept too.
    pub fn with_content(object: DynamicObject) -> LiveCopy {
        let full = content_of(&object.data).into_owned();
        LiveCopy::of(object.metadata, ContentSummary::of(&full), Some(full))
    }

    fn of(mut metadata: ObjectMeta, content: ContentSummary, full: Option<Map<String, Value>>) -> LiveCopy {
        metadata.managed_fields = None;
        LiveCopy {
            labels: Marks::of(metadata.labels.take()),
            annotations: Marks::of(metadata.annotations.take()),
            metadata,
            content,
            full,
        }
    }

    pub fn labels(&self) -> &Marks {
        &self.labels
    }

    pub fn annotations(&self) -> &Marks {
        &self.annotations
    }

    /// The same copy with its metadata changed by `f`.
    #[cfg(test)]
    pub fn with_meta(&self, f: impl FnOnce(&mut ObjectMeta)) -> LiveCopy {
        let mut metadata = self.object_meta();
        f(&mut metadata);
        LiveCopy::of(metadata, self.content.clone(), self.full.clone())
    }

    /// The whole metadata as read (but `managedFields`), labels and annotations back in place.
    pub fn object_meta(&self) -> ObjectMeta {
        ObjectMeta {
            labels: self.labels.to_map(),
            annotations: self.annotations.to_map(),
            ..self.metadata.clone()
        }
    }
}

impl Marked for LiveCopy {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key)
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key)
    }
}

/// Lets the copies cache (a reflector store) hold summaries, and `ResourceExt` read their
/// metadata: names, versions, uid; not labels and annotations, which it holds apart. The kind comes from the watch's `ApiResource`, as for `DynamicObject`, shared: the
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
    fn labels_and_annotations_are_read_as_marks_and_given_back_whole() {
        let mut o = object(json!({"data": {}}));
        let pairs =
            |kv: &[(&str, &str)]| Some(kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        o.metadata.labels = pairs(&[("b", "2"), ("a", "1"), ("empty", "")]);
        o.metadata.annotations = pairs(&[("x", "y")]);
        o.metadata.managed_fields = Some(vec![Default::default()]);
        let live = LiveCopy::summed_up(o.clone());
        assert_eq!(
            (
                live.label("a"),
                live.label("b"),
                live.label("empty"),
                live.label("c")
            ),
            (Some("1"), Some("2"), Some(""), None)
        );
        assert_eq!(live.annotation("x"), Some("y"));
        assert_eq!(
            live.labels().iter().collect::<Vec<_>>(),
            [("a", "1"), ("b", "2"), ("empty", "")]
        );
        // Kept apart, not in the metadata `ResourceExt` reads.
        assert!(live.metadata.labels.is_none() && live.metadata.managed_fields.is_none());
        o.metadata.managed_fields = None;
        assert_eq!(live.object_meta(), o.metadata);
        assert_eq!(LiveCopy::summed_up(object(json!({}))).object_meta().labels, None);
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
    fn a_shape_keeps_long_and_odd_keys_and_their_depths() {
        let long = "k".repeat(300);
        let content = map(json!({long.clone(): {"": {"\u{0}x": 1}}, "b": [1], "é": {}}));
        let live = LiveCopy::summed_up(object(Value::Object(content.clone())));
        assert!(!live.content.has_fields_beyond(&content));
        assert_eq!(
            live.content.shape.keys(),
            [(0, "b"), (0, long.as_str()), (1, ""), (2, "\u{0}x"), (0, "é")],
            "sorted by bytes at each level, each followed by what is below it"
        );
        let without_deepest = map(json!({long: {"": {}}, "b": [], "é": {}}));
        assert!(live.content.has_fields_beyond(&without_deepest));
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
