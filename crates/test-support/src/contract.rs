//! metal-api's own swagger spec as a test oracle: route lookup, response validation with a
//! maintained JSON-schema validator, and instances generated from its definitions (for request
//! variants and for spec-shaped answers to capms' client). The spec is read from `../shared`
//! and never copied into the repository.
#![allow(dead_code)] // each test uses a different part

use metal_api::hmac::{self, AuthType};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

pub const SPEC_PATH: &str = "../shared/reference/metal-api-v0.44.1/metal-api.json";

/// Which properties a generated instance has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Only the required ones.
    Required,
    /// The required ones, every optional one `null`.
    NullOptionals,
    /// Every property.
    All,
}

pub struct Spec {
    doc: Value,
}

/// Path templates compare with their parameter names erased and without a trailing slash:
/// `/v1/ip/allocate/{ip}` is the spec's `/v1/ip/allocate/{ip}`, `/v1/ip/{id}` its `/v1/ip/{id}`.
pub fn normalise(template: &str) -> String {
    let trimmed = template.trim_end_matches('/');
    trimmed
        .split('/')
        .map(|seg| if seg.starts_with('{') { "{}" } else { seg })
        .collect::<Vec<_>>()
        .join("/")
}

impl Spec {
    /// The spec, or `None` (said loudly) where `../shared` is absent; under `CI=true` its absence
    /// fails the test.
    pub fn load() -> Option<Spec> {
        let path = crate::repo_root().join(SPEC_PATH);
        match std::fs::read_to_string(&path) {
            Ok(text) => Some(Spec {
                doc: serde_json::from_str(&text).expect("metal-api.json is JSON"),
            }),
            Err(e) if std::env::var("CI").as_deref() == Ok("true") => {
                panic!(
                    "metal-api's spec {} is missing under CI: {e}",
                    path.display()
                )
            }
            Err(e) => {
                eprintln!(
                    "\n!!! SKIPPED: metal-api's spec {} cannot be read ({e}); the contract test did not run !!!\n",
                    path.display()
                );
                None
            }
        }
    }

    /// The operation for `method` on the spec path matching `template`.
    pub fn operation(&self, method: &str, template: &str) -> Option<&Value> {
        let wanted = normalise(template);
        let paths = self.doc["paths"].as_object()?;
        let (_, item) = paths.iter().find(|(p, _)| normalise(p) == wanted)?;
        item.get(method.to_lowercase())
    }

    /// The spec path template a concrete request path matches (for a server answering from the
    /// spec).
    pub fn template_for(&self, method: &str, path: &str) -> Option<String> {
        let segs: Vec<&str> = path.trim_end_matches('/').split('/').collect();
        let paths = self.doc["paths"].as_object()?;
        let mut candidates: Vec<&String> = paths
            .iter()
            .filter(|(p, item)| {
                let pat: Vec<&str> = p.split('/').collect();
                item.get(method.to_lowercase()).is_some()
                    && pat.len() == segs.len()
                    && pat
                        .iter()
                        .zip(&segs)
                        .all(|(a, b)| a.starts_with('{') || a == b)
            })
            .map(|(p, _)| p)
            .collect();
        // A literal segment beats a parameter (`/v1/machine/issues` over `/v1/machine/{id}`).
        candidates.sort_by_key(|p| p.matches('{').count());
        candidates.first().map(|p| (*p).clone())
    }

    /// The response schema documented for `status`: the status itself, else `default`. A 2xx
    /// status must be documented explicitly.
    pub fn response_schema(
        &self,
        method: &str,
        template: &str,
        status: u16,
    ) -> Result<Option<Value>, String> {
        let op = self
            .operation(method, template)
            .ok_or_else(|| format!("{method} {template} is not in metal-api's spec"))?;
        let responses = &op["responses"];
        let documented = responses.get(status.to_string());
        let response = match documented {
            Some(r) => r,
            None if (200..300).contains(&status) => {
                return Err(format!(
                    "{method} {template} answered {status}, which the spec does not document (it has {:?})",
                    responses
                        .as_object()
                        .map(|m| m.keys().cloned().collect::<Vec<_>>())
                ));
            }
            None => responses
                .get("default")
                .ok_or_else(|| format!("{method} {template}: {status} undocumented, no default"))?,
        };
        Ok(response.get("schema").cloned())
    }

