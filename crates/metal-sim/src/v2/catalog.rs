//! What every token may read of the master data (methods of visibility SELF): partitions, sizes
//! and images as `metalstack.api.v2` messages, and `ImageService/Latest`, which resolves
//! `<os>-<major>.<minor>` to its newest patch as metal-api's `/latest` does, and
//! `SizeImageConstraintService/Try`, which finds the size and the image and checks the size's
//! image constraints (those of the simulator's inventory).

use super::connect::{Code, ConnectError};
use crate::state::State;
use metal_api::types::{Image, Labels, Partition, Size};
use serde_json::{Value, json};

fn meta(labels: &Labels) -> Value {
    json!({"labels": {"labels": labels}})
}

fn partition(p: &Partition) -> Value {
    json!({"id": p.id, "meta": meta(&p.labels), "description": p.description})
}

fn size(s: &Size) -> Value {
    let constraints: Vec<Value> = s
        .constraints
        .iter()
        .map(|c| {
            let mut constraint = json!({
                "type": format!("SIZE_CONSTRAINT_TYPE_{}", c.type_.to_uppercase()),
                "min": c.min.to_string(),
                "max": c.max.to_string(),
            });
            if !c.identifier.is_empty() {
                constraint["identifier"] = c.identifier.clone().into();
            }
            constraint
        })
        .collect();
    json!({"id": s.id, "meta": meta(&s.labels), "name": s.name, "description": s.description,
           "constraints": constraints})
}

fn image(i: &Image) -> Value {
    let features: Vec<String> = i
        .features
        .iter()
        .map(|f| format!("IMAGE_FEATURE_{}", f.to_uppercase()))
        .collect();
    let mut image = json!({"id": i.id, "url": i.url, "name": i.name, "description": i.description,
                           "features": features, "expiresAt": i.expiration_date.to_string()});
    if !i.classification.is_empty() {
        let classification = i.classification.to_uppercase();
        image["classification"] = format!("IMAGE_CLASSIFICATION_{classification}").into();
    }
    image
}

/// `ProjectService/Get {project}`.
pub fn project(state: &State, request: &Value) -> Result<Value, ConnectError> {
    let id = request["project"].as_str().unwrap_or_default();
    let found = state.projects.get(id);
    let p = found.ok_or_else(|| super::connect::not_found("Project", id))?;
    Ok(
        json!({"project": {"uuid": p.meta.id, "name": p.name, "description": p.description,
                          "tenant": p.tenant_id}}),
    )
}

/// `HealthService/Get`: every service the simulator stands in for is healthy.
pub fn health(_: &State, _: &Value) -> Result<Value, ConnectError> {
    let healthy = |name: &str| json!({"name": name, "status": "SERVICE_STATUS_HEALTHY"});
    let services = ["SERVICE_IPAM", "SERVICE_RETHINK", "SERVICE_MACHINES"].map(healthy);
    Ok(json!({"health": {"services": services}}))
}

/// `PartitionService/List`.
pub fn partitions(state: &State, _: &Value) -> Result<Value, ConnectError> {
    let partitions: Vec<Value> = state.partitions.values().map(partition).collect();
    Ok(json!({"partitions": partitions}))
}

/// `SizeService/List`.
pub fn sizes(state: &State, _: &Value) -> Result<Value, ConnectError> {
    let sizes: Vec<Value> = state.sizes.values().map(size).collect();
    Ok(json!({"sizes": sizes}))
}

/// `ImageService/List`.
pub fn images(state: &State, _: &Value) -> Result<Value, ConnectError> {
    let images: Vec<Value> = state.images.values().map(image).collect();
    Ok(json!({"images": images}))
}

/// `ImageService/Latest {os}`.
pub fn latest(state: &State, request: &Value) -> Result<Value, ConnectError> {
    let os = request["os"].as_str().unwrap_or_default();
    match state.image_latest(os) {
        Ok(found) => Ok(json!({"image": image(found)})),
        Err(_) => Err(ConnectError::new(
            Code::NotFound,
            format!("no image for os:{os:?} found"),
        )),
    }
}

/// `SizeImageConstraintService/Try {size, image}`: the size and the image (in full or
/// `<os>-<major>.<minor>`) must be known, and the size's constraints must allow the image
/// (`invalid_argument` otherwise, as metal-apiserver answers).
pub fn try_size_image(state: &State, request: &Value) -> Result<Value, ConnectError> {
    let size = request["size"].as_str().unwrap_or_default();
    let image = request["image"].as_str().unwrap_or_default();
    if state.size(size).is_err() {
        return Err(super::connect::not_found("Size", size));
    }
    if state.image_latest(image).is_err() {
        return Err(super::connect::not_found("Image", image));
    }
    match state.size_image_refusal(size, image) {
        Some(refusal) => Err(ConnectError::new(Code::InvalidArgument, refusal)),
        None => Ok(json!({})),
    }
}
