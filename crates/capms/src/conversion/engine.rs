//! The conversion itself: map every field of the kind's table, keep what the target cannot
//! express, restore what an earlier conversion kept.

use super::kinds::{ConvertedKind, Field};
use super::{KEPT_ANNOTATION, Refusal, SERVED_VERSIONS, Schema};
use crate::api::common::GROUP;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// What a conversion out of a schema lost at one of its fields: the value it had (`was`, none
/// when absent) and the value the target showed instead (`as`). Converting back restores `was`
/// as long as the field still shows `as`; a field changed in the other version keeps the change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Kept {
    /// JSON pointer of the field in the schema that lost it.
    at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    was: Option<Value>,
    #[serde(default, rename = "as", skip_serializing_if = "Option::is_none")]
    shown: Option<Value>,
}

/// Per schema key, what it lost.
type KeptBySchema = BTreeMap<String, Vec<Kept>>;

/// `object` (any served version) in `desired_api_version` (`group/version`).
pub fn convert(object: &Value, desired_api_version: &str) -> Result<Value, Refusal> {
    let name = describe(object);
    let from_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let from = schema_of(from_version, &name)?;
    let to = schema_of(desired_api_version, &name)?;
    let mut out = object.clone();
    if from != to {
        let kind_name = object.get("kind").and_then(Value::as_str).unwrap_or("");
        let kind = ConvertedKind::named(kind_name).ok_or_else(|| Refusal::UnknownKind {
            object: name.clone(),
            kind: kind_name.to_owned(),
            kinds: crate::choices(ConvertedKind::ALL.iter().map(|k| k.name)),
        })?;
        out = across(object, kind, from, to, &name)?;
        let version = desired_api_version.rsplit('/').next().unwrap_or_default();
        for field in kind.required(to) {
            if out.pointer(field).is_none() {
                return Err(Refusal::MissingField {
                    object: name,
                    version: version.to_owned(),
                    field: dotted(field),
                });
            }
        }
    }
    if let Some(map) = out.as_object_mut() {
        map.insert("apiVersion".into(), desired_api_version.into());
    }
    Ok(out)
}

fn schema_of(api_version: &str, object: &str) -> Result<Schema, Refusal> {
    let group_matches = api_version
        .split_once('/')
        .is_some_and(|(group, _)| group == GROUP);
    match Schema::of(api_version) {
        Some(schema) if group_matches => Ok(schema),
        _ => Err(Refusal::UnknownVersion {
            object: object.to_owned(),
            version: api_version.to_owned(),
            served: crate::choices(SERVED_VERSIONS.map(|v| format!("{GROUP}/{v}"))),
        }),
    }
}

/// The object converted across schemas: metadata as is, spec and status field by field.
fn across(
    object: &Value,
    kind: &'static ConvertedKind,
    from: Schema,
    to: Schema,
    name: &str,
) -> Result<Value, Refusal> {
    let mut kept = read_kept(object, name)?;
    let restore = kept.remove(to.key()).unwrap_or_default();
    let mut out = object.clone();
    if let Some(map) = out.as_object_mut() {
        for root in ["spec", "status"] {
            if map.contains_key(root) {
                map.insert(root.into(), Value::Object(Map::new()));
            }
        }
    }
    for field in kind.fields() {
        map_field(object, &mut out, field, from, to, name)?;
    }
    // A kind whose target schema has no status (the Go provider's machine template) shows none:
    // the apiserver refuses an object with a field its schema does not declare.
    let has_status = kind
        .fields()
        .any(|f| f.path(to).is_some_and(|p| p.starts_with("/status/")));
    if let Some(map) = out.as_object_mut().filter(|_| !has_status) {
        map.remove("status");
    }
    let mut restored = Vec::new();
    for entry in restore {
        let field = kind.fields().find(|f| f.path(to) == Some(&entry.at));
        let current = field
            .and_then(|f| f.path(from))
            .and_then(|p| object.pointer(p));
        if current == entry.shown.as_ref() {
            put(&mut out, &entry.at, entry.was, name)?;
            restored.push(entry.at);
        }
    }
    for field in kind.fields() {
        if let (Some(at), Some(unset)) = (field.path(to), field.unset_in_go)
            && to == Schema::GoProvider
            && out.pointer(at).is_none()
            && !restored.iter().any(|r| r == at)
        {
            put(&mut out, at, Some(Value::from(unset)), name)?;
        }
    }
    let lost: Vec<Kept> = kind
        .fields()
        .filter_map(|field| lost_at(object, &out, field, from, to))
        .collect();
    // What the source schema lost before is replaced by what it loses now.
    kept.remove(from.key());
    if !lost.is_empty() {
        kept.insert(from.key().to_owned(), lost);
    }
    write_kept(&mut out, &kept, name)?;
    Ok(out)
}

