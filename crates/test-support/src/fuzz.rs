//! Generated inputs for the fuzz tests: random JSON, and valid documents spoilt one field at a
//! time (set to null, taken out, replaced by a value of another type, or given a field more).

use rand::Rng;
use rand::rngs::StdRng;
use serde_json::{Value, json};

/// Strings that mean something to capms and metal-api, and some that mean nothing.
const STRINGS: [&str; 9] = [
    "mini-lab",
    "ubuntu-26.4",
    "",
    "metal://x/y",
    "127.100.0.1",
    "💥",
    "v1-small-x86",
    "icmp",
    "00000000-0000-0000-0000-000000000001",
];

const KEYS: [&str; 16] = [
    "spec",
    "image",
    "machineType",
    "partition",
    "providerID",
    "template",
    "controlPlaneEndpoint",
    "host",
    "port",
    "firewallSpec",
    "rules",
    "egress",
    "to",
    "metadata",
    "name",
    "id",
];

/// A random JSON value, at most about four levels deep.
pub fn random_json(rng: &mut StdRng, depth: u32) -> Value {
    match rng.random_range(0..if depth > 3 { 5 } else { 7 }) {
        0 => Value::Null,
        1 => json!(rng.random_bool(0.5)),
        2 => json!(rng.random_range(-100_000i64..100_000)),
        3 => json!(STRINGS[rng.random_range(0..STRINGS.len())]),
        4 => json!(rng.random_range(-1.0..1.0e6)),
        5 => Value::Array(
            (0..rng.random_range(0..4))
                .map(|_| random_json(rng, depth + 1))
                .collect(),
        ),
        _ => Value::Object(
            (0..rng.random_range(0..5))
                .map(|_| {
                    let key = KEYS[rng.random_range(0..KEYS.len())].to_owned();
                    (key, random_json(rng, depth + 1))
                })
                .collect(),
        ),
    }
}

/// Where a value sits: the keys and indices from the document down to it.
#[derive(Clone, Debug)]
pub enum PathSegment {
    Key(String),
    Index(usize),
}

/// Every value of `doc` below `under` (itself included), by its path.
pub fn paths(doc: &Value, under: &[PathSegment]) -> Vec<Vec<PathSegment>> {
    let mut out = Vec::new();
    if let Some(start) = at(doc, under) {
        collect(start, under.to_vec(), &mut out);
    }
    out
}

fn collect(value: &Value, path: Vec<PathSegment>, out: &mut Vec<Vec<PathSegment>>) {
    match value {
        Value::Object(o) => {
            for (k, v) in o {
                let mut p = path.clone();
                p.push(PathSegment::Key(k.clone()));
                collect(v, p, out);
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                let mut p = path.clone();
                p.push(PathSegment::Index(i));
                collect(v, p, out);
            }
        }
        _ => {}
    }
    out.push(path);
}

fn at<'a>(doc: &'a Value, path: &[PathSegment]) -> Option<&'a Value> {
    path.iter().try_fold(doc, |v, step| match step {
        PathSegment::Key(k) => v.get(k),
        PathSegment::Index(i) => v.get(*i),
    })
}

fn at_mut<'a>(doc: &'a mut Value, path: &[PathSegment]) -> Option<&'a mut Value> {
    path.iter().try_fold(doc, |v, step| match step {
        PathSegment::Key(k) => v.get_mut(k),
        PathSegment::Index(i) => v.get_mut(*i),
    })
}

/// A value of another JSON type than `value`.
fn other_type(rng: &mut StdRng, value: &Value) -> Value {
    loop {
        let other = random_json(rng, 3);
        let same = std::mem::discriminant(&other) == std::mem::discriminant(value);
        if !same {
            return other;
        }
    }
}

/// `doc` with the value at `path` spoilt one way or another.
pub fn spoil(rng: &mut StdRng, doc: &Value, path: &[PathSegment]) -> Value {
    let mut out = doc.clone();
    let Some(target) = at_mut(&mut out, path) else {
        return out;
    };
    match rng.random_range(0..5) {
        0 => *target = Value::Null,
        1 => *target = other_type(rng, &target.clone()),
        2 => *target = random_json(rng, 1),
        3 => {
            if let Value::Object(o) = target {
                o.insert("unexpected".into(), random_json(rng, 2));
            } else {
                *target = Value::Null;
            }
        }
        _ => {
            let Some((last, parent)) = path.split_last() else {
                return out;
            };
            match (at_mut(&mut out, parent), last) {
                (Some(Value::Object(o)), PathSegment::Key(k)) => {
                    o.remove(k);
                }
                (Some(Value::Array(a)), PathSegment::Index(i)) if *i < a.len() => {
                    a.remove(*i);
                }
                _ => {}
            }
        }
    }
    out
}
