//! Decoding while skipping fields no reader needs, unread: a skipped field's value is stepped
//! over in the input, never built. What is skipped is a list of paths of JSON keys.
//!
//! - [`WithoutManagedFields<K>`] decodes a watched object as `K` does, without
//!   `metadata.managedFields`: the field managers' records are often the largest part of an
//!   object (a nested JSON tree per manager) and no reconcile reads them.
//! - [`decode_skipping`] decodes any value without the fields under the paths it is given
//!   (metal-api's machines in a cluster's listing, say); a path ending in [`FIRST`] keeps the
//!   first element of the list under it and skips the rest (a machine's newest event).

use kube::Resource;
use serde::de::{
    self, DeserializeSeed, Deserializer, IgnoredAny, IntoDeserializer, MapAccess, Visitor,
};
use std::borrow::Cow;
use std::fmt;

/// Paths of JSON keys from the decoded value's top; at most 64.
pub type Paths = &'static [&'static [&'static str]];

/// The last step of a path to a list of which only the first element is decoded.
pub(crate) const FIRST: &str = "[0]";

/// The path skipped in a watched object.
const MANAGED_FIELDS: Paths = &[&["metadata", "managedFields"]];

/// A `K` decoded without `metadata.managedFields`.
#[derive(Clone, Debug)]
pub struct WithoutManagedFields<K>(pub K);

impl<'de, K: de::Deserialize<'de>> de::Deserialize<'de> for WithoutManagedFields<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        decode_skipping(deserializer, MANAGED_FIELDS).map(WithoutManagedFields)
    }
}

/// Decodes a `T` as it decodes from `deserializer`, except that the value under each of `paths`
/// is skipped unread, as if the key were absent (a path through a list is not followed). More
/// than 64 paths are a programming error: the ones after the 64th are not skipped.
pub(crate) fn decode_skipping<'de, T: de::Deserialize<'de>, D: Deserializer<'de>>(
    deserializer: D,
    paths: Paths,
) -> Result<T, D::Error> {
    T::deserialize(Filtered {
        inner: deserializer,
        at: At::top(paths),
    })
}

impl<K: Resource> Resource for WithoutManagedFields<K> {
    resource_type_of!(K);
    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        self.0.meta_mut()
    }
}

/// Where a map is among the paths: at which depth, and which paths lead through it (bit `i`
/// for `paths[i]`); or a list of which only the first element is decoded.
#[derive(Clone, Copy)]
struct At {
    paths: Paths,
    depth: usize,
    through: u64,
    first_only: bool,
}

/// What becomes of the value under a key.
enum Next {
    Skip,
    Filter(At),
    Keep,
}

impl At {
    fn top(paths: Paths) -> At {
        let through = match paths.len() {
            n if n >= 64 => u64::MAX,
            n => (1u64 << n) - 1,
        };
        At {
            paths,
            depth: 0,
            through,
            first_only: false,
        }
    }

    fn next(&self, key: &str) -> Next {
        let mut through = 0u64;
        for (i, path) in self.paths.iter().enumerate().take(64) {
            if self.through & (1 << i) == 0 || path.get(self.depth) != Some(&key) {
                continue;
            }
            match &path[self.depth + 1..] {
                [] => return Next::Skip,
                [last] if *last == FIRST => {
                    return Next::Filter(At {
                        through: 0,
                        depth: self.depth + 1,
                        first_only: true,
                        ..*self
                    });
                }
                _ => {}
            }
            through |= 1 << i;
        }
        if through == 0 {
            return Next::Keep;
        }
        Next::Filter(At {
            through,
            depth: self.depth + 1,
            first_only: false,
            ..*self
        })
    }
}

/// Deserializer methods handed to the inner deserializer as they are: only maps (and options,
/// which may hold one) are filtered; everything else decodes exactly as without the filter.
macro_rules! unfiltered {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            self.inner.$method(visitor)
        }
    )*};
}

/// A deserializer that hands its maps to [`FilteredMap`].
struct Filtered<D> {
    inner: D,
    at: At,
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Filtered<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_any(FilteredVisitor {
            inner: visitor,
            at: self.at,
        })
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_map(FilteredVisitor {
            inner: visitor,
            at: self.at,
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
                at: self.at,
            },
        )
    }

    /// An optional map (`Option<Struct>`) is filtered too.
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_option(FilteredVisitor {
            inner: visitor,
            at: self.at,
        })
    }

    /// A list is trimmed when a path ends in it with [`FIRST`].
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_seq(FilteredVisitor {
            inner: visitor,
            at: self.at,
        })
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_newtype_struct(name, visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_tuple(len, visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_tuple_struct(name, len, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_enum(name, variants, visitor)
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }

    unfiltered! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64
        deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char deserialize_str
        deserialize_string deserialize_bytes deserialize_byte_buf deserialize_unit
        deserialize_identifier deserialize_ignored_any
    }
}

/// Passes everything on to the inner visitor; a map goes through [`FilteredMap`], the value of
/// an option through [`Filtered`].
struct FilteredVisitor<V> {
    inner: V,
    at: At,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for FilteredVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(FilteredMap {
            inner: map,
            at: self.at,
            next: None,
        })
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(Filtered {
            inner: deserializer,
            at: self.at,
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

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<V::Value, E> {
        self.inner.visit_borrowed_str(v)
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<V::Value, E> {
        self.inner.visit_string(v)
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
        match self.at.first_only {
            true => self.inner.visit_seq(FirstOnly {
                inner: seq,
                taken: false,
            }),
            false => self.inner.visit_seq(seq),
        }
    }
}

/// A list's first element; the others are stepped over unread.
struct FirstOnly<A> {
    inner: A,
    taken: bool,
}

impl<'de, A: de::SeqAccess<'de>> de::SeqAccess<'de> for FirstOnly<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        if !self.taken {
            self.taken = true;
            return self.inner.next_element_seed(seed);
        }
        while self.inner.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(usize::from(!self.taken))
    }
}

/// A map's entries without those skipped at this place; the value of a key that leads
/// further along a path is filtered in turn.
struct FilteredMap<A> {
    inner: A,
    at: At,
    /// Where the value of the key just handed out is, when a path leads through it.
    next: Option<At>,
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
            self.next = match self.at.next(&key) {
                Next::Skip => {
                    self.inner.next_value::<IgnoredAny>()?;
                    continue;
                }
                Next::Filter(at) => Some(at),
                Next::Keep => None,
            };
            return match key {
                Cow::Borrowed(k) => seed.deserialize(de::value::BorrowedStrDeserializer::new(k)),
                Cow::Owned(k) => seed.deserialize(k.into_deserializer()),
            }
            .map(Some);
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        match self.next.take() {
            Some(at) => self.inner.next_value_seed(FilteredSeed { inner: seed, at }),
            None => self.inner.next_value_seed(seed),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// Deserializes a value a path leads through, through the filter.
struct FilteredSeed<S> {
    inner: S,
    at: At,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for FilteredSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(Filtered {
            inner: deserializer,
            at: self.at,
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
mod tests;
