//! capms's v2 client against metal-apiserver's protos: every message, field and enum value it
//! sends or reads is one the protos define, with the field's type, and every request goes to the
//! procedure the protos give its message. The client's types are traced through their serde
//! derives (what they read and write, not a sample of it), and every type the client declares
//! must be reached by the trace.

use crate::support;
use metalstack_api::types::Rpc;
use metalstack_api::types::catalog::{
    HealthServiceGetRequest, ImageClassification, ImageFeature, ImageServiceLatestRequest,
    ImageServiceListRequest, PartitionServiceListRequest, ProjectServiceGetRequest,
    SizeConstraintType, SizeImageConstraintServiceTryRequest, SizeServiceListRequest,
};
use metalstack_api::types::machine::{
    IPProtocol, MachineAllocationType, MachineBMCCommand, MachineLiveliness,
    MachineProvisioningEventState, MachineProvisioningEventType, MachineServiceBMCCommandRequest,
    MachineServiceCreateRequest, MachineServiceDeleteRequest, MachineServiceGetRequest,
    MachineServiceListRequest,
};
use metalstack_api::types::network::{
    IPServiceCreateRequest, IPServiceDeleteRequest, IPServiceGetRequest, IPServiceListRequest,
    IPType, NATType, NetworkAddressFamily, NetworkServiceCreateRequest,
    NetworkServiceDeleteRequest, NetworkServiceGetRequest, NetworkServiceListBaseNetworksRequest,
    NetworkServiceListRequest, NetworkType,
};
use metalstack_api::types::token::{
    ProjectRole, SELF_METHODS, TokenServiceCreateRequest, TokenServiceRefreshRequest,
};
use serde::de::DeserializeOwned;
use serde_reflection::{ContainerFormat, Format, Registry, Tracer, TracerConfig};
use std::collections::BTreeSet;
use support::protos::{Field, Protos};

/// What the trace of one request found: its procedure and the names of its two messages.
struct Traced {
    procedure: &'static str,
    request: String,
    response: String,
}

fn name(format: Format) -> String {
    match format {
        Format::TypeName(name) => name,
        other => panic!("a message traces as a named type, not {other:?}"),
    }
}

fn trace<R: Rpc + DeserializeOwned>(tracer: &mut Tracer) -> Traced {
    let (request, _) = tracer
        .trace_simple_type::<R>()
        .unwrap_or_else(|e| panic!("{}: {e}", R::PROCEDURE));
    let (response, _) = tracer
        .trace_simple_type::<R::Response>()
        .unwrap_or_else(|e| panic!("{}: {e}", R::PROCEDURE));
    Traced {
        procedure: R::PROCEDURE,
        request: name(request),
        response: name(response),
    }
}

/// Does a traced field's format fit the proto field's type? (`Option` was unwrapped.)
fn fits(field: &Field, format: &Format) -> Result<(), String> {
    match (format, &field.map_value) {
        (Format::Map { value, .. }, Some(value_type)) => {
            let value_field = Field {
                type_: value_type.clone(),
                repeated: false,
                map_value: None,
                ..field.clone()
            };
            return fits(&value_field, value);
        }
        (Format::Map { .. }, None) => return Err("a map, not one in the protos".into()),
        (_, Some(_)) => return Err("not the map the protos have".into()),
        _ => {}
    }
    let (format, repeated) = match format {
        Format::Seq(inner) => (inner.as_ref(), true),
        other => (other, false),
    };
    if repeated != field.repeated {
        return Err(format!(
            "repeated is {repeated}, the protos say {}",
            field.repeated
        ));
    }
    let type_ = field.type_.as_str();
    let scalar = |allowed: &[&str]| allowed.contains(&type_);
    let ok = match format {
        Format::Option(inner) => return fits(field, inner),
        Format::TypeName(name) => name == type_,
        Format::Str => scalar(&["string", "Timestamp", "Duration", "int64", "uint64"]),
        Format::Bool => scalar(&["bool"]),
        Format::U32 => scalar(&["uint32", "fixed32"]),
        Format::I32 => scalar(&["int32", "sint32", "sfixed32"]),
        Format::U64 => scalar(&["uint64", "fixed64"]),
        Format::I64 => scalar(&["int64", "sint64", "sfixed64"]),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{format:?} does not fit the proto type {type_}"))
    }
}

