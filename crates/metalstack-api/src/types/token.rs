//! The token messages: the refresh capms makes, and the token an operator creates for capms
//! (`capms token-request` prints it), which must allow every method of visibility SELF that
//! capms calls: such a method is open to an API token only when its permissions list it.

use super::Rpc;
use super::catalog::{
    ImageServiceLatestRequest, ImageServiceListRequest, PartitionServiceListRequest,
    SizeImageConstraintServiceTryRequest, SizeServiceListRequest,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

rpc!("TokenService", "Refresh", TokenServiceRefreshRequest => TokenServiceRefreshResponse);
rpc!("TokenService", "Create", TokenServiceCreateRequest => TokenServiceCreateResponse);

/// The methods of visibility SELF that capms calls: token refresh and the catalog.
pub const SELF_METHODS: [&str; 6] = [
    TokenServiceRefreshRequest::PROCEDURE,
    ImageServiceLatestRequest::PROCEDURE,
    ImageServiceListRequest::PROCEDURE,
    SizeServiceListRequest::PROCEDURE,
    PartitionServiceListRequest::PROCEDURE,
    SizeImageConstraintServiceTryRequest::PROCEDURE,
];

/// `metalstack.api.v2.TokenServiceRefreshRequest`: empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenServiceRefreshRequest {}

/// `metalstack.api.v2.TokenServiceRefreshResponse`: what capms reads of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenServiceRefreshResponse {
    pub secret: String,
}

/// `metalstack.api.v2.TokenServiceCreateRequest`: the parts a token for capms sets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenServiceCreateRequest {
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub permissions: Vec<PermissionsByVisibility>,
    /// A protojson duration (`"28800s"`): how long the token lives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    #[serde(default)]
    pub project_roles: BTreeMap<String, ProjectRole>,
}

impl TokenServiceCreateRequest {
    /// A token for capms to manage clusters in `project` for `lifetime_seconds`: editor of the
    /// project, allowed the methods of visibility SELF it calls.
    pub fn for_capms(project: &str, lifetime_seconds: u64) -> TokenServiceCreateRequest {
        TokenServiceCreateRequest {
            description: format!("capms, the Cluster API provider, for project {project}"),
            permissions: vec![PermissionsByVisibility {
                self_methods: Some(SelfPermissions {
                    methods: SELF_METHODS.map(str::to_owned).into(),
                }),
            }],
            expires: Some(format!("{lifetime_seconds}s")),
            project_roles: [(project.to_owned(), ProjectRole::Editor)].into(),
        }
    }
}

/// `metalstack.api.v2.PermissionsByVisibility`: the one visibility capms's token needs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermissionsByVisibility {
    #[serde(rename = "self", default, skip_serializing_if = "Option::is_none")]
    pub self_methods: Option<SelfPermissions>,
}

/// `metalstack.api.v2.SelfPermissions`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelfPermissions {
    #[serde(default)]
    pub methods: Vec<String>,
}

/// `metalstack.api.v2.ProjectRole`: the roles a token for capms may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProjectRole {
    #[serde(rename = "PROJECT_ROLE_OWNER")]
    Owner,
    #[serde(rename = "PROJECT_ROLE_EDITOR")]
    Editor,
}

/// `metalstack.api.v2.TokenServiceCreateResponse`: what is read of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenServiceCreateResponse {
    pub secret: String,
}
