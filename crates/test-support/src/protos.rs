//! metal-stack's API v2 protos (`../shared/reference/metal-stack-api-v2/proto`, read from there)
//! as a contract: their messages, enums and services, and a check of a protojson message
//! against them: every key a field of the message (by its JSON or its proto name), every value
//! of the field's type, every enum value one the enum defines.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

pub const PROTOS_PATH: &str = "../shared/reference/metal-stack-api-v2/proto";

/// A field of a message.
#[derive(Clone, Debug)]
pub struct Field {
    pub name: String,
    /// The type as written: a scalar, a message or an enum (its last name segment).
    pub type_: String,
    pub repeated: bool,
    /// For a map: the value type (keys are strings in protojson).
    pub map_value: Option<String>,
}

impl Field {
    /// protojson's name: lowerCamelCase.
    pub fn json_name(&self) -> String {
        let mut out = String::new();
        let mut upper = false;
        for c in self.name.chars() {
            if c == '_' {
                upper = true;
            } else if upper {
                out.extend(c.to_uppercase());
                upper = false;
            } else {
                out.push(c);
            }
        }
        out
    }
}

/// A method: its input and output messages and its options as written
/// (`project_roles=PROJECT_ROLE_OWNER`, …).
#[derive(Clone, Debug, Default)]
pub struct Rpc {
    pub input: String,
    pub output: String,
    pub options: Vec<String>,
}

/// Every message, enum and method of the protos, by simple name (methods by
/// `/<package>.<Service>/<Method>`).
#[derive(Debug, Default)]
pub struct Protos {
    pub messages: BTreeMap<String, Vec<Field>>,
    pub enums: BTreeMap<String, Vec<String>>,
    pub rpcs: BTreeMap<String, Rpc>,
}

impl Protos {
    /// The protos, or `None` (said loudly) where `../shared` is absent; under `CI=true` their
    /// absence fails.
    pub fn load() -> Option<Protos> {
        let root = crate::repo_root().join(PROTOS_PATH);
        let mut protos = Protos::default();
        match protos.read_dir(&root) {
            Ok(()) if !protos.messages.is_empty() => Some(protos),
            result if std::env::var("CI").as_deref() == Ok("true") => {
                panic!(
                    "the API v2 protos {} are missing under CI: {result:?}",
                    root.display()
                )
            }
            result => {
                eprintln!(
                    "SKIPPED: the API v2 protos {} cannot be read ({result:?})",
                    root.display()
                );
                None
            }
        }
    }

    fn read_dir(&mut self, dir: &Path) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_dir() {
                self.read_dir(&path)?;
            } else if path.extension().is_some_and(|e| e == "proto") {
                self.parse(&std::fs::read_to_string(&path)?);
            }
        }
        Ok(())
    }

    /// Adds what one `.proto` file declares.
    pub fn parse(&mut self, text: &str) {
        let tokens = tokens(text);
        let mut p = Parser {
            tokens: &tokens,
            at: 0,
            package: String::new(),
        };
        p.body(self, None);
    }

    /// Checks `value` as protojson of message `message`; the errors name the path.
    pub fn check(&self, message: &str, value: &Value) -> Vec<String> {
        let mut errors = Vec::new();
        self.check_message(message, value, "$", &mut errors);
        errors
    }

    fn check_message(&self, message: &str, value: &Value, path: &str, errors: &mut Vec<String>) {
        let Some(fields) = self.messages.get(message) else {
            errors.push(format!("{path}: unknown message {message}"));
            return;
        };
        let Some(object) = value.as_object() else {
            errors.push(format!("{path}: {message} is not an object: {value}"));
            return;
        };
        for (key, v) in object {
            let field = fields
                .iter()
                .find(|f| f.json_name() == *key || f.name == *key);
            let Some(field) = field else {
                errors.push(format!("{path}.{key}: not a field of {message}"));
                continue;
            };
            let at = format!("{path}.{key}");
            if let Some(value_type) = &field.map_value {
                match v.as_object() {
                    Some(map) => {
                        for (k, item) in map {
                            self.check_value(value_type, item, &format!("{at}[{k}]"), errors);
                        }
                    }
                    None => errors.push(format!("{at}: a map is not an object: {v}")),
                }
            } else if field.repeated {
                match v.as_array() {
                    Some(items) => {
                        for (n, item) in items.iter().enumerate() {
                            self.check_value(&field.type_, item, &format!("{at}[{n}]"), errors);
                        }
                    }
                    None => errors.push(format!("{at}: a repeated field is not an array: {v}")),
                }
            } else {
                self.check_value(&field.type_, v, &at, errors);
            }
        }
    }

    fn check_value(&self, type_: &str, v: &Value, path: &str, errors: &mut Vec<String>) {
        let fits = match type_ {
            "string" | "bytes" => v.is_string(),
            "bool" => v.is_boolean(),
            "int32" | "uint32" | "sint32" | "fixed32" | "sfixed32" => v.is_u64() || v.is_i64(),
            "int64" | "uint64" | "sint64" | "fixed64" | "sfixed64" => {
                v.is_string() || v.is_u64() || v.is_i64()
            }
            "double" | "float" => v.is_number(),
            "Timestamp" | "Duration" => v.is_string(),
            t if self.enums.contains_key(t) => {
                let values = &self.enums[t];
                let defined = v.as_str().is_some_and(|s| values.iter().any(|d| d == s));
                if !defined {
                    errors.push(format!("{path}: {v} is not a value of enum {t}"));
                }
                true
            }
            t => {
                self.check_message(t, v, path, errors);
                true
            }
        };
        if !fits {
            errors.push(format!("{path}: {v} is not a {type_}"));
        }
    }
}