/// Maps one field: its value, or for a spec field capms leaves empty the value capms holds in
/// its place.
fn map_field(
    object: &Value,
    out: &mut Value,
    field: &Field,
    from: Schema,
    to: Schema,
    name: &str,
) -> Result<(), Refusal> {
    let (Some(source), Some(target)) = (field.path(from), field.path(to)) else {
        return Ok(());
    };
    let value = passed_on(object, field, from, source);
    put(out, target, field.transform(from, to, value.cloned()), name)
}

/// The value an object in `schema` passes on for `field` at `path`: its own, or for a spec field
/// capms leaves empty the one capms holds in its place.
fn passed_on<'a>(
    object: &'a Value,
    field: &Field,
    schema: Schema,
    path: &str,
) -> Option<&'a Value> {
    match (object.pointer(path), schema, field.fallback) {
        (None, Schema::Capms, Some(fallback)) => object.pointer(fallback),
        (value, ..) => value,
    }
}

/// What the converted object cannot give back of one field: its value, when the target's value
/// converted back differs.
fn lost_at(object: &Value, out: &Value, field: &Field, from: Schema, to: Schema) -> Option<Kept> {
    let source = field.path(from)?;
    let value = object.pointer(source).cloned();
    // What `v1alpha1` shows for a value capms's versions never had is nothing lost; a
    // `v1alpha1` object without it is kept as such, or it would come back showing it.
    if let Some(unset) = field.unset_in_go.map(Value::from)
        && from == Schema::GoProvider
        && field.path(to).is_none()
    {
        return match value {
            Some(v) if v == unset => None,
            None => Some(Kept {
                at: source.to_owned(),
                was: None,
                shown: None,
            }),
            Some(_) => Some(Kept {
                at: source.to_owned(),
                was: value,
                shown: None,
            }),
        };
    }
    let shown = field.path(to).and_then(|t| out.pointer(t)).cloned();
    let back = match field.path(to) {
        Some(target) => field.transform(to, from, passed_on(out, field, to, target).cloned()),
        None => None,
    };
    (back != value).then(|| Kept {
        at: source.to_owned(),
        was: value,
        shown,
    })
}

fn read_kept(object: &Value, name: &str) -> Result<KeptBySchema, Refusal> {
    let Some(text) = object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(KEPT_ANNOTATION))
    else {
        return Ok(KeptBySchema::new());
    };
    let text = text.as_str().unwrap_or_default();
    serde_json::from_str(text).map_err(|e| Refusal::BadKeptAnnotation {
        object: name.to_owned(),
        reason: e.to_string(),
    })
}

/// Writes `kept` into the annotation, or removes the annotation (and an annotation map left
/// empty by it) when nothing is kept.
fn write_kept(out: &mut Value, kept: &KeptBySchema, name: &str) -> Result<(), Refusal> {
    let pointer = "/metadata/annotations";
    if kept.is_empty() {
        let Some(annotations) = out.pointer_mut(pointer).and_then(Value::as_object_mut) else {
            return Ok(());
        };
        if annotations.remove(KEPT_ANNOTATION).is_some() && annotations.is_empty() {
            put(out, pointer, None, name)?;
        }
        return Ok(());
    }
    let text = serde_json::to_string(kept).map_err(|e| Refusal::BadKeptAnnotation {
        object: name.to_owned(),
        reason: e.to_string(),
    })?;
    let at = format!(
        "{pointer}/{}",
        KEPT_ANNOTATION.replace('~', "~0").replace('/', "~1")
    );
    put(out, &at, Some(Value::String(text)), name)
}

/// Sets (`Some`) or removes (`None`) the value at a JSON pointer, creating the objects on the
/// way. Refuses when something on the way is not an object.
pub(super) fn put(
    out: &mut Value,
    pointer: &str,
    value: Option<Value>,
    name: &str,
) -> Result<(), Refusal> {
    let segments: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect();
    let Some((last, parents)) = segments.split_last() else {
        return Ok(());
    };
    let mut at = out;
    for (depth, segment) in parents.iter().enumerate() {
        let not_object = || Refusal::NotAnObject {
            object: name.to_owned(),
            field: segments[..=depth].join("."),
        };
        let map = at.as_object_mut().ok_or_else(not_object)?;
        if value.is_none() && !map.contains_key(segment) {
            return Ok(());
        }
        at = map
            .entry(segment.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    let map = at.as_object_mut().ok_or_else(|| Refusal::NotAnObject {
        object: name.to_owned(),
        field: parents.join("."),
    })?;
    match value {
        Some(value) => map.insert(last.clone(), value),
        None => map.remove(last),
    };
    Ok(())
}

/// `Kind namespace/name` of an object, for messages.
fn describe(object: &Value) -> String {
    let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or("");
    let kind = match text("/kind") {
        "" => "object",
        kind => kind,
    };
    match text("/metadata/namespace") {
        "" => format!("{kind} {}", text("/metadata/name")),
        namespace => format!("{kind} {namespace}/{}", text("/metadata/name")),
    }
}

/// `spec.nodeNetworkID` for `/spec/nodeNetworkID`.
pub(super) fn dotted(pointer: &str) -> String {
    pointer.trim_start_matches('/').replace('/', ".")
}
