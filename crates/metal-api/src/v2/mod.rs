//! metal-api's calls answered through metal-stack's API v2 (metal-apiserver) with a project
//! token: each v1 call capms makes becomes the v2 call that does the same, and each answer is
//! read into metal-api's model, so that what builds on the [`crate::Client`] works unchanged over
//! either API. Tags are v2's labels (`key=value`); a machine's are its own labels and those its
//! allocation was given. A v2 failure reads as the v1 status of its Connect code.
//!
//! What a project token cannot do through v2 is refused, not faked: pinning a machine by its
//! uuid (an admin's), reinstalling (gone from v2), listing other projects' machines and networks
//! (a project sees its own and the base networks).

mod catalog;
mod machines;
mod networks;

use crate::error::Error;
use crate::types::Labels;
use metalstack_api::Code;

/// The v2 client and the project its token works in.
pub(crate) struct Backend {
    pub(crate) api: metalstack_api::Client,
    pub(crate) project: String,
}

/// Why a call through v2 failed.
pub(crate) enum Failure {
    Call(metalstack_api::Error),
    /// Something v2 does not offer a project token; the message says what and why.
    Unsupported(String),
}

impl From<metalstack_api::Error> for Failure {
    fn from(e: metalstack_api::Error) -> Failure {
        Failure::Call(e)
    }
}

pub(crate) type Result<T> = std::result::Result<T, Failure>;

impl Failure {
    /// The v1 error of `endpoint` this failure means.
    /// `origin` names where the credentials came from (a Secret), if not from capms' own flags.
    pub(crate) fn into_error(self, endpoint: &'static str, origin: Option<&str>) -> Error {
        let (status, message) = match self {
            // A refusal of the request as given: v1's 422, never asked again.
            Failure::Unsupported(message) => (422, message),
            Failure::Call(metalstack_api::Error::Transport { source, .. }) => {
                let (via, source) = crate::error::as_given_by(origin, source);
                return Error::Transport {
                    endpoint,
                    via,
                    source,
                };
            }
            // An answer of another shape: what answers there is not metal-apiserver, or not one
            // of the version whose protos capms speaks.
            Failure::Call(e @ metalstack_api::Error::Decode { .. }) => {
                return Error::Decode {
                    endpoint,
                    via: crate::error::via(origin),
                    detail: e.to_string(),
                };
            }
            // Every procedure capms calls is metal-apiserver's: what answers there is not, or is
            // of a version without it.
            Failure::Call(e) if e.code() == metalstack_api::Code::Unimplemented => {
                let url = origin.map_or_else(|| "the URL".into(), |o| format!("the URL {o} gives"));
                let message = format!(
                    "{e} ({url} serves no such procedure: not metal-apiserver, or a version without it)"
                );
                (v1_status(e.code()), message)
            }
            Failure::Call(e) => (v1_status(e.code()), e.to_string()),
        };
        Error::Api {
            endpoint,
            status,
            message,
        }
    }
}

/// The status metal-api v1 answers what a Connect code means with: a refusal of a request that
/// cannot be met as given (no machine available) is v1's 422.
fn v1_status(code: Code) -> u16 {
    match code {
        Code::FailedPrecondition => 422,
        other => other.http_status(),
    }
}

impl Backend {
    /// The machines `find` finds, each read as `R` (a summary), as v1's find decodes them.
    pub(crate) async fn machine_find_as<R: serde::de::DeserializeOwned>(
        &self,
        find: &crate::types::MachineFindRequest,
    ) -> Result<Vec<R>> {
        let machines = self.machine_find(find).await?;
        let read = machines.into_iter().map(|m| {
            let value = serde_json::to_value(m).map_err(|e| e.to_string())?;
            serde_json::from_value(value).map_err(|e| e.to_string())
        });
        read.collect::<std::result::Result<_, String>>()
            .map_err(|e| Failure::Unsupported(format!("a machine read through API v2: {e}")))
    }
}

/// v1 tags (`key=value`; a bare key) as v2 labels.
pub(crate) fn labels_of(tags: &[String]) -> Labels {
    let pairs = tags.iter().map(|t| match t.split_once('=') {
        Some((k, v)) => (k.to_owned(), v.to_owned()),
        None => (t.clone(), String::new()),
    });
    pairs.collect()
}

/// v2 labels as v1 tags: `key=value`, a bare key for an empty value.
pub(crate) fn tags_of(labels: &Labels) -> Vec<String> {
    let tags = labels.iter().map(|(k, v)| {
        if v.is_empty() {
            k.clone()
        } else {
            format!("{k}={v}")
        }
    });
    tags.collect()
}

/// Do `have` carry every one of `wanted`?
pub(crate) fn carries(have: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| have.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_and_labels_read_as_each_other() {
        let tags = vec![
            "cluster.x-k8s.io/cluster-name=c".to_owned(),
            "bare".to_owned(),
        ];
        let labels = labels_of(&tags);
        assert_eq!(labels["bare"], "");
        let mut back = tags_of(&labels);
        back.sort();
        assert_eq!(back, ["bare", "cluster.x-k8s.io/cluster-name=c"]);
    }

    #[test]
    fn a_v2_failure_reads_as_the_v1_status_its_category_expects() {
        let failed = |code| {
            Failure::Call(metalstack_api::Error::Connect {
                procedure: "/p".into(),
                code,
                message: "no machine available".into(),
            })
            .into_error("machine_allocate", None)
        };
        assert!(matches!(
            failed(Code::FailedPrecondition).category(),
            crate::error::Category::NoMachineAvailable
        ));
        assert!(failed(Code::NotFound).is_not_found());
        assert!(failed(Code::ResourceExhausted).is_transient());
        assert!(!failed(Code::PermissionDenied).is_transient());
        let refused = Failure::Unsupported("pinning".into()).into_error("machine_allocate", None);
        assert!(!refused.is_transient());
    }

    #[test]
    fn an_answer_not_metal_apiserver_s_names_where_the_url_came_from() {
        let origin = Some("Secret ns/creds");
        let misfit = metalstack_api::Error::Decode {
            procedure: "/p".into(),
            message: "invalid type".into(),
        };
        let misfit = Failure::Call(misfit).into_error("network_find", origin);
        assert_eq!(misfit.category(), crate::error::Category::BadResponse);
        assert_eq!(
            misfit.to_string(),
            "metal-api network_find (as Secret ns/creds gives it) sent a response capms cannot \
             read: /p: the answer does not fit its message: invalid type"
        );
        let unserved = metalstack_api::Error::Connect {
            procedure: "/p".into(),
            code: Code::Unimplemented,
            message: "404 page not found".into(),
        };
        let unserved = Failure::Call(unserved).into_error("network_find", origin);
        assert!(
            unserved.to_string().ends_with(
                "(the URL Secret ns/creds gives serves no such procedure: not metal-apiserver, or a version without it)"
            ),
            "{unserved}"
        );
    }
}