/// Words, numbers, strings and punctuation, comments left out.
fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            i += 2;
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if c == '"' || c == '\'' {
            let start = i;
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(chars[start..i.min(chars.len())].iter().collect());
        } else if c.is_alphanumeric() || c == '_' || c == '.' || c == '-' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric() || matches!(chars[i], '_' | '.' | '-'))
            {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c.is_whitespace() {
            i += 1;
        } else {
            out.push(c.to_string());
            i += 1;
        }
    }
    out
}

struct Parser<'a> {
    tokens: &'a [String],
    at: usize,
    package: String,
}

impl Parser<'_> {
    fn next(&mut self) -> Option<&str> {
        let t = self.tokens.get(self.at)?;
        self.at += 1;
        Some(t)
    }

    fn peek(&self) -> Option<&str> {
        self.tokens.get(self.at).map(String::as_str)
    }

    /// Skips to the end of the statement: past its `;` at depth 0, or past a block it opens.
    fn skip_statement(&mut self) {
        let mut depth = 0i32;
        while let Some(t) = self.next() {
            match t {
                "{" | "[" | "(" => depth += 1,
                "}" | "]" | ")" => depth -= 1,
                ";" if depth == 0 => return,
                _ => {}
            }
            if depth == 0 && t == "}" {
                return;
            }
        }
    }

    /// The contents of a block or a file, until its `}`.
    fn body(&mut self, protos: &mut Protos, message: Option<&str>) {
        while let Some(t) = self.peek() {
            match t {
                "}" => {
                    self.at += 1;
                    return;
                }
                "package" => {
                    self.at += 1;
                    self.package = self.next().unwrap_or_default().to_owned();
                    self.skip_statement();
                }
                "message" => {
                    self.at += 1;
                    let name = self.next().unwrap_or_default().to_owned();
                    self.at += 1; // {
                    protos.messages.entry(name.clone()).or_default();
                    self.body(protos, Some(&name));
                }
                "enum" => {
                    self.at += 1;
                    let name = self.next().unwrap_or_default().to_owned();
                    self.at += 1; // {
                    let values = self.enum_values();
                    protos.enums.insert(name, values);
                }
                "service" => {
                    self.at += 1;
                    let name = self.next().unwrap_or_default().to_owned();
                    self.at += 1; // {
                    self.service(protos, &name);
                }
                "oneof" => {
                    self.at += 2; // oneof name
                    self.at += 1; // {
                    self.body(protos, message);
                }
                "option" | "reserved" | "extensions" | "syntax" | "import" | "extend" | ";" => {
                    self.skip_statement()
                }
                _ => match message {
                    Some(m) => self.field(protos, m),
                    None => self.skip_statement(),
                },
            }
        }
    }

    fn field(&mut self, protos: &mut Protos, message: &str) {
        let mut repeated = false;
        let mut t = self.next().unwrap_or_default().to_owned();
        if t == "repeated" || t == "optional" {
            repeated = t == "repeated";
            t = self.next().unwrap_or_default().to_owned();
        }
        let mut map_value = None;
        if t == "map" {
            self.at += 1; // <
            let _key = self.next();
            self.at += 1; // ,
            map_value = Some(simple(self.next().unwrap_or_default()));
            self.at += 1; // >
        }
        let name = self.next().unwrap_or_default().to_owned();
        self.skip_statement();
        let field = Field {
            name,
            type_: simple(&t),
            repeated,
            map_value,
        };
        if let Some(fields) = protos.messages.get_mut(message) {
            fields.push(field);
        }
    }

    fn enum_values(&mut self) -> Vec<String> {
        let mut values = Vec::new();
        while let Some(t) = self.peek() {
            match t {
                "}" => {
                    self.at += 1;
                    break;
                }
                "option" | "reserved" => self.skip_statement(),
                name => {
                    values.push(name.to_owned());
                    self.skip_statement();
                }
            }
        }
        values
    }

    fn service(&mut self, protos: &mut Protos, service: &str) {
        while let Some(t) = self.next() {
            match t {
                "}" => return,
                "rpc" => {
                    let method = self.next().unwrap_or_default().to_owned();
                    let mut rpc = Rpc::default();
                    self.at += 1; // (
                    rpc.input = simple(self.next().unwrap_or_default());
                    self.at += 2; // ) returns
                    self.at += 1; // (
                    rpc.output = simple(self.next().unwrap_or_default());
                    self.at += 1; // )
                    if self.peek() == Some("{") {
                        self.at += 1;
                        rpc.options = self.rpc_options();
                    } else {
                        self.skip_statement();
                    }
                    let procedure = format!("/{}.{service}/{method}", self.package);
                    protos.rpcs.insert(procedure, rpc);
                }
                _ => {}
            }
        }
    }

    /// `option (name) = VALUE;` lines until the `}`, as `name=VALUE`.
    fn rpc_options(&mut self) -> Vec<String> {
        let mut options = Vec::new();
        while let Some(t) = self.next() {
            match t {
                "}" => break,
                "option" => {
                    let mut words = Vec::new();
                    while let Some(w) = self.next() {
                        if w == ";" {
                            break;
                        }
                        if !matches!(w, "(" | ")" | "=") {
                            words.push(w.to_owned());
                        }
                    }
                    options.push(words.join("="));
                }
                _ => {}
            }
        }
        options
    }
}