    /// The schema of the operation's body parameter.
    pub fn request_schema(&self, method: &str, template: &str) -> Option<Value> {
        let op = self.operation(method, template)?;
        op["parameters"]
            .as_array()?
            .iter()
            .find(|p| p["in"] == "body")
            .map(|p| p["schema"].clone())
    }

    /// Violations of `schema` by `instance`, each with its JSON pointer.
    pub fn validate(&self, schema: &Value, instance: &Value) -> Vec<String> {
        let root = json!({"definitions": self.doc["definitions"], "allOf": [schema]});
        let validator = jsonschema::draft4::options()
            .should_validate_formats(true)
            .build(&root)
            .expect("the spec's schemas compile");
        validator
            .iter_errors(instance)
            .map(|e| format!("at {:?}: {e}", e.instance_path().as_str()))
            .collect()
    }

    /// The definition a `$ref` schema points at.
    pub fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(r) => {
                let name = r.trim_start_matches("#/definitions/");
                &self.doc["definitions"][name]
            }
            None => schema,
        }
    }

    /// Required and optional property names of an object schema.
    pub fn properties(&self, schema: &Value) -> (BTreeSet<String>, BTreeSet<String>) {
        let def = self.resolve(schema);
        let required: BTreeSet<String> = def["required"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let all: BTreeSet<String> = def["properties"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        let optional = all.difference(&required).cloned().collect();
        (required, optional)
    }

    /// An instance of `schema` as `fill` says; values of each property's type, arrays of one
    /// element (none past a nesting depth, so recursive types end).
    pub fn sample(&self, schema: &Value, fill: Fill) -> Value {
        self.sample_at(schema, fill, 0)
    }

    fn sample_at(&self, schema: &Value, fill: Fill, depth: usize) -> Value {
        let def = self.resolve(schema);
        if let Some(props) = def["properties"].as_object() {
            let (required, _) = self.properties(schema);
            let mut out = Map::new();
            for (name, prop) in props {
                if required.contains(name) || (fill == Fill::All && depth < 8) {
                    out.insert(name.clone(), self.sample_at(prop, fill, depth + 1));
                } else if fill == Fill::NullOptionals {
                    out.insert(name.clone(), Value::Null);
                }
            }
            return Value::Object(out);
        }
        match def["type"].as_str() {
            Some("string") if def["format"] == "date-time" => {
                json!("2026-01-02T03:04:05.123456789Z")
            }
            Some("string") => json!("sample"),
            Some("integer") => json!(1),
            Some("number") => json!(1.5),
            Some("boolean") => json!(true),
            Some("array") if depth < 6 => json!([self.sample_at(&def["items"], fill, depth + 1)]),
            Some("array") => json!([]),
            _ => json!({}),
        }
    }

    /// The empty value of a property's type: `""`, `[]`, `{}`, `0`, `false`.
    pub fn empty_of(&self, schema: &Value) -> Value {
        let def = self.resolve(schema);
        if def.get("properties").is_some() {
            return json!({});
        }
        match def["type"].as_str() {
            Some("string") => json!(""),
            Some("integer" | "number") => json!(0),
            Some("boolean") => json!(false),
            Some("array") => json!([]),
            _ => json!({}),
        }
    }

    pub fn property_schema(&self, schema: &Value, name: &str) -> Value {
        self.resolve(schema)["properties"][name].clone()
    }
}

/// How a call is signed.
#[derive(Clone, Copy, Debug)]
pub enum Signer {
    /// No Authorization header.
    Anonymous,
    /// The lab's HMAC key of this identity.
    Lab(AuthType),
    /// A Metal-Edit header signed with a wrong key.
    Forged,
}

pub use Signer::{Anonymous, Forged, Lab};
pub const VIEW: Signer = Lab(AuthType::View);
pub const EDIT: Signer = Lab(AuthType::Edit);
pub const ADMIN: Signer = Lab(AuthType::Admin);

/// An answer: status and body, the error body unwrapped from metal-api's string encoding.
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

/// Calls the simulator over HTTP as a raw client would, checks every answer against the spec and
/// remembers which routes it exercised.
pub struct Caller<'a> {
    pub spec: &'a Spec,
    pub base: String,
    http: reqwest::Client,
    pub violations: Vec<String>,
    pub exercised: BTreeSet<(String, String)>,
}

