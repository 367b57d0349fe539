//! The `v1alpha1` types against the Go provider v0.8.0's own CRDs (read from the shared
//! reference, never copied here): the same fields, types, required fields and printer columns.

use serde_json::Value;
use std::collections::BTreeMap;

/// Per property path: its type, whether it is required, its default.
fn shape(schema: &Value, at: &str, out: &mut BTreeMap<String, String>) {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, property) in schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let path = format!("{at}.{name}");
        if path.starts_with(".metadata") || path.contains(".conditions") {
            continue; // metadata is the apiserver's; conditions are metav1.Condition in both
        }
        // Everything that validates or defaults the property itself: type, default, format,
        // lengths, patterns, enums, list types (its own properties and items come below).
        let own: serde_json::Map<String, Value> = property
            .as_object()
            .into_iter()
            .flatten()
            // kube marks every Option nullable; the apiserver drops a null for a field that is
            // not, so both accept the same objects.
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "description" | "properties" | "items" | "required" | "nullable"
                )
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let required = if required.contains(&name.as_str()) {
            "required "
        } else {
            ""
        };
        out.insert(path.clone(), format!("{required}{}", Value::Object(own)));
        shape(property, &path, out);
        if let Some(items) = property.get("items") {
            shape(items, &format!("{path}[]"), out);
        }
    }
}

fn version(crd: &Value) -> &Value {
    crd.pointer("/spec/versions/0").unwrap_or(&Value::Null)
}

fn columns(crd: &Value) -> Vec<(Value, Value, Value, Value)> {
    let list = version(crd)
        .get("additionalPrinterColumns")
        .and_then(Value::as_array);
    list.into_iter()
        .flatten()
        .map(|c| {
            (
                c["name"].clone(),
                c["jsonPath"].clone(),
                c["type"].clone(),
                c["priority"].clone(),
            )
        })
        .collect()
}

fn assert_like_go(ours: Value, plural: &str) {
    let go = super::go_provider_crd(plural);
    let (mut mine, mut theirs) = (BTreeMap::new(), BTreeMap::new());
    shape(&version(&ours)["schema"]["openAPIV3Schema"], "", &mut mine);
    shape(&version(&go)["schema"]["openAPIV3Schema"], "", &mut theirs);
    // kube leaves apiVersion and kind to the apiserver, which knows them anyway.
    theirs.retain(|path, _| path != ".apiVersion" && path != ".kind");
    let paths: std::collections::BTreeSet<&String> = mine.keys().chain(theirs.keys()).collect();
    let differ: Vec<_> = paths
        .into_iter()
        .filter(|p| mine.get(*p) != theirs.get(*p))
        .map(|p| format!("{p}: ours {:?}, Go's {:?}", mine.get(p), theirs.get(p)))
        .collect();
    assert!(
        differ.is_empty(),
        "{plural}: fields differ:\n{}",
        differ.join("\n")
    );
    assert_eq!(columns(&ours), columns(&go), "{plural}: printer columns");
    for names in ["/spec/names/shortNames", "/spec/names/categories"] {
        assert_eq!(ours.pointer(names), go.pointer(names), "{plural}: {names}");
    }
    // No subresources and an empty set of them are the same to the apiserver.
    let subresources = |crd: &Value| match &version(crd)["subresources"] {
        Value::Null => serde_json::json!({}),
        other => other.clone(),
    };
    assert_eq!(
        subresources(&ours),
        subresources(&go),
        "{plural}: subresources"
    );
}

#[test]
fn every_kind_has_the_go_providers_fields_columns_and_names() {
    for crd in super::crds() {
        let plural = crd.spec.names.plural.clone();
        assert_like_go(serde_json::to_value(crd).unwrap_or_default(), &plural);
    }
}