/// Every way `registry` departs from the protos.
fn departures(protos: &Protos, registry: &Registry) -> Vec<String> {
    let mut found = Vec::new();
    for (name, container) in registry {
        match container {
            ContainerFormat::Struct(fields) => {
                let Some(declared) = protos.messages.get(name) else {
                    found.push(format!("{name}: no message of the protos"));
                    continue;
                };
                for traced in fields {
                    let field = declared
                        .iter()
                        .find(|f| f.json_name() == traced.name || f.name == traced.name);
                    match field {
                        None => found.push(format!("{name}.{}: not a field", traced.name)),
                        Some(field) => {
                            if let Err(e) = fits(field, &traced.value) {
                                found.push(format!("{name}.{}: {e}", traced.name));
                            }
                        }
                    }
                }
            }
            ContainerFormat::UnitStruct => {
                if !protos.messages.contains_key(name) {
                    found.push(format!("{name}: no message of the protos"));
                }
            }
            ContainerFormat::Enum(variants) => {
                let Some(values) = protos.enums.get(name) else {
                    found.push(format!("{name}: no enum of the protos"));
                    continue;
                };
                for variant in variants.values() {
                    if !values.contains(&variant.name) {
                        found.push(format!("{name}: {} is not one of its values", variant.name));
                    }
                }
            }
            other => found.push(format!("{name}: {other:?} is no protojson message")),
        }
    }
    found
}

/// A tracer whose strings read as RFC 3339 times, so that a timestamp's deserializer takes them.
fn tracer() -> Tracer {
    let config = TracerConfig::default()
        .default_borrowed_str_value("2026-01-01T00:00:00Z")
        .default_string_value("2026-01-01T00:00:00Z".into());
    Tracer::new(config)
}

fn trace_enum<E: DeserializeOwned>(tracer: &mut Tracer) {
    tracer
        .trace_simple_type::<E>()
        .unwrap_or_else(|e| panic!("{}: {e}", std::any::type_name::<E>()));
}

/// Every request the client sends (and the token request capms prints for an operator to
/// send), traced with the messages answering it. Each enum is traced
/// first on its own: inside a message, the tracer reaches only one of its values.
fn traced_calls(tracer: &mut Tracer) -> Vec<Traced> {
    trace_enum::<IPProtocol>(tracer);
    trace_enum::<IPType>(tracer);
    trace_enum::<ImageClassification>(tracer);
    trace_enum::<ImageFeature>(tracer);
    trace_enum::<NATType>(tracer);
    trace_enum::<SizeConstraintType>(tracer);
    trace_enum::<MachineAllocationType>(tracer);
    trace_enum::<MachineBMCCommand>(tracer);
    trace_enum::<MachineLiveliness>(tracer);
    trace_enum::<MachineProvisioningEventState>(tracer);
    trace_enum::<MachineProvisioningEventType>(tracer);
    trace_enum::<NetworkAddressFamily>(tracer);
    trace_enum::<ProjectRole>(tracer);
    trace_enum::<NetworkType>(tracer);
    vec![
        trace::<MachineServiceGetRequest>(tracer),
        trace::<MachineServiceListRequest>(tracer),
        trace::<MachineServiceCreateRequest>(tracer),
        trace::<MachineServiceDeleteRequest>(tracer),
        trace::<MachineServiceBMCCommandRequest>(tracer),
        trace::<NetworkServiceCreateRequest>(tracer),
        trace::<NetworkServiceDeleteRequest>(tracer),
        trace::<NetworkServiceListRequest>(tracer),
        trace::<NetworkServiceListBaseNetworksRequest>(tracer),
        trace::<IPServiceCreateRequest>(tracer),
        trace::<IPServiceDeleteRequest>(tracer),
        trace::<IPServiceListRequest>(tracer),
        trace::<ImageServiceLatestRequest>(tracer),
        trace::<SizeImageConstraintServiceTryRequest>(tracer),
        trace::<ImageServiceListRequest>(tracer),
        trace::<PartitionServiceListRequest>(tracer),
        trace::<SizeServiceListRequest>(tracer),
        trace::<ProjectServiceGetRequest>(tracer),
        trace::<HealthServiceGetRequest>(tracer),
        trace::<NetworkServiceGetRequest>(tracer),
        trace::<IPServiceGetRequest>(tracer),
        trace::<TokenServiceRefreshRequest>(tracer),
        trace::<TokenServiceCreateRequest>(tracer),
    ]
}

/// The lines of the client's type sources, trimmed.
fn type_source_lines() -> Vec<String> {
    let dir = support::repo_root().join("crates/metalstack-api/src/types");
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("the client's types") {
        let text = std::fs::read_to_string(entry.expect("an entry").path()).expect("a source");
        lines.extend(text.lines().map(|l| l.trim().to_owned()));
    }
    lines
}

