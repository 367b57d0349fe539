//! Decoding watched objects without their `metadata.managedFields`: the field managers' records
//! are often the largest part of an object (a nested JSON tree per manager) and no reconcile
//! reads them. Skipping them while decoding, instead of decoding and then dropping them, spares
//! the watches most of their allocations.
//!
//! [`WithoutManagedFields<K>`] decodes as `K` does, except that the map under the top-level `metadata` key loses
//! its `managedFields` entry unread.

use kube::Resource;
use serde::de::{
    self, DeserializeSeed, Deserializer, IgnoredAny, IntoDeserializer, MapAccess, Visitor,
};
use std::borrow::Cow;
use std::fmt;

/// The key skipped under `metadata`.
const SKIPPED: &str = "managedFields";

/// A `K` decoded without `metadata.managedFields`.
#[derive(Clone, Debug)]
pub struct WithoutManagedFields<K>(pub K);

impl<'de, K: de::Deserialize<'de>> de::Deserialize<'de> for WithoutManagedFields<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        K::deserialize(Filtered {
            inner: deserializer,
            level: Level::Object,
        })
        .map(WithoutManagedFields)
    }
}

impl<K: Resource> Resource for WithoutManagedFields<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }
    fn api_version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::api_version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        self.0.meta_mut()
    }
}

/// Where in the object a map is: the object itself, or its metadata.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Object,
    Metadata,
}

/// A deserializer that hands maps at `level` to [`FilteredMap`].
struct Filtered<D> {
    inner: D,
    level: Level,
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Filtered<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_any(FilteredVisitor {
            inner: visitor,
            level: self.level,
        })
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_map(FilteredVisitor {
            inner: visitor,
            level: self.level,
        })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_struct(
            name,
            fields,
            FilteredVisitor {
                inner: visitor,
                level: self.level,
            },
        )
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_option(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct newtype_struct seq tuple tuple_struct enum identifier ignored_any
    }
}

/// Passes everything on to the inner visitor; a map goes through [`FilteredMap`].
struct FilteredVisitor<V> {
    inner: V,
    level: Level,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for FilteredVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(FilteredMap {
            inner: map,
            level: self.level,
            metadata_next: false,
        })
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        self.inner.visit_str(v)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<V::Value, E> {
        self.inner.visit_bool(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<V::Value, E> {
        self.inner.visit_i64(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<V::Value, E> {
        self.inner.visit_u64(v)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<V::Value, E> {
        self.inner.visit_f64(v)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(seq)
    }
}

/// A map's entries; at the metadata level without `managedFields`, and at the object level
/// with the value under `metadata` filtered.
struct FilteredMap<A> {
    inner: A,
    level: Level,
    /// The key just handed out was the object's `metadata`.
    metadata_next: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for FilteredMap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        loop {
            let Some(Key(key)) = self.inner.next_key::<Key<'de>>()? else {
                return Ok(None);
            };
            if self.level == Level::Metadata && key == SKIPPED {
                self.inner.next_value::<IgnoredAny>()?;
                continue;
            }
            self.metadata_next = self.level == Level::Object && key == "metadata";
            return match key {
                Cow::Borrowed(k) => seed.deserialize(de::value::BorrowedStrDeserializer::new(k)),
                Cow::Owned(k) => seed.deserialize(k.into_deserializer()),
            }
            .map(Some);
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        if std::mem::take(&mut self.metadata_next) {
            self.inner.next_value_seed(MetadataSeed(seed))
        } else {
            self.inner.next_value_seed(seed)
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// Deserializes the object's `metadata` value through the filter.
struct MetadataSeed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for MetadataSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Filtered {
            inner: deserializer,
            level: Level::Metadata,
        })
    }
}

/// A map key, borrowed from the input when it can be.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::Machine;

    const MACHINE: &str = r#"{
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {
            "name": "w-0",
            "namespace": "team-a",
            "labels": {"cluster.x-k8s.io/cluster-name": "prod"},
            "managedFields": [{"manager": "capi", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:x": {}}}}}],
            "resourceVersion": "7"
        },
        "spec": {"clusterName": "prod", "bootstrap": {"dataSecretName": "w-0-bootstrap"}},
        "status": {"phase": "Provisioning"}
    }"#;

    #[test]
    fn decodes_as_the_kind_does_without_managed_fields() {
        let full: Machine = serde_json::from_str(MACHINE).expect("full");
        let WithoutManagedFields(lean): WithoutManagedFields<Machine> =
            serde_json::from_str(MACHINE).expect("without");
        assert!(full.metadata.managed_fields.is_some());
        assert_eq!(lean.metadata.managed_fields, None);
        let mut expected = full.clone();
        expected.metadata.managed_fields = None;
        assert_eq!(
            serde_json::to_value(&lean).expect("lean json"),
            serde_json::to_value(&expected).expect("expected json")
        );
    }

    #[test]
    fn escaped_keys_decode_and_bad_values_are_still_errors() {
        // A key with an escape (decoded, not borrowed) is read too.
        let json = MACHINE.replace("\"spec\":", "\"sp\\u0065c\":");
        let WithoutManagedFields(lean): WithoutManagedFields<Machine> =
            serde_json::from_str(&json).expect("without");
        assert_eq!(lean.spec.cluster_name, "prod");
        let bad = MACHINE.replace("\"clusterName\": \"prod\"", "\"clusterName\": 7");
        let error = serde_json::from_str::<WithoutManagedFields<Machine>>(&bad).expect_err("bad");
        assert!(error.to_string().contains("expected a string"), "{error}");
    }
}
