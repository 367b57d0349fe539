//! `Labels` messages read as maps and matched, as every v2 listing filters by them.

use serde_json::Value;
use std::collections::BTreeMap;

/// A `Labels` message as a map.
pub fn label_map(message: &Value) -> BTreeMap<String, String> {
    let labels = message["labels"].as_object().into_iter().flatten();
    labels
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect()
}

/// Whether `own` has every label of the `Labels` message `wanted`.
pub fn carries(own: &BTreeMap<String, String>, wanted: &Value) -> bool {
    let wanted = wanted["labels"].as_object().into_iter().flatten();
    wanted
        .into_iter()
        .all(|(k, v)| own.get(k).map(String::as_str) == Some(v.as_str().unwrap_or_default()))
}