/// The types the sources declare: the word after `pub struct ` or `pub enum `.
fn declared_types(lines: &[String]) -> BTreeSet<String> {
    let declared = lines.iter().filter_map(|line| {
        let rest = line
            .strip_prefix("pub struct ")
            .or_else(|| line.strip_prefix("pub enum "))?;
        rest.split(|c: char| !c.is_alphanumeric())
            .next()
            .map(str::to_owned)
    });
    declared.collect()
}

/// The requests the sources give a procedure: `rpc!("Service", "Method", Request => Response)`.
fn declared_requests(lines: &[String]) -> BTreeSet<String> {
    let declared = lines.iter().filter_map(|line| {
        let rest = line.strip_prefix("rpc!(")?;
        let (request, _) = rest.split_once(" =>")?;
        request.rsplit(", ").next().map(str::to_owned)
    });
    declared.collect()
}

#[test]
fn every_message_field_and_enum_value_the_v2_client_sends_or_reads_is_in_the_protos() {
    let Some(protos) = Protos::load() else { return };
    let mut tracer = tracer();
    let calls = traced_calls(&mut tracer);
    for call in &calls {
        let rpc = protos
            .rpcs
            .get(call.procedure)
            .unwrap_or_else(|| panic!("{} is not a method of the protos", call.procedure));
        assert_eq!(
            (rpc.input.as_str(), rpc.output.as_str()),
            (call.request.as_str(), call.response.as_str()),
            "{}",
            call.procedure
        );
    }
    let registry = tracer.registry().expect("every traced type complete");
    assert_eq!(departures(&protos, &registry), Vec::<String>::new());

    let traced: BTreeSet<String> = registry.keys().cloned().collect();
    let lines = type_source_lines();
    let untraced: Vec<String> = declared_types(&lines)
        .difference(&traced)
        .cloned()
        .collect();
    assert!(
        untraced.is_empty(),
        "types of the client no call reaches: {untraced:?}"
    );
    let requests: BTreeSet<String> = calls.iter().map(|c| c.request.clone()).collect();
    assert_eq!(
        declared_requests(&lines),
        requests,
        "the requests traced here"
    );
}

/// The check above finds a field, a type and an enum value the protos do not have.
#[test]
fn a_message_departing_from_the_protos_is_found() {
    let Some(protos) = Protos::load() else { return };
    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct MachineServiceGetRequest {
        uuid: u32,
        machine: String,
        command: MachineBMCCommand,
    }
    #[derive(serde::Deserialize)]
    enum MachineBMCCommand {
        #[serde(rename = "MACHINE_BMC_COMMAND_REBOOT")]
        Reboot,
    }
    let mut tracer = tracer();
    trace_enum::<MachineBMCCommand>(&mut tracer);
    tracer
        .trace_simple_type::<MachineServiceGetRequest>()
        .expect("traced");
    let registry = tracer.registry().expect("complete");
    let found = departures(&protos, &registry);
    assert_eq!(
        found,
        [
            "MachineBMCCommand: MACHINE_BMC_COMMAND_REBOOT is not one of its values",
            "MachineServiceGetRequest.uuid: U32 does not fit the proto type string",
            "MachineServiceGetRequest.machine: not a field",
            "MachineServiceGetRequest.command: not a field",
        ]
    );
}

/// The token an operator creates for capms (`capms token-request`) allows exactly the methods
/// of visibility SELF that the client calls, which an API token may call only when its
/// permissions list them; and the request fits the protos.
#[test]
fn a_token_for_capms_allows_every_self_method_the_client_calls() {
    let Some(protos) = Protos::load() else { return };
    let calls = traced_calls(&mut tracer());
    let of_self = |procedure: &str| {
        let rpc = &protos.rpcs[procedure];
        rpc.options
            .iter()
            .any(|o| o == "visibility=VISIBILITY_SELF")
    };
    let called: BTreeSet<&str> = calls
        .iter()
        .map(|c| c.procedure)
        .filter(|p| *p != TokenServiceCreateRequest::PROCEDURE && of_self(p))
        .collect();
    assert_eq!(BTreeSet::from(SELF_METHODS), called);
    let request = TokenServiceCreateRequest::for_capms("00000000-0000-0000-0000-000000000001", 600);
    let request = serde_json::to_value(request).expect("json");
    assert_eq!(
        protos.check("TokenServiceCreateRequest", &request),
        Vec::<String>::new()
    );
}