/// The last segment of a (possibly qualified) type name.
fn simple(name: &str) -> String {
    name.rsplit('.').next().unwrap_or(name).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PROTO: &str = r#"
syntax = "proto3";
package metalstack.api.v2;
// A service.
service ThingService {
  rpc Get(ThingServiceGetRequest) returns (ThingServiceGetResponse) {
    option (project_roles) = PROJECT_ROLE_VIEWER;
    option (auditing) = AUDITING_EXCLUDED;
  }
}
message Thing {
  option (buf.validate.message).oneof = {fields: ["a", "b"], required: true};
  string thing_id = 1 [(buf.validate.field).string = {max_len: 128}];
  repeated Part parts = 2;
  map<string, Role> roles = 3;
  google.protobuf.Timestamp created_at = 4;
  oneof kind { int64 size = 5; }
  message Part { optional string name = 1; }
}
enum Role { ROLE_UNSPECIFIED = 0; ROLE_OWNER = 1 [(enum_string_value) = "owner"]; }
"#;

    #[test]
    fn a_proto_s_messages_enums_and_rpcs_are_read_and_protojson_checked() {
        let mut protos = Protos::default();
        protos.parse(PROTO);
        let rpc = &protos.rpcs["/metalstack.api.v2.ThingService/Get"];
        assert_eq!(rpc.output, "ThingServiceGetResponse");
        assert_eq!(rpc.options[0], "project_roles=PROJECT_ROLE_VIEWER");
        assert_eq!(protos.enums["Role"], ["ROLE_UNSPECIFIED", "ROLE_OWNER"]);
        let good = json!({"thingId": "x", "parts": [{"name": "p"}], "roles": {"a": "ROLE_OWNER"},
                          "createdAt": "2026-01-01T00:00:00Z", "size": "5"});
        assert_eq!(protos.check("Thing", &good), Vec::<String>::new());
        let bad = json!({"thing": 1, "parts": {}, "roles": {"a": "OWNER"}, "size": true});
        let errors = protos.check("Thing", &bad);
        assert_eq!(errors.len(), 4, "{errors:#?}");
    }
}
