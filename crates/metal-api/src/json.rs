//! JSON read as Go's `encoding/json` reads it, which is how metal-api and its Go clients meet:
//! `null` for a list, map, object or scalar means "not set" (Go leaves the zero value), a missing
//! field means the same, unknown fields are ignored. Both the simulator (reading what metal-go
//! sends) and capms' client (reading what metal-api answers) decode through here.
//!
//! A value that really does not fit (a string where a number belongs, malformed JSON) is an error
//! naming the field by its path, e.g. `networks[0].networkid: invalid type: integer `7`, …`.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// Why a body could not be read, with the path of the offending field when there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct DecodeError {
    /// The field's path (`networks[0].networkid`), empty for the document itself.
    pub path: String,
    pub message: String,
}

impl DecodeError {
    fn describe(&self) -> String {
        if self.path.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.path, self.message)
        }
    }
}

/// Decodes `bytes` into `T`, treating every `null` object member as absent.
///
/// Straight into `T` first: a `null` where `T` has an `Option` reads as `None` either way, and
/// no type here defaults an `Option` to anything else, so when that succeeds the result is the
/// same. Only a body `T` refuses as it stands (a `null` for a list, a map or a scalar, or a real
/// error) takes the slower way through a `serde_json::Value` without its nulls, which also names
/// the offending field. The direct way matters at scale: a cluster's machine listing is a few
/// hundred kilobytes, read every couple of seconds while its machines boot.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    if let Ok(decoded) = serde_json::from_slice(bytes) {
        return Ok(decoded);
    }
    let mut value: Value = serde_json::from_slice(bytes).map_err(|e| DecodeError {
        path: String::new(),
        message: e.to_string(),
    })?;
    drop_nulls(&mut value);
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        DecodeError {
            path: if path == "." { String::new() } else { path },
            message: e.into_inner().to_string(),
        }
    })
}

/// Removes every `null` member of every object, at any depth: what Go's decoder does with them
/// (nothing) is what serde's defaults do with a missing field. A `null` document or array element
/// is left as it is.
fn drop_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, Debug, Default, PartialEq)]
    #[serde(default)]
    struct Net {
        networkid: String,
        autoacquire: Option<bool>,
    }

    #[derive(Deserialize, Debug, Default, PartialEq)]
    #[serde(default)]
    struct Req {
        name: String,
        ips: Vec<String>,
        labels: std::collections::BTreeMap<String, String>,
        networks: Option<Vec<Net>>,
        vrf: Option<u32>,
        nested: Net,
    }

    #[test]
    fn nulls_read_as_absent_at_every_depth() {
        let req: Req = decode(
            br#"{"name":null,"ips":null,"labels":null,"networks":[{"networkid":"n","autoacquire":null}],"vrf":null,"nested":null,"unknown":[1]}"#,
        )
        .expect("decodes");
        assert_eq!(
            req,
            Req {
                networks: Some(vec![Net {
                    networkid: "n".into(),
                    autoacquire: None
                }]),
                ..Default::default()
            }
        );
        let req: Req = decode(br#"{"networks":null}"#).expect("decodes");
        assert_eq!(req.networks, None);
    }

    #[test]
    fn the_direct_way_and_the_null_free_way_agree() {
        let bodies: [&[u8]; 3] = [
            br#"{"name":"a","ips":["1.2.3.4"],"labels":{"k":"v"},"networks":null,"vrf":null}"#,
            br#"{"name":"a","networks":[{"networkid":"n","autoacquire":null}],"vrf":7}"#,
            br#"{"name":null,"ips":["1.2.3.4"],"nested":{"networkid":null}}"#,
        ];
        for body in bodies {
            let mut value: Value = serde_json::from_slice(body).expect("json");
            drop_nulls(&mut value);
            let without_nulls: Req = serde_json::from_value(value).expect("null-free");
            assert_eq!(decode::<Req>(body).expect("decodes"), without_nulls);
        }
    }

    #[test]
    fn wrong_types_name_the_field() {
        let err = decode::<Req>(br#"{"networks":[{"networkid":7}]}"#).expect_err("wrong type");
        assert_eq!(err.path, "networks[0].networkid");
        assert!(
            err.to_string()
                .starts_with("networks[0].networkid: invalid type: integer `7`")
        );
        let err = decode::<Req>(br#"{"name":"a","#).expect_err("malformed");
        assert_eq!(err.path, "");
        assert!(err.message.contains("EOF"), "{err}");
    }
}
