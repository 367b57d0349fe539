//! A mock apiserver in the test's process: kube's `Client` talks to it through a tower service,
//! as kube-rs's own controller examples do. It holds objects by URL path, answers GETs from
//! them (404 otherwise), applies writes (merge, JSON and server-side-apply patches, creates,
//! deletes) and records every write, so a test can say exactly what a reconcile wrote.

use axum::http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// One write a reconcile made.
#[derive(Clone, Debug)]
pub struct Write {
    pub method: Method,
    pub path: String,
    pub content_type: String,
    /// What was sent, for a failing test's message.
    #[allow(dead_code)]
    pub body: Value,
}

impl Write {
    /// `PATCH …/status` by server-side apply.
    pub fn is_status(&self) -> bool {
        self.method == Method::PATCH && self.path.ends_with("/status")
    }

    pub fn is_event(&self) -> bool {
        is_event_path(&self.path)
    }
}

/// Is `path` where Events are written?
fn is_event_path(path: &str) -> bool {
    path.contains("/apis/events.k8s.io/")
}

#[derive(Clone, Default)]
pub struct MockApiserver {
    objects: Arc<Mutex<BTreeMap<String, Value>>>,
    writes: Arc<Mutex<Vec<Write>>>,
    /// The path of every GET, in order.
    reads: Arc<Mutex<Vec<String>>>,
    /// Answer status writes with 403, as an apiserver does for a role without them.
    pub refuse_status: Arc<std::sync::atomic::AtomicBool>,
    /// Never answer Event writes, as a congested apiserver may take its time.
    pub stall_events: Arc<std::sync::atomic::AtomicBool>,
    /// The last resourceVersion handed out: every stored change gets a new one.
    version: Arc<std::sync::atomic::AtomicU64>,
}

/// The URL path of `obj`.
pub fn path_of<K: kube::Resource<DynamicType = ()>>(obj: &K) -> String {
    let meta = obj.meta();
    format!(
        "{}/{}",
        K::url_path(&(), meta.namespace.as_deref()),
        meta.name.clone().unwrap_or_default()
    )
}

impl MockApiserver {
    /// Stores `obj` (with apiVersion and kind) where the apiserver would serve it.
    pub fn put<K>(&self, obj: &K)
    where
        K: kube::Resource<DynamicType = ()> + serde::Serialize,
    {
        let mut value = serde_json::to_value(obj).expect("serializable");
        value["apiVersion"] = json!(K::api_version(&()));
        value["kind"] = json!(K::kind(&()));
        value["metadata"]["resourceVersion"] = json!(self.next_version());
        self.lock_objects().insert(path_of(obj), value);
    }

    /// The object stored at `obj`'s path, as the apiserver has it now.
    pub fn get<K>(&self, obj: &K) -> K
    where
        K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned,
    {
        let value = self
            .lock_objects()
            .get(&path_of(obj))
            .cloned()
            .expect("stored");
        serde_json::from_value(value).expect("typed")
    }