impl<'a> Caller<'a> {
    pub fn new(spec: &'a Spec, base: &str) -> Caller<'a> {
        Caller {
            spec,
            base: base.trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
            violations: Vec::new(),
            exercised: BTreeSet::new(),
        }
    }

    /// Calls `template` with `args` for its parameters, signed as `auth` (`None`: no header).
    pub async fn call(
        &mut self,
        auth: Signer,
        method: &str,
        template: &str,
        args: &[&str],
        body: Option<Value>,
    ) -> Answer {
        let mut path = String::new();
        let mut args = args.iter();
        for seg in template.split('/').skip(1) {
            path.push('/');
            path.push_str(if seg.starts_with('{') {
                args.next().expect("an argument per parameter")
            } else {
                seg
            });
        }
        let answer = self.send(auth, method, &path, body).await;
        self.exercised
            .insert((method.to_owned(), normalise(template)));
        self.check(method, template, &answer);
        answer
    }

    /// Calls as [`Caller::call`] does and asserts the answer's status.
    pub async fn expect(
        &mut self,
        status: u16,
        auth: Signer,
        method: &str,
        template: &str,
        args: &[&str],
        body: Option<Value>,
    ) -> Answer {
        let answer = self.call(auth, method, template, args, body).await;
        assert_eq!(
            answer.status, status,
            "{method} {template} {args:?}: {}",
            answer.body
        );
        answer
    }

    pub async fn send(
        &self,
        auth: Signer,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Answer {
        self.send_text(auth, method, path, body.map(|b| b.to_string()))
            .await
    }

    /// Sends `body` as it is, JSON or not.
    pub async fn send_text(
        &self,
        auth: Signer,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Answer {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.base));
        let signing = match auth {
            Anonymous => None,
            Lab(auth_type) => Some((
                auth_type,
                metal_sim::HmacKeys::lab().keys[&auth_type].clone(),
            )),
            Forged => Some((AuthType::Edit, "not-the-key".to_owned())),
        };
        if let Some((auth_type, key)) = signing {
            for (name, value) in hmac::signed_headers(key.as_bytes(), auth_type, method.as_str()) {
                request = request.header(name, value);
            }
        }
        if let Some(body) = body {
            request = request
                .header("Content-Type", "application/json")
                .body(body);
        }
        let response = request.send().await.expect("the simulator answers");
        let status = response.status().as_u16();
        let text = response.text().await.expect("body");
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Answer { status, body }
    }

    /// Checks one answer: documented status, body valid against the schema for it. Error bodies
    /// are metal-lib's HTTPErrorResponse written through its TextMarshaler (a JSON string whose
    /// content is the object), as metal-go expects them; the object inside is validated.
    fn check(&mut self, method: &str, template: &str, answer: &Answer) {
        let what = format!("{method} {template} → {}", answer.status);
        let schema = match self.spec.response_schema(method, template, answer.status) {
            Ok(s) => s,
            Err(e) => return self.violations.push(e),
        };
        let mut instance = answer.body.clone();
        if answer.status >= 400 {
            match instance
                .as_str()
                .and_then(|s| serde_json::from_str::<Value>(s).ok())
            {
                Some(inner) => instance = inner,
                None => {
                    return self.violations.push(format!(
                        "{what}: the error body is not metal-api's string-wrapped HTTPErrorResponse: {}",
                        answer.body
                    ));
                }
            }
            if instance["statuscode"] != json!(answer.status) {
                self.violations.push(format!(
                    "{what}: statuscode {} differs from the status",
                    instance["statuscode"]
                ));
            }
        }
        if let Some(schema) = schema {
            for v in self.spec.validate(&schema, &instance) {
                self.violations.push(format!("{what}: {v}"));
            }
        }
    }
}