    /// The writes so far, and forgets them.
    pub fn take_writes(&self) -> Vec<Write> {
        std::mem::take(&mut *self.writes.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The writes since the last take, Events left out (they report steps, they are none).
    pub fn take_object_writes(&self) -> Vec<Write> {
        let writes = self.take_writes().into_iter();
        writes.filter(|w| !w.is_event()).collect()
    }

    fn next_version(&self) -> String {
        let v = self
            .version
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        v.to_string()
    }

    fn lock_objects(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Value>> {
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many GETs were of `path`.
    pub fn reads_of(&self, path: &str) -> usize {
        let reads = self.reads.lock().unwrap_or_else(|p| p.into_inner());
        reads.iter().filter(|p| *p == path).count()
    }

    pub fn client(&self) -> kube::Client {
        let server = self.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            let server = server.clone();
            async move { Ok::<_, std::convert::Infallible>(server.answer(request).await) }
        });
        kube::Client::new(service, "default")
    }

    async fn answer(&self, request: Request<Body>) -> Response<Body> {
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let content_type = request
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = request.into_body().collect_bytes().await.expect("body");
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            // kube sends every body as JSON, server-side apply's too.
            serde_json::from_slice(&bytes).expect("a JSON body")
        };
        if method == Method::GET {
            let mut reads = self.reads.lock().unwrap_or_else(|p| p.into_inner());
            reads.push(path.clone());
        } else {
            let write = Write {
                method: method.clone(),
                path: path.clone(),
                content_type: content_type.clone(),
                body: body.clone(),
            };
            self.writes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(write);
        }
        if is_event_path(&path) && self.stall_events.load(std::sync::atomic::Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let refused = path.ends_with("/status")
            && self.refuse_status.load(std::sync::atomic::Ordering::SeqCst);
        if refused {
            return reply(
                StatusCode::FORBIDDEN,
                &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403, "message": "status writes are refused"}),
            );
        }
        match self.apply(&method, &path, &content_type, body) {
            Ok((status, value)) => reply(status, &value),
            Err(status) => reply(
                status,
                &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "NotFound", "code": status.as_u16(), "message": format!("{path} not found")}),
            ),
        }
    }

    fn apply(
        &self,
        method: &Method,
        path: &str,
        content_type: &str,
        body: Value,
    ) -> Result<(StatusCode, Value), StatusCode> {
        let mut objects = self.lock_objects();
        let (target, status_only) = match path.strip_suffix("/status") {
            Some(object) => (object.to_owned(), true),
            None => (path.to_owned(), false),
        };
        match *method {
            Method::GET => match objects.get(&target) {
                Some(object) => Ok((StatusCode::OK, object.clone())),
                None if !is_collection(&target) => Err(StatusCode::NOT_FOUND),
                // A collection: the objects stored right below it.
                None => {
                    let prefix = format!("{target}/");
                    let items: Vec<Value> = objects
                        .iter()
                        .filter(|(key, _)| {
                            key.strip_prefix(&prefix)
                                .is_some_and(|rest| !rest.contains('/'))
                        })
                        .map(|(_, object)| object.clone())
                        .collect();
                    let list = json!({"kind": "List", "apiVersion": "v1",
                        "metadata": {"resourceVersion": "1"}, "items": items});
                    Ok((StatusCode::OK, list))
                }
            },
            Method::POST => {
                let mut created = body;
                let name = created["metadata"]["name"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| "generated".into());
                created["metadata"]["name"] = json!(name);
                created["metadata"]["resourceVersion"] = json!(self.next_version());
                objects.insert(format!("{target}/{name}"), created.clone());
                Ok((StatusCode::CREATED, created))
            }
            Method::DELETE => objects
                .remove(&target)
                .map(|o| (StatusCode::OK, o))
                .ok_or(StatusCode::NOT_FOUND),
            Method::PATCH => {
                let current = objects.get(&target).cloned();
                let mut object = match (current, content_type) {
                    (Some(o), _) => o,
                    (None, "application/apply-patch+yaml") => json!({}),
                    (None, _) => return Err(StatusCode::NOT_FOUND),
                };
                match content_type {
                    "application/json-patch+json" => {
                        let patch: json_patch::Patch =
                            serde_json::from_value(body).expect("a JSON patch");
                        json_patch::patch(&mut object, &patch)
                            .map_err(|_| StatusCode::UNPROCESSABLE_ENTITY)?;
                    }
                    "application/apply-patch+yaml" if status_only => {
                        object["status"] = body["status"].clone()
                    }
                    _ => json_patch::merge(&mut object, &body),
                }
                object["metadata"]["resourceVersion"] = json!(self.next_version());
                objects.insert(target, object.clone());
                Ok((StatusCode::OK, object))
            }
            _ => Err(StatusCode::METHOD_NOT_ALLOWED),
        }
    }
}

/// Does `path` name a collection (`…/namespaces/ns/plural`, `/apis/g/v/plural`) rather than an
/// object in one?
fn is_collection(path: &str) -> bool {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] | ["apis", _, _version, rest @ ..] => rest,
        _ => return false,
    };
    matches!(rest, [_plural] | ["namespaces", _, _plural])
}

fn reply(status: StatusCode, value: &Value) -> Response<Body> {
    let mut response = Response::new(Body::from(serde_json::to_vec(value).expect("JSON")));
    *response.status_mut() = status;
    response.headers_mut().insert(
        "content-type",
        axum::http::HeaderValue::from_static("application/json"),
    );
    response
}
